"""ato for JAX: every ato_core op (ato_core.ops) as a differentiable, jittable JAX op.

On a GPU the kernels run compiled through jax-triton (the ``gpu`` extra); on a CPU they
run under Triton's interpreter through ``jax.pure_callback`` (this path needs torch).
``import ato_jax`` never imports jax_triton; the first GPU launch does. Each op is built
from its declaration by ato_jax.ops.build.
"""

from ato_core.ops import OPS as _OPS

from .ops import build as _build

globals().update({_name: _build(_op) for _name, _op in _OPS.items()})


def decode_schedule(block_table, seq_lens, *, block_size):
    """decode_attention's shared-prefix schedule (ato_core.ops.decode.schedule) of this batch
    layout, as int32 JAX arrays (concrete block_table and seq_lens: built on the host, once per
    layout, outside jax.jit; pass it in as arguments)."""
    import jax.numpy as jnp
    import numpy as np

    from ato_core.ops.decode import DecodeSchedule
    from ato_core.ops.decode import decode_schedule as build

    s = build(np.asarray(block_table), np.asarray(seq_lens), block_size=block_size)
    return DecodeSchedule(*(jnp.asarray(a) for a in s))


from .parallel import vocab_parallel_linear_cross_entropy  # noqa: E402

__all__ = sorted([*_OPS, "decode_schedule", "vocab_parallel_linear_cross_entropy"])
