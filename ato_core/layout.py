"""Attention layouts: "bhnd" ([B, H, N, D], the kernels' view) and "bnhd" ([B, N, H, D],
FlashAttention's and flax's). A bnhd array is read and written in place: the plans hand the
kernels its shape and strides with axes 1 and 2 swapped, and allocate bnhd results row-major
in their own layout (no transpose anywhere)."""

from __future__ import annotations

from typing import Tuple

from . import checks
from .launch import ArraySpec, row_major_strides

LAYOUTS = ("bhnd", "bnhd")
_SWAP = (0, 2, 1, 3)


def check_layout(layout) -> None:
    checks.check_choice("layout", layout, LAYOUTS)


def axes(layout: str) -> Tuple[int, int]:
    """(the head axis, the sequence axis) of a 4-D array in ``layout``."""
    return (1, 2) if layout == "bhnd" else (2, 1)


def as_bhnd(spec: ArraySpec, layout: str) -> ArraySpec:
    """The [B, H, N, D] view of a 4-D array laid out as ``layout`` (the same memory)."""
    return spec if layout == "bhnd" else swapped(spec)


def swapped(spec: ArraySpec) -> ArraySpec:
    """A 4-D array's view with axes 1 and 2 swapped (the same memory; None stays None)."""
    if spec is None:
        return spec
    return spec._replace(shape=tuple(spec.shape[i] for i in _SWAP), strides=tuple(spec.strides[i] for i in _SWAP))


def laid_out(shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """A [B, H, N, D] shape as ``layout`` lays it out (what a plan allocates)."""
    return tuple(shape) if layout == "bhnd" else tuple(shape[i] for i in _SWAP)


def bhnd_strides(shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """The [B, H, N, D] strides of a row-major array of [B, H, N, D] ``shape`` laid out as
    ``layout``."""
    strides = row_major_strides(laid_out(shape, layout))
    return strides if layout == "bhnd" else tuple(strides[i] for i in _SWAP)


def bnhd_reference(xp, fn, q, k, v, **kwargs):
    """A [B, H, N, D] reference ``fn`` on bnhd q, k, v (``xp``: their array namespace): the
    same math on the transposes, o (the first result) transposed back; the rest (lse
    [B, H, N], states) as they are."""
    out = fn(*(xp.permute_dims(t, _SWAP) for t in (q, k, v)), **kwargs)
    if isinstance(out, tuple):
        return (xp.permute_dims(out[0], _SWAP), *out[1:])
    return xp.permute_dims(out, _SWAP)
