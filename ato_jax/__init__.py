"""ato for JAX: every ato_core op (ato_core.ops) as a differentiable, jittable JAX op.

On a GPU the kernels run compiled through jax-triton (the ``gpu`` extra); on a CPU they
run under Triton's interpreter through ``jax.pure_callback`` (this path needs torch).
``import ato_jax`` never imports jax_triton; the first GPU launch does. Each op is built
from its declaration by ato_jax.ops.build.
"""

from ato_core.ops import OPS as _OPS

from .ops import build as _build

globals().update({_name: _build(_op) for _name, _op in _OPS.items()})
__all__ = sorted(_OPS)
