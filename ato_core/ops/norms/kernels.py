"""Normalisation kernels: layer_norm, rms_norm and dropout + residual + layer_norm.

Rows of N elements (the last axis; inputs are row-major [M, N]). Statistics in fp32:
LayerNorm y = (h - mean) * rstd * w + b, rstd = 1/sqrt(var + eps); RMSNorm y = h * rstd * w,
rstd = 1/sqrt(mean(h^2) + eps). With a residual, h = dropout(x) + residual, the dropout mask
drawn from Philox on (seed, row * N + col): keep iff U(0,1) >= p, kept values scaled by
1/(1-p). No mask is stored; the backward draws it again. The seed is a scalar argument, or
read from memory (SEED_WORDS 1: a 0-d integer array; 2: two uint32 words, high first, a JAX
key's data), so that one compiled kernel serves every seed; a seed s gives the same mask
whichever way it comes (a key's data [0, s] too).

SINGLE (N <= BLOCK_N): a program holds its row in registers, one pass over memory. Otherwise
the row is walked in BLOCK_N pieces: pass 1 h (written out when there is a residual) and its
sum, pass 2 the centred sum of squares, pass 3 y; the later passes re-read a row that a
program touched microseconds earlier, mostly from L2.

Backward, with g = dy * w and xhat = (h - mean) * rstd (mean = 0 for RMSNorm):
dh = rstd * (g - xhat * mean(g * xhat) - mean(g)) (the last term LayerNorm only), plus the
cotangent of h when h is an output; dx = dh * mask / (1 - p), dresidual = dh. dw = sum over
rows of dy * xhat and db = sum of dy are reduced deterministically: each of P programs sums
its own rows into a partial row (fp32), and ``partial_sum_kernel`` adds the P partials in a
fixed order.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, dropout_seed, widen


@triton.jit
def _dropout_keep(seed, row, cols, N, p):
    """The dropout mask of (row, cols): Philox on the element index, keep iff U >= p."""
    idx = row.to(tl.int64) * N + cols
    return tl.rand(seed, idx) >= p


@triton.jit
def _h_piece(X, R, row, cols, cmask, N, p, seed, HAS_RES: tl.constexpr, DROPOUT: tl.constexpr):
    """h for one piece of a row: x, or dropout(x) + residual (fp32)."""
    x = widen(tl.load(X + row * N + cols, mask=cmask, other=0.0))
    if HAS_RES:
        if DROPOUT:
            x = tl.where(_dropout_keep(seed, row, cols, N, p), x / (1.0 - p), 0.0)
        x += widen(tl.load(R + row * N + cols, mask=cmask, other=0.0))
    return x


@triton.jit
def _weights(W, B, cols, cmask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """weight and bias at cols (fp32; 1 and 0 when absent)."""
    w = 1.0
    b = 0.0
    if HAS_W:
        w = widen(tl.load(W + cols, mask=cmask, other=0.0))
    if HAS_B:
        b = widen(tl.load(B + cols, mask=cmask, other=0.0))
    return w, b


@triton.jit
def _scale_shift(xhat, w, b, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    y = xhat
    if HAS_W:
        y = y * w
    if HAS_B:
        y = y + b
    return y


@triton.jit
def _affine(xhat, W, B, cols, cmask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    w, b = _weights(W, B, cols, cmask, HAS_W, HAS_B)
    return _scale_shift(xhat, w, b, HAS_W, HAS_B)


@triton.jit
def _h_again(X, H, row, cols, cmask, N, HAS_RES: tl.constexpr):
    """A piece of the normalised row read again (looped passes): h as stored, or x (fp32)."""
    if HAS_RES:
        return widen(tl.load(H + row * N + cols, mask=cmask, other=0.0))
    return widen(tl.load(X + row * N + cols, mask=cmask, other=0.0))


@kernel(inputs=5, outputs=4)
def norm_fwd_kernel(
    X, R, W, B, SEED,
    M, N, eps, p, seed,
    Y, H, MEAN, RSTD,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, RMS: tl.constexpr, HAS_W: tl.constexpr,
    HAS_B: tl.constexpr, HAS_RES: tl.constexpr, DROPOUT: tl.constexpr, ALIGN: tl.constexpr,
    SEED_WORDS: tl.constexpr = 0,
):
    """Grid (M,). One row: y, and h (HAS_RES), mean (LayerNorm) and rstd, [M] fp32.
    R, W, B, SEED, H, MEAN are dummies when unused."""
    row = tl.program_id(0).to(tl.int64)
    seed = dropout_seed(SEED, seed, SEED_WORDS)
    N = aligned(N, ALIGN)
    offs = tl.arange(0, BLOCK_N)
    if SINGLE:
        cmask = offs < N
        h = _h_piece(X, R, row, offs, cmask, N, p, seed, HAS_RES, DROPOUT)
        # weight and bias loaded before the reductions, so their latency overlaps them
        w, b = _weights(W, B, offs, cmask, HAS_W, HAS_B)
        if HAS_RES:  # normalise h as it is returned (rounded to its dtype)
            h = h.to(H.dtype.element_ty)
            tl.store(H + row * N + offs, h, mask=cmask)
            h = widen(h)
        if RMS:
            mean = 0.0
            hc = h
        else:
            mean = tl.sum(h, 0) / N
            hc = tl.where(cmask, h - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(hc * hc, 0) / N + eps)
        y = _scale_shift(hc * rstd, w, b, HAS_W, HAS_B)
        tl.store(Y + row * N + offs, y.to(Y.dtype.element_ty), mask=cmask)
    else:
        acc = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            h = _h_piece(X, R, row, cols, cmask, N, p, seed, HAS_RES, DROPOUT)
            if HAS_RES:
                h = h.to(H.dtype.element_ty)
                tl.store(H + row * N + cols, h, mask=cmask)
                h = widen(h)
            if not RMS:
                acc += h
        if RMS:
            mean = 0.0
        else:
            mean = tl.sum(acc, 0) / N
        acc = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            h = _h_again(X, H, row, cols, cmask, N, HAS_RES)
            hc = tl.where(cmask, h - mean, 0.0)
            acc += hc * hc
        rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
        for c0 in range(0, N, BLOCK_N):
            cols = c0 + offs
            cmask = cols < N
            h = _h_again(X, H, row, cols, cmask, N, HAS_RES)
            y = _affine((h - mean) * rstd, W, B, cols, cmask, HAS_W, HAS_B)
            tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=cmask)
    if not RMS:
        tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


@triton.jit
def _row_stats(MEAN, RSTD, row, RMS: tl.constexpr):
    """The forward's mean (0 for RMSNorm) and rstd of a row."""
    rstd = tl.load(RSTD + row)
    if RMS:
        mean = 0.0
    else:
        mean = tl.load(MEAN + row)
    return mean, rstd


