"""Feature maps for linear attention: ELU(x)+1 as a standalone elementwise kernel, and
as @triton.jit helpers that the attention kernels apply while loading q and k.

ELU(x)+1 = x+1 for x > 0 and exp(x) for x <= 0: positive everywhere (so the linear
attention normaliser is positive), smooth at 0, derivative 1 or exp(x). NaN gives NaN (and
a NaN gradient): the min that keeps exp from overflowing in the unselected branch propagates it.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned

IDENTITY = 0
ELU_PLUS_ONE = 1


@triton.jit
def feature(x, mask, FEATURE: tl.constexpr):
    """phi(x) in fp32, with masked-off lanes set to 0 (phi(0) = 1 for ELU+1, so padded
    rows and columns must be zeroed after the map, not before)."""
    x = x.to(tl.float32)
    if FEATURE == 1:
        x = tl.where(x > 0, x + 1.0, tl.exp(tl.minimum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)))
    return tl.where(mask, x, 0.0)


@triton.jit
def feature_grad(x, dphi, FEATURE: tl.constexpr):
    """d phi(x) / dx times dphi (fp32)."""
    if FEATURE == 1:
        x = x.to(tl.float32)
        dphi = tl.where(x > 0, dphi, dphi * tl.exp(tl.minimum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)))
    return dphi


@kernel(inputs=1, outputs=1)
def elu_plus_one_fwd_kernel(X, n, Y, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """y = ELU(x)+1 over a flat array of n elements; one program per BLOCK elements."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < aligned(n, ALIGN)
    x = tl.load(X + offs, mask=mask, other=0.0)
    y = feature(x, mask, 1)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@kernel(inputs=2, outputs=1)
def elu_plus_one_bwd_kernel(X, DY, n, DX, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """dx = dy * (1 if x > 0 else exp(x))."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < aligned(n, ALIGN)
    x = tl.load(X + offs, mask=mask, other=0.0)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    dx = feature_grad(x, dy, 1)
    tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
