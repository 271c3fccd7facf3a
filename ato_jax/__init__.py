"""ato for JAX: the ato_core Triton kernels as differentiable, jittable JAX ops.

On a GPU the kernels run compiled through jax-triton (the ``gpu`` extra); on a CPU they
run under Triton's interpreter through ``jax.pure_callback`` (this path needs torch).
``import ato_jax`` never imports jax_triton; the first GPU launch does.
"""

from .flash_attention import flash_attention  # noqa: F401
from .transformer_ops import (  # noqa: F401
    cross_entropy, dropout_residual_layer_norm, layer_norm, rms_norm, rope, softmax, swiglu)
from .linear_attention import elu_plus_one, linear_attention, linear_attention_step  # noqa: F401

__all__ = ["cross_entropy", "dropout_residual_layer_norm", "elu_plus_one", "flash_attention", "layer_norm",
           "linear_attention", "linear_attention_step", "rms_norm", "rope", "softmax", "swiglu"]
