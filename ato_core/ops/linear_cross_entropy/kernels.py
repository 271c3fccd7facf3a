"""Linear + cross-entropy without the logits: x [T, H] (row-major), weight [V, H], bias [V],
targets [T]; logits z = x weight^T + bias, each z first cap tanh(z / cap) with a softcap.

Nothing of [T, V] is stored. The forward is a matmul whose epilogue reduces: program
(row block, vocabulary split) walks its split's column blocks, computes each logit tile
(fp32 accumulation over H) and keeps per row an online log-sum-exp (m, l), the sum of
z / V_total (label smoothing) and the target's logit where the target falls in its columns:
4 partial numbers per row and split (``lce_stats_kernel``). ``lce_merge_kernel`` combines
the splits of a row in a fixed order (deterministic) into its loss, lse and the factor of
its gradient. Under vocabulary parallelism each device computes the partials of its own
columns and the gathered partials merge exactly like a device's own splits.

The backward recomputes the logits, in chunks of the vocabulary (bounded memory: one chunk
of dlogits, [T, C] in x's dtype, x transposed once, and dx's fp32 sum [T, H]): per chunk
``lce_dlogits_kernel`` writes dlogits = (softmax * (1 + 2 z_loss lse) - eps / V_total - (1 -
eps) onehot) * factor (times 1 - tanh^2 with a softcap); ``lce_dw_kernel`` writes the chunk's
rows of dweight as (x^T dlogits)^T (``lce_dbias_kernel`` those of dbias), complete, reducing
over all T in one program; ``lce_dx_kernel`` adds the chunk's dlogits @ weight to dx's sum.
Every matmul reads its first operand with the reduction axis contiguous (the fast layout on
sm_90): hence x^T, written once by ``lce_transpose_kernel``. Every sum has one fixed order:
bitwise reproducible, no atomics. Four matmuls in all (the forward's and three in the backward), as Cut
Cross-Entropy; the measurements: benchmarks/results/README.md (linear_cross_entropy).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, tanh_slope


@triton.jit
def _dot(a, b, acc, IEEE: tl.constexpr):
    """acc + a @ b: fp32 operands in full fp32 precision (IEEE) rather than TF32."""
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _logits(X, W, BIAS, rows, cols, T, V, H, cap, inv_cap,
            BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr,
            HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr, IEEE: tl.constexpr):
    """The logit tile [BT, BV] of rows x cols (fp32; 0 outside T x V) and, with SOFTCAP, the
    capped logits' slope 1 - tanh(z / cap)^2 (tanh_slope; else 0). rows, cols: int64."""
    kk = tl.arange(0, BK)
    xp = X + rows[:, None] * H + kk[None, :]
    wp = W + cols[None, :] * H + kk[:, None]
    rmask = rows[:, None] < T
    cmask = cols[None, :] < V
    acc = tl.zeros([BT, BV], tl.float32)
    for k0 in range(0, H, BK):
        if EVEN_K:
            a = tl.load(xp, mask=rmask, other=0.0)
            b = tl.load(wp, mask=cmask, other=0.0)
        else:
            km = (k0 + kk) < H
            a = tl.load(xp, mask=rmask & km[None, :], other=0.0)
            b = tl.load(wp, mask=cmask & km[:, None], other=0.0)
        acc = _dot(a, b, acc, IEEE)
        xp += BK
        wp += BK
    if HAS_BIAS:
        acc += tl.load(BIAS + cols, mask=cols < V, other=0.0).to(tl.float32)[None, :]
    slope = 0.0
    if SOFTCAP:
        r, slope = tanh_slope(acc, inv_cap)
        acc = cap - (2.0 * cap) * r
    return acc, slope


