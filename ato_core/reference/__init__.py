"""The reference math of every op, written once against the Python array API
(array-api-compat), so the same function runs on NumPy (a float64 oracle), on torch
(autograd gives reference gradients) and on JAX (jax.grad). Simple enough to trust by
reading; kernels never call it."""

from .flash_attention import flash_attention  # noqa: F401
from .linear_attention import (  # noqa: F401
    elu_plus_one,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
)
