"""Every op family, one folder each. A new family is its folder and one line here."""

from . import (based, block_sparse, cross_entropy, decode, flash_attention, linear_attention, linear_cross_entropy, norms,
               rope, softmax, swiglu)

FAMILIES = (linear_attention, based, flash_attention, decode, block_sparse, norms, softmax, rope, swiglu,
            cross_entropy, linear_cross_entropy)
# ``ato check --op`` / ``ato bench --op`` also take these groups of families.
GROUPS = {"transformer_ops": ("norms", "softmax", "rope", "swiglu", "cross_entropy")}

OPS = {op.name: op for family in FAMILIES for op in family.OPS}