@triton.jit
def _swizzle(pid, n_rows, GROUP: tl.constexpr, N_COLS):
    """(row block, column index) of program pid: consecutive programs take GROUP row blocks
    times every column index, so the programs in flight share their x rows and weight
    columns in L2."""
    per_group = GROUP * N_COLS
    first = (pid // per_group) * GROUP
    size = tl.minimum(n_rows - first, GROUP)
    r = pid % per_group
    return first + r % size, r // size


@kernel(inputs=4, outputs=1)
def lce_stats_kernel(
    X, W, BIAS, TARGETS,
    T, V, H, inv_v, cap, inv_cap, blocks_per_split, n_split,
    PART,
    BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
    IEEE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(T, BT) * n_split,). Split s takes column blocks [s, s + 1) * blocks_per_split.
    PART [n_split, 4, T] fp32: per split and row, m (the largest logit), l (sum of exp(z - m)),
    the sum of z * inv_v (SMOOTH; else 0) and the target's logit (0 where the target is not
    one of the split's columns). ALIGN divides H."""
    H = aligned(H, ALIGN)
    tb, split = _swizzle(tl.program_id(0), tl.cdiv(T, BT), GROUP, n_split)
    rows = tb.to(tl.int64) * BT + tl.arange(0, BT)
    t = tl.load(TARGETS + rows, mask=rows < T, other=-1).to(tl.int64)
    m = tl.full([BT], float("-inf"), tl.float32)
    l = tl.zeros([BT], tl.float32)
    sx = tl.zeros([BT], tl.float32)
    xt = tl.zeros([BT], tl.float32)
    first = split * blocks_per_split
    last = tl.minimum(first + blocks_per_split, tl.cdiv(V, BV))
    for j in range(first, last):
        cols = tl.cast(j, tl.int64) * BV + tl.arange(0, BV)
        z, _ = _logits(X, W, BIAS, rows, cols, T, V, H, cap, inv_cap, BT, BV, BK, EVEN_K, HAS_BIAS, SOFTCAP, IEEE)
        inside = cols[None, :] < V
        z = tl.where(inside, z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # (never -inf - -inf)
        l = l * tl.exp(m - m_use) + tl.sum(tl.exp(z - m_use[:, None]), 1)
        m = m_new
        xt += tl.sum(tl.where((cols[None, :] == t[:, None]) & inside, z, 0.0), 1)
        if SMOOTH:  # sums of z / V, which cannot overflow
            sx += tl.sum(tl.where(inside, z * inv_v, 0.0), 1)
    base = PART + split.to(tl.int64) * 4 * T + rows
    rmask = rows < T
    tl.store(base, m, mask=rmask)
    tl.store(base + T, l, mask=rmask)
    tl.store(base + 2 * T, sx, mask=rmask)
    tl.store(base + 3 * T, xt, mask=rmask)


@kernel(inputs=3, outputs=4)
def lce_merge_kernel(
    PART, TARGETS, COUNT,
    T, P, V_total, ignore_index, smoothing, z_loss,
    LOSS, LSE, SCALE, ZROW,
    BLOCK: tl.constexpr, MEAN: tl.constexpr, ZLOSS: tl.constexpr, ZOUT: tl.constexpr,
):
    """Grid (cdiv(T, BLOCK),). Merges the P partials of each row (PART [P, 4, T], in order p =
    0, 1, ...): LSE [T] its log-sum-exp, LOSS [T] lse - (1 - eps) z_t - eps mean(z) (+ z_loss
    lse^2 with ZLOSS; 0 for an ignored row, NaN for a target outside [0, V_total)), SCALE [T]
    the factor of its gradient (1 / COUNT with MEAN, else 1; 0 if ignored, NaN if out of
    range), ZROW [T] (ZOUT) its z_loss lse^2."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < T
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for p in range(0, P):
        m = tl.maximum(m, tl.load(PART + rows + tl.cast(p, tl.int64) * 4 * T, mask=rmask, other=0.0))
    m_use = tl.where(m == float("-inf"), 0.0, m)
    l = tl.zeros([BLOCK], tl.float32)
    sx = tl.zeros([BLOCK], tl.float32)
    xt = tl.zeros([BLOCK], tl.float32)
    for p in range(0, P):
        base = PART + rows + tl.cast(p, tl.int64) * 4 * T
        l += tl.load(base + T, mask=rmask, other=0.0) * tl.exp(tl.load(base, mask=rmask, other=0.0) - m_use)
        sx += tl.load(base + 2 * T, mask=rmask, other=0.0)
        xt += tl.load(base + 3 * T, mask=rmask, other=0.0)
    lse = m_use + tl.log(tl.where(rmask, l, 1.0))  # (rows past T: 0, not log 0)
    t = tl.load(TARGETS + rows, mask=rmask, other=ignore_index).to(tl.int64)
    valid = t != ignore_index
    in_range = (t >= 0) & (t < V_total)
    loss = lse - xt + smoothing * (xt - sx)
    zrow = z_loss * lse * lse
    if ZLOSS:
        loss += zrow
    if MEAN:
        scale = tl.zeros([BLOCK], tl.float32) + 1.0 / tl.load(COUNT)
    else:
        scale = tl.zeros([BLOCK], tl.float32) + 1.0
    nan = float("nan")
    tl.store(LOSS + rows, tl.where(valid, tl.where(in_range, loss, nan), 0.0), mask=rmask)
    tl.store(LSE + rows, lse, mask=rmask)
    tl.store(SCALE + rows, tl.where(valid, tl.where(in_range, scale, nan), 0.0), mask=rmask)
    if ZOUT:
        tl.store(ZROW + rows, tl.where(valid, tl.where(in_range, zrow, nan), 0.0), mask=rmask)


@kernel(inputs=8, outputs=1)
def lce_dlogits_kernel(
    X, W, BIAS, TARGETS, LSE, SCALE, DLOSS, D_IN,
    T, V, H, v0, C, inv_v, smoothing, z_loss, cap, inv_cap,
    D,
    BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr, ZLOSS: tl.constexpr,
    PER_ROW: tl.constexpr, IEEE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(T, BT) * cdiv(C, BV),). D [T, C] (x's dtype): the gradient of the logits of
    columns v0 + [0, C) (those past V: values of logits 0, never used), for dloss DLOSS
    (PER_ROW: [T], else a scalar) times each row's SCALE. TARGETS are column indices of the
    whole weight (this device's, under vocabulary parallelism: shifted by its first column).
    D_IN: D's memory (the previous chunk's, overwritten; not read). ALIGN divides H and C."""
    H = aligned(H, ALIGN)
    C = aligned(C, ALIGN)
    tb, cb = _swizzle(tl.program_id(0), tl.cdiv(T, BT), GROUP, tl.cdiv(C, BV))
    rows = tb.to(tl.int64) * BT + tl.arange(0, BT)
    local = cb.to(tl.int64) * BV + tl.arange(0, BV)
    cols = v0 + local
    rmask = rows < T
    z, slope = _logits(X, W, BIAS, rows, cols, T, V, H, cap, inv_cap, BT, BV, BK, EVEN_K, HAS_BIAS, SOFTCAP,
                       IEEE)
    lse = tl.load(LSE + rows, mask=rmask, other=0.0)
    if PER_ROW:
        dloss = tl.load(DLOSS + rows, mask=rmask, other=0.0).to(tl.float32)
    else:
        dloss = tl.load(DLOSS).to(tl.float32)
    f = dloss * tl.load(SCALE + rows, mask=rmask, other=0.0)
    p = tl.exp(z - lse[:, None])
    if ZLOSS:
        p = p * (1.0 + 2.0 * z_loss * lse)[:, None]
    t = tl.load(TARGETS + rows, mask=rmask, other=-1).to(tl.int64)
    g = p - tl.where(cols[None, :] == t[:, None], 1.0 - smoothing, 0.0)
    if SMOOTH:
        g -= smoothing * inv_v
    g *= f[:, None]
    if SOFTCAP:
        g *= slope
    # columns past V (the last chunk's padding) are written too: their values (of logits 0) are
    # never used, and a mask on V would stop the stores vectorising
    tl.store(D + rows[:, None] * C + local[None, :], g.to(D.dtype.element_ty),
             mask=rmask[:, None] & (local[None, :] < C))


@kernel(inputs=1, outputs=1)
def lce_transpose_kernel(
    X,
    T, H, t_stride,
    XT,
    BT: tl.constexpr, BH: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(T, BT) * cdiv(H, BH),). XT [H, t_stride] = X [T, H] transposed (rows padded
    to t_stride, the padding not written). ALIGN divides H and t_stride."""
    H = aligned(H, ALIGN)
    t_stride = aligned(t_stride, ALIGN)
    n_h = tl.cdiv(H, BH)
    rows = (tl.program_id(0) // n_h).to(tl.int64) * BT + tl.arange(0, BT)
    cols = (tl.program_id(0) % n_h).to(tl.int64) * BH + tl.arange(0, BH)
    mask = (rows < T)[:, None] & (cols < H)[None, :]
    tile = tl.load(X + rows[:, None] * H + cols[None, :], mask=mask, other=0.0)
    tl.store(XT + cols[:, None] * t_stride + rows[None, :], tl.trans(tile), mask=tl.trans(mask))


@kernel(inputs=3, outputs=1)
def lce_dw_kernel(
    XT, D, DW_IN,
    T, V, H, v0, C, t_stride,
    DW,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_T: tl.constexpr, IEEE: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """Grid (cdiv(H, BM) * cdiv(C, BN),). Rows v0 + [0, C) of DW [V, H] (weight's dtype) =
    (XT D)^T (XT [H, t_stride]: x transposed; D [T, C]: the chunk's dlogits), summed over all
    T in one program; a tile of H x C, stored transposed. DW_IN: the same memory (written by
    the other chunks). ALIGN divides H, C and t_stride."""
    H = aligned(H, ALIGN)
    C = aligned(C, ALIGN)
    t_stride = aligned(t_stride, ALIGN)
    pid = tl.program_id(0)
    n_c = tl.cdiv(C, BN)
    hs = (pid // n_c).to(tl.int64) * BM + tl.arange(0, BM)
    local = (pid % n_c).to(tl.int64) * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK).to(tl.int64)
    # D's columns past V (v0 + local >= V, the last chunk's padding, written by dlogits from
    # logits 0) reach only dweight columns the store leaves out; a load mask on V would stop
    # the loads vectorising
    dmask = local < C
    hmask = hs < H
    xp = XT + hs[:, None] * t_stride + kk[None, :]  # [BM, BK]
    dp = D + kk[:, None] * C + local[None, :]       # [BK, BN]
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, T, BK):
        if EVEN_T:
            xv = tl.load(xp, mask=hmask[:, None], other=0.0)
            d = tl.load(dp, mask=dmask[None, :], other=0.0)
        else:
            km = (k0 + kk) < T
            xv = tl.load(xp, mask=hmask[:, None] & km[None, :], other=0.0)
            d = tl.load(dp, mask=km[:, None] & dmask[None, :], other=0.0)
        acc = _dot(xv, d, acc, IEEE)
        xp += BK
        dp += BK * C
    tl.store(DW + (v0 + local)[None, :] * H + hs[:, None], acc.to(DW.dtype.element_ty),
             mask=hmask[:, None] & (dmask & (v0 + local < V))[None, :])


@kernel(inputs=2, outputs=1)
def lce_dbias_kernel(
    D, DB_IN,
    T, V, v0, C,
    DB,
    BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(C, BLOCK_C),). DB[v0 + [0, C)] (bias's dtype) = the column sums of D [T, C],
    over T in order. A kernel of its own: summing the tiles the dweight matmul loads, in the
    same loop, gave wrong dweight on an H100 (Triton 3.6; see benchmarks/results/README.md,
    linear_cross_entropy). DB_IN: DB's memory. ALIGN divides C."""
    C = aligned(C, ALIGN)
    local = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = (local < C) & (v0 + local < V)
    tt = tl.arange(0, BLOCK_T).to(tl.int64)
    acc = tl.zeros([BLOCK_T, BLOCK_C], tl.float32)
    for t0 in range(0, T, BLOCK_T):
        acc += tl.load(D + (t0 + tt)[:, None] * C + local[None, :],
                       mask=((t0 + tt) < T)[:, None] & cmask[None, :], other=0.0).to(tl.float32)
    tl.store(DB + v0 + local, tl.sum(acc, 0).to(DB.dtype.element_ty), mask=cmask)


@kernel(inputs=3, outputs=2)
def lce_dx_kernel(
    D, W, ACC_IN,
    T, V, H, v0, C,
    ACC, DX,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_C: tl.constexpr,
    FIRST: tl.constexpr, LAST: tl.constexpr, IEEE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(T, BM) * cdiv(H, BN),). Adds D [T, C] @ W[v0 + [0, C)] to dx's sum: ACC [T,
    H] fp32 (ACC_IN's memory; not read when FIRST), or, when LAST, writes the total to DX
    (x's dtype) instead. ALIGN divides H and C."""
    H = aligned(H, ALIGN)
    C = aligned(C, ALIGN)
    mb, nb = _swizzle(tl.program_id(0), tl.cdiv(T, BM), GROUP, tl.cdiv(H, BN))
    rows = mb.to(tl.int64) * BM + tl.arange(0, BM)
    cols_h = nb.to(tl.int64) * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK).to(tl.int64)
    rmask = rows < T
    hmask = cols_h < H
    dp = D + rows[:, None] * C + kk[None, :]          # [BM, BK]
    wp = W + (v0 + kk[:, None]) * H + cols_h[None, :]  # [BK, BN]
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, C, BK):
        if EVEN_C:  # (C a multiple of BK and v0 + C <= V)
            d = tl.load(dp, mask=rmask[:, None], other=0.0)
            w = tl.load(wp, mask=hmask[None, :], other=0.0)
        else:
            km = ((k0 + kk) < C) & (v0 + k0 + kk < V)
            d = tl.load(dp, mask=rmask[:, None] & km[None, :], other=0.0)
            w = tl.load(wp, mask=km[:, None] & hmask[None, :], other=0.0)
        acc = _dot(d, w, acc, IEEE)
        dp += BK
        wp += BK * H
    offs = rows[:, None] * H + cols_h[None, :]
    mask = rmask[:, None] & hmask[None, :]
    if not FIRST:
        acc += tl.load(ACC_IN + offs, mask=mask, other=0.0)
    if LAST:
        tl.store(DX + offs, acc.to(DX.dtype.element_ty), mask=mask)
    else:
        tl.store(ACC + offs, acc, mask=mask)
