"""The reference math of every op, written once against the Python array API
(array-api-compat), so the same function runs on NumPy (a float64 oracle), on torch
(autograd gives reference gradients) and on JAX (jax.grad). Simple enough to trust by
reading; kernels never call it."""

from .flash_attention import flash_attention  # noqa: F401
from .cross_entropy import cross_entropy  # noqa: F401
from .norms import dropout_residual_layer_norm, layer_norm, rms_norm  # noqa: F401
from .rope import rope  # noqa: F401
from .softmax import softmax  # noqa: F401
from .swiglu import swiglu  # noqa: F401
from .linear_attention import (  # noqa: F401
    elu_plus_one,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
)
