"""Softmax over the last axis, y = softmax(x / temperature), and its backward from y alone.

Rows of N elements (row-major [M, N]). SINGLE (N <= BLOCK_N): the row in registers, one
pass. Otherwise an online pass keeps, per lane, the running maximum and the running sum of
exp(x - max), rescaled as the maximum grows, then combines the lanes; a second pass writes
y. Backward: dx = y * (dy - sum(dy * y)) / temperature (one or two passes likewise).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned


@triton.jit
def _row(N, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    """This program's row: (N with its alignment, the row's first element, the lane offsets)."""
    row = tl.program_id(0).to(tl.int64)
    N = aligned(N, ALIGN)
    return N, row * N, tl.arange(0, BLOCK_N)


@kernel(inputs=1, outputs=1)
def softmax_fwd_kernel(
    X,
    M, N, inv_temp,
    Y,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (M,). One row."""
    N, base, offs = _row(N, BLOCK_N, ALIGN)
    if SINGLE:
        cmask = offs < N
        s = tl.load(X + base + offs, mask=cmask, other=float("-inf")).to(tl.float32) * inv_temp
        e = tl.exp(s - tl.max(s, 0))
        tl.store(Y + base + offs, (e / tl.sum(e, 0)).to(Y.dtype.element_ty), mask=cmask)
    else:
        m = tl.full([BLOCK_N], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_N], tl.float32)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            s = tl.load(X + base + cols, mask=cols < N, other=float("-inf")).to(tl.float32) * inv_temp
            m_new = tl.maximum(m, s)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # lanes that saw only padding
            l = l * tl.exp(m - m_use) + tl.exp(s - m_use)
            m = m_new
        m_row = tl.max(m, 0)
        l_row = tl.sum(l * tl.exp(m - m_row), 0)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            s = tl.load(X + base + cols, mask=cmask, other=float("-inf")).to(tl.float32) * inv_temp
            tl.store(Y + base + cols, (tl.exp(s - m_row) / l_row).to(Y.dtype.element_ty), mask=cmask)


@kernel(inputs=2, outputs=1)
def softmax_bwd_kernel(
    Y, DY,
    M, N, inv_temp,
    DX,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (M,). dx = y * (dy - sum(dy * y)) * inv_temp for one row."""
    N, base, offs = _row(N, BLOCK_N, ALIGN)
    if SINGLE:
        cmask = offs < N
        y = tl.load(Y + base + offs, mask=cmask, other=0.0).to(tl.float32)
        dy = tl.load(DY + base + offs, mask=cmask, other=0.0).to(tl.float32)
        dx = y * (dy - tl.sum(y * dy, 0)) * inv_temp
        tl.store(DX + base + offs, dx.to(DX.dtype.element_ty), mask=cmask)
    else:
        acc = tl.zeros([BLOCK_N], tl.float32)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            y = tl.load(Y + base + cols, mask=cmask, other=0.0).to(tl.float32)
            acc += y * tl.load(DY + base + cols, mask=cmask, other=0.0).to(tl.float32)
        dot = tl.sum(acc, 0)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            y = tl.load(Y + base + cols, mask=cmask, other=0.0).to(tl.float32)
            dy = tl.load(DY + base + cols, mask=cmask, other=0.0).to(tl.float32)
            tl.store(DX + base + cols, (y * (dy - dot) * inv_temp).to(DX.dtype.element_ty), mask=cmask)
