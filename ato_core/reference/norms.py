"""Reference layer_norm, rms_norm and dropout + residual + layer_norm (over the last axis).

The dropout reference takes the keep-mask as an argument: the mask itself comes from the
kernels' counter-based generator (ato_core.kernels.norms), whose statistics the tests check
separately.
"""

from __future__ import annotations

from array_api_compat import array_namespace


def layer_norm(x, weight=None, bias=None, *, eps=1e-5):
    xp = array_namespace(x)
    mean = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = (x - mean) / xp.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x, weight=None, *, eps=1e-6):
    xp = array_namespace(x)
    y = x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if weight is None else y * weight


def dropout_residual_layer_norm(x, residual, weight, bias, *, keep, p=0.0, eps=1e-5):
    """keep: boolean mask of x's shape (all True when p = 0). Returns (y, h)."""
    xp = array_namespace(x)
    h = xp.where(keep, x / (1.0 - p), xp.zeros_like(x)) + residual
    return layer_norm(h, weight, bias, eps=eps), h
