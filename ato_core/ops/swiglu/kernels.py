"""SwiGLU, y = silu(gate) * up = gate * sigmoid(gate) * up, elementwise over any shape.

Backward: dgate = dy * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))), dup = dy * silu(gate).
Flat row-major arrays; int64 offsets. fp32 arithmetic, results in the input dtype.
"""

import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, widen


@kernel(inputs=2, outputs=1)
def swiglu_fwd_kernel(G, U, n, Y, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """Grid (cdiv(n, BLOCK),)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < aligned(n, ALIGN)
    g = widen(tl.load(G + offs, mask=mask, other=0.0))
    u = widen(tl.load(U + offs, mask=mask, other=0.0))
    tl.store(Y + offs, (g * tl.sigmoid(g) * u).to(Y.dtype.element_ty), mask=mask)


@kernel(inputs=3, outputs=2)
def swiglu_bwd_kernel(G, U, DY, n, DG, DU, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """Grid (cdiv(n, BLOCK),)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < aligned(n, ALIGN)
    g = widen(tl.load(G + offs, mask=mask, other=0.0))
    u = widen(tl.load(U + offs, mask=mask, other=0.0))
    dy = widen(tl.load(DY + offs, mask=mask, other=0.0))
    sig = tl.sigmoid(g)
    tl.store(DG + offs, (dy * u * sig * (1.0 + g * (1.0 - sig))).to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + offs, (dy * g * sig).to(DU.dtype.element_ty), mask=mask)
