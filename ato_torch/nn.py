"""Drop-in torch modules on ato's ops, with the constructor arguments and state_dict keys of
their torch counterparts: a torch ``nn.LayerNorm`` state_dict loads into ``LayerNorm``.

- ``LayerNorm``, ``RMSNorm``: ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` (normalized_shape
  of one or more trailing axes, eps, elementwise_affine, bias).
- ``CrossEntropyLoss``: ``torch.nn.CrossEntropyLoss`` with class-index targets (ignore_index,
  reduction, label_smoothing; input [C], [N, C] or [N, C, d1, ...]); no class weights.
- ``SwiGLU``: the gated MLP of Llama-style models, down_proj(silu(gate_proj(x)) * up_proj(x)),
  with Hugging Face's LlamaMLP keys (gate_proj, up_proj, down_proj).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

import ato_torch


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(n) for n in normalized_shape)


def _trailing(x: torch.Tensor, shape: tuple, module: str) -> torch.Tensor:
    """x as [..., prod(shape)], after checking its trailing axes are ``shape``."""
    if tuple(x.shape[x.ndim - len(shape):]) != shape or x.ndim < len(shape):
        raise ValueError(f"{module}: input: expected trailing axes {list(shape)}, got shape {list(x.shape)}")
    return x.reshape(*x.shape[:x.ndim - len(shape)], math.prod(shape))


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm on ato's layer_norm (fp32 statistics, a Triton backward)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kw))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kw)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = _trailing(x, self.normalized_shape, "LayerNorm")
        w = None if self.weight is None else self.weight.reshape(-1)
        b = None if self.bias is None else self.bias.reshape(-1)
        return ato_torch.layer_norm(flat, w, b, eps=self.eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm on ato's rms_norm; eps None means torch.finfo(x.dtype).eps, as torch."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = _trailing(x, self.normalized_shape, "RMSNorm")
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        w = None if self.weight is None else self.weight.reshape(-1)
        return ato_torch.rms_norm(flat, w, eps=eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class CrossEntropyLoss(nn.Module):
    """torch.nn.CrossEntropyLoss on ato's cross_entropy (online log-sum-exp, no fp32 copy of
    the logits): class-index targets, input [C], [N, C] or [N, C, d1, ...] (classes on axis 1,
    as torch), ignore_index, reduction ("mean", "sum", "none"), label_smoothing. The loss has
    the input's dtype, as torch's. Class weights and probability targets: not supported."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if weight is not None:
            raise ValueError("CrossEntropyLoss: weight: class weights are not supported by ato (expected None)")
        if size_average is not None or reduce is not None:
            raise ValueError("CrossEntropyLoss: size_average, reduce: deprecated in torch, not supported (use "
                             "reduction)")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if target.is_floating_point():
            raise TypeError(f"CrossEntropyLoss: target: expected class indices (an integer tensor), got "
                            f"{target.dtype} (probability targets are not supported)")
        if input.ndim == 1:
            logits, flat, shape = input[None], target.reshape(1), ()
        else:
            logits = input.movedim(1, -1).reshape(-1, input.shape[1]) if input.ndim > 2 else input
            flat, shape = target.reshape(-1), tuple(target.shape)
        loss = ato_torch.cross_entropy(logits, flat, ignore_index=self.ignore_index, reduction=self.reduction,
                                       label_smoothing=self.label_smoothing)
        if self.reduction == "none":
            loss = loss.reshape(shape)
        return loss.to(input.dtype)

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"


class SwiGLU(nn.Module):
    """The gated MLP down_proj(silu(gate_proj(x)) * up_proj(x)), ato's swiglu between torch's
    matmuls; keys as Hugging Face's LlamaMLP (gate_proj, up_proj, down_proj)."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ato_torch.swiglu(self.gate_proj(x), self.up_proj(x)))


__all__ = ["CrossEntropyLoss", "LayerNorm", "RMSNorm", "SwiGLU"]
