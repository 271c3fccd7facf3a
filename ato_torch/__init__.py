"""ato for PyTorch: the ato_core Triton kernels as differentiable torch ops.

CUDA tensors run compiled kernels; CPU tensors run the same kernels under Triton's
interpreter (set ATO_INTERPRET=1 to interpret on a GPU too).
"""

from .flash_attention import flash_attention  # noqa: F401
from .transformer_ops import (  # noqa: F401
    cross_entropy, dropout_residual_layer_norm, layer_norm, rms_norm, rope, softmax, swiglu)
from .linear_attention import elu_plus_one, linear_attention, linear_attention_step  # noqa: F401

__all__ = ["cross_entropy", "dropout_residual_layer_norm", "elu_plus_one", "flash_attention", "layer_norm",
           "linear_attention", "linear_attention_step", "rms_norm", "rope", "softmax", "swiglu"]