@triton.jit
def _bwd_piece_w(HX, w, DY, row, cols, cmask, N, mean, rstd, HAS_W: tl.constexpr):
    """xhat, dy and g = dy * w of one piece of a row (fp32, 0 past N), w loaded already."""
    h = widen(tl.load(HX + row * N + cols, mask=cmask, other=0.0))
    xhat = tl.where(cmask, (h - mean) * rstd, 0.0)
    dy = widen(tl.load(DY + row * N + cols, mask=cmask, other=0.0))
    g = dy
    if HAS_W:
        g = g * w
    return xhat, dy, g


@triton.jit
def _bwd_piece(HX, W, DY, row, cols, cmask, N, mean, rstd, RMS: tl.constexpr, HAS_W: tl.constexpr):
    """xhat, dy and g = dy * w of one piece of a row (fp32, 0 past N)."""
    w = 1.0
    if HAS_W:
        w = widen(tl.load(W + cols, mask=cmask, other=0.0))
    return _bwd_piece_w(HX, w, DY, row, cols, cmask, N, mean, rstd, HAS_W)


@triton.jit
def _store_dx(DX, DR, DH, row, cols, cmask, N, dh, p, seed, HAS_RES: tl.constexpr, HAS_DH: tl.constexpr,
              DROPOUT: tl.constexpr):
    if HAS_DH:
        dh += widen(tl.load(DH + row * N + cols, mask=cmask, other=0.0))
    if HAS_RES:
        tl.store(DR + row * N + cols, dh.to(DR.dtype.element_ty), mask=cmask)
        if DROPOUT:
            dh = tl.where(_dropout_keep(seed, row, cols, N, p), dh / (1.0 - p), 0.0)
    tl.store(DX + row * N + cols, dh.to(DX.dtype.element_ty), mask=cmask)


