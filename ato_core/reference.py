"""The reference math of every op, in one namespace (each lives in its family's folder,
ato_core/ops/<family>/reference.py). Written once against the Python array API
(array-api-compat), so the same function runs on NumPy (a float64 oracle), on torch
(autograd gives reference gradients) and on JAX (jax.grad). Simple enough to trust by
reading; kernels never call it."""

from .ops.based.reference import based_attention, based_step, taylor_feature_map  # noqa: F401
from .ops.cross_entropy.reference import cross_entropy  # noqa: F401
from .ops.flash_attention.reference import dropout_keep, flash_attention, flash_attention_varlen  # noqa: F401
from .ops.linear_attention.reference import (  # noqa: F401
    elu_plus_one, linear_attention, linear_attention_recurrent, linear_attention_step)
from .ops.norms.reference import dropout_residual_layer_norm, layer_norm, rms_norm  # noqa: F401
from .ops.rope.reference import rope  # noqa: F401
from .ops.softmax.reference import softmax  # noqa: F401
from .ops.swiglu.reference import swiglu  # noqa: F401
