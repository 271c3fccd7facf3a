"""Softmax over the last axis, y = softmax(x / temperature), and its backward from y.

Rows of N elements (row-major [M, N]). SINGLE (N <= BLOCK_N): the row in registers, one
pass. Otherwise an online pass keeps, per lane, the running maximum and the running sum of
exp(x - max), rescaled as the maximum grows, then combines the lanes; a second pass writes
y. Backward: dx = y * (dy - sum(dy * y)) / temperature (one or two passes likewise).

A traced temperature (TRACED) is read from memory, so one compiled kernel serves every
value. Its gradient: with g = y * (dy - sum(dy * y)) = dL/d(x / t), dL/dt = -(1/t^2)
sum_j g_j x_j, from x (log y_j = x_j / t - lse would do in exact math, but y keeps too
little of x: bf16 y at |x| <= 0.1 gave it 3% off); an underflowed y_j = 0 adds its limit,
0 (a key masked by x_j = -inf too). Each row's term goes to DT_ROW; ``softmax_sum_kernel``
adds them in a fixed order.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, widen


@triton.jit
def _row(N, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    """This program's row: (N with its alignment, the row's first element, the lane offsets)."""
    row = tl.program_id(0).to(tl.int64)
    N = aligned(N, ALIGN)
    return N, row * N, tl.arange(0, BLOCK_N)


@triton.jit
def _inv_temp(TEMP, inv_temp, TRACED: tl.constexpr):
    """1 / temperature: read from TEMP (a 0-d array) when TRACED, else the scalar argument."""
    if TRACED:
        return 1.0 / widen(tl.load(TEMP))
    else:
        return inv_temp


@kernel(inputs=2, outputs=1)
def softmax_fwd_kernel(
    X, TEMP,
    M, N, inv_temp,
    Y,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, ALIGN: tl.constexpr, TRACED: tl.constexpr,
    ACC: tl.constexpr = tl.float32,
):
    """Grid (M,). One row. TEMP: the temperature when TRACED (else a dummy)."""
    N, base, offs = _row(N, BLOCK_N, ALIGN)
    inv_temp = _inv_temp(TEMP, inv_temp, TRACED)
    if SINGLE:
        cmask = offs < N
        s = widen(tl.load(X + base + offs, mask=cmask, other=float("-inf"))) * inv_temp
        e = tl.exp(s - tl.max(s, 0))
        tl.store(Y + base + offs, (e / tl.sum(e, 0)).to(Y.dtype.element_ty), mask=cmask)
    else:
        m = tl.full([BLOCK_N], float("-inf"), ACC)
        l = tl.zeros([BLOCK_N], ACC)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            s = widen(tl.load(X + base + cols, mask=cols < N, other=float("-inf"))) * inv_temp
            m_new = tl.maximum(m, s)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # lanes that saw only padding
            l = l * tl.exp(m - m_use) + tl.exp(s - m_use)
            m = m_new
        m_row = tl.max(m, 0)
        l_row = tl.sum(l * tl.exp(m - m_row), 0)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            s = widen(tl.load(X + base + cols, mask=cmask, other=float("-inf"))) * inv_temp
            tl.store(Y + base + cols, (tl.exp(s - m_row) / l_row).to(Y.dtype.element_ty), mask=cmask)


@triton.jit
def _g_x(g, y, x):
    """g * x, g * 0 where y = 0 (its limit: g has the factor y; x may be -inf); NaN where g is."""
    return tl.where(y == 0.0, g * 0.0, g * x)


@kernel(inputs=4, outputs=2)
def softmax_bwd_kernel(
    Y, DY, TEMP, X,
    M, N, inv_temp,
    DX, DT_ROW,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, ALIGN: tl.constexpr, TRACED: tl.constexpr,
    ACC: tl.constexpr = tl.float32,
):
    """Grid (M,). dx = y * (dy - sum(dy * y)) * inv_temp for one row; when TRACED, DT_ROW [M]
    (fp32) gets the row's part of dL/dt, from X (else TEMP, X and DT_ROW are dummies)."""
    N, base, offs = _row(N, BLOCK_N, ALIGN)
    inv_temp = _inv_temp(TEMP, inv_temp, TRACED)
    if SINGLE:
        cmask = offs < N
        y = widen(tl.load(Y + base + offs, mask=cmask, other=0.0))
        dy = widen(tl.load(DY + base + offs, mask=cmask, other=0.0))
        g = y * (dy - tl.sum(y * dy, 0))
        tl.store(DX + base + offs, (g * inv_temp).to(DX.dtype.element_ty), mask=cmask)
        if TRACED:
            x = widen(tl.load(X + base + offs, mask=cmask, other=0.0))
            tl.store(DT_ROW + tl.program_id(0), -inv_temp * inv_temp * tl.sum(_g_x(g, y, x), 0))
    else:
        acc = tl.zeros([BLOCK_N], ACC)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            y = widen(tl.load(Y + base + cols, mask=cmask, other=0.0))
            acc += y * widen(tl.load(DY + base + cols, mask=cmask, other=0.0))
        dot = tl.sum(acc, 0)
        dt = tl.zeros([BLOCK_N], ACC)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            y = widen(tl.load(Y + base + cols, mask=cmask, other=0.0))
            dy = widen(tl.load(DY + base + cols, mask=cmask, other=0.0))
            g = y * (dy - dot)
            tl.store(DX + base + cols, (g * inv_temp).to(DX.dtype.element_ty), mask=cmask)
            if TRACED:
                dt += _g_x(g, y, widen(tl.load(X + base + cols, mask=cmask, other=0.0)))
        if TRACED:
            tl.store(DT_ROW + tl.program_id(0), -inv_temp * inv_temp * tl.sum(dt, 0))


@kernel(inputs=1, outputs=1)
def softmax_sum_kernel(
    DT_ROW,
    M,
    DT,
    BLOCK: tl.constexpr,
):
    """Grid (1,). DT (0-d, the temperature's dtype) = the sum of DT_ROW [M], in a fixed order."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], DT_ROW.dtype.element_ty)
    for r0 in range(0, M, BLOCK):
        rows = r0 + offs
        acc += tl.load(DT_ROW + rows, mask=rows < M, other=0.0)
    tl.store(DT, tl.sum(acc, 0).to(DT.dtype.element_ty))