@kernel(inputs=7, outputs=4)
def norm_bwd_kernel(
    HX, W, DY, DH, MEAN, RSTD, SEED,
    M, N, rows_per_program, p, seed,
    DX, DR, DW_PART, DB_PART,
    BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, RMS: tl.constexpr, HAS_W: tl.constexpr,
    HAS_B: tl.constexpr, HAS_RES: tl.constexpr, HAS_DH: tl.constexpr, DROPOUT: tl.constexpr,
    ALIGN: tl.constexpr, STAGES: tl.constexpr = 1, SEED_WORDS: tl.constexpr = 0,
):
    """Grid (P,). Rows [pid * rows_per_program, ...): dx (and dresidual), and this program's
    partial dw, db rows ([P, N] fp32, zero-initialised). HX is h (with a residual) or x."""
    pid = tl.program_id(0)
    seed = dropout_seed(SEED, seed, SEED_WORDS)
    N = aligned(N, ALIGN)
    offs = tl.arange(0, BLOCK_N)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    part = pid.to(tl.int64) * N
    if SINGLE:
        cmask = offs < N
        dw = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
        db = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
        w = 1.0
        if HAS_W:  # once for all the program's rows
            w = widen(tl.load(W + offs, mask=cmask, other=0.0))
        # STAGES > 1: Triton pipelines the loop's loads through shared memory, the next rows'
        # x and dy in flight while this one is reduced (a program has nothing else to hide
        # their latency behind: two or four of them fill an SM's registers).
        for r in tl.range(first, last, num_stages=STAGES):
            row = tl.cast(r, tl.int64)
            mean, rstd = _row_stats(MEAN, RSTD, row, RMS)
            xhat, dy, g = _bwd_piece_w(HX, w, DY, row, offs, cmask, N, mean, rstd, HAS_W)
            c1 = tl.sum(g * xhat, 0) / N
            if RMS:
                dh = (g - xhat * c1) * rstd
            else:
                dh = (g - xhat * c1 - tl.sum(g, 0) / N) * rstd
            _store_dx(DX, DR, DH, row, offs, cmask, N, dh, p, seed, HAS_RES, HAS_DH, DROPOUT)
            dw += dy * xhat
            db += dy
        if HAS_W:
            tl.store(DW_PART + part + offs, dw, mask=cmask)
        if HAS_B:
            tl.store(DB_PART + part + offs, db, mask=cmask)
    else:
        for r in range(first, last):
            row = tl.cast(r, tl.int64)
            mean, rstd = _row_stats(MEAN, RSTD, row, RMS)
            s1 = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
            s2 = tl.zeros([BLOCK_N], RSTD.dtype.element_ty)
            for c0 in range(0, N, BLOCK_N):
                cols = c0 + offs
                cmask = cols < N
                xhat, dy, g = _bwd_piece(HX, W, DY, row, cols, cmask, N, mean, rstd, RMS, HAS_W)
                s1 += g * xhat
                s2 += g
            c1 = tl.sum(s1, 0) / N
            c2 = tl.sum(s2, 0) / N
            for c0 in range(0, N, BLOCK_N):
                cols = c0 + offs
                cmask = cols < N
                xhat, dy, g = _bwd_piece(HX, W, DY, row, cols, cmask, N, mean, rstd, RMS, HAS_W)
                if RMS:
                    dh = (g - xhat * c1) * rstd
                else:
                    dh = (g - xhat * c1 - c2) * rstd
                _store_dx(DX, DR, DH, row, cols, cmask, N, dh, p, seed, HAS_RES, HAS_DH, DROPOUT)
                if HAS_W:
                    w_acc = tl.load(DW_PART + part + cols, mask=cmask, other=0.0)
                    tl.store(DW_PART + part + cols, w_acc + dy * xhat, mask=cmask)
                if HAS_B:
                    b_acc = tl.load(DB_PART + part + cols, mask=cmask, other=0.0)
                    tl.store(DB_PART + part + cols, b_acc + dy, mask=cmask)


@kernel(inputs=2, outputs=2)
def partial_sum_kernel(
    PART_W, PART_B,
    P, N,
    OUT_W, OUT_B,
    BLOCK: tl.constexpr, ROWS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
):
    """Grid (column blocks, HAS_W + HAS_B): axis 1 picks the partial rows of dw (first, when
    HAS_W) or db. OUT[cols] = the sum over g of PART[g, cols], in a fixed order (ROWS partial
    rows at a time into a [ROWS, BLOCK] accumulator, then a tree over ROWS): deterministic.
    fp32 sum, stored in OUT's dtype."""
    if HAS_W and tl.program_id(1) == 0:
        _partial_sum(PART_W, OUT_W, P, N, BLOCK, ROWS)
    elif HAS_B:
        _partial_sum(PART_B, OUT_B, P, N, BLOCK, ROWS)


@triton.jit
def _partial_sum(PART, OUT, P, N, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < N
    offs_g = tl.arange(0, ROWS)
    acc = tl.zeros([ROWS, BLOCK], PART.dtype.element_ty)
    for g0 in range(0, P, ROWS):
        rows = g0 + offs_g
        acc += tl.load(PART + rows[:, None].to(tl.int64) * N + cols[None, :],
                       mask=(rows < P)[:, None] & cmask[None, :], other=0.0)
    tl.store(OUT + cols, tl.sum(acc, 0).to(OUT.dtype.element_ty), mask=cmask)
