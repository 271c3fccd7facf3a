"""Reference layer_norm, rms_norm and dropout + residual + layer_norm (over the last axis).

The dropout reference takes the keep-mask as an argument: the mask itself comes from the
kernels' counter-based generator (kernels.py beside this file), whose statistics the tests check
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


def dropout_residual_layer_norm_seeded(x, residual, weight, bias, *, p=0.0, seed=0, eps=1e-5, training=True):
    """dropout_residual_layer_norm with ato's signature: the keep-mask that ato's generator
    draws for ``seed`` (:func:`keep_mask`), then the reference above."""
    p = p if training else 0.0
    return dropout_residual_layer_norm(x, residual, weight, bias, keep=keep_mask(x, p, seed), p=p, eps=eps)


def keep_mask(like, p: float, seed):
    """The keep-mask ato's kernel draws for ``like``'s shape, ``p`` and ``seed``, read off the
    kernel itself (dropout of ones, no residual: kept iff nonzero), as a torch tensor on
    ``like``'s device or a NumPy array. The reference checks everything else (scaling,
    residual, LayerNorm, gradients) against it; the mask's own statistics are tested
    separately."""
    import numpy as np
    import torch

    import ato_torch

    device = like.device if isinstance(like, torch.Tensor) else "cpu"
    if not isinstance(seed, int):  # an array seed (a 0-d integer, a key's data)
        seed = torch.as_tensor(np.asarray(seed.cpu() if isinstance(seed, torch.Tensor) else seed)).to(device)
    ones = torch.ones(tuple(like.shape), dtype=torch.float32, device=device)
    _, h = ato_torch.dropout_residual_layer_norm(ones, torch.zeros_like(ones), None, None, p=p, seed=seed)
    keep = h != 0
    return keep if isinstance(like, torch.Tensor) else np.asarray(keep)
