"""Flash attention kernels: forward with an online softmax, backward in three launches.

Per (batch, query head): q [Nq, D], k and v [Nk, D] (those of the query head's kv head,
hq // G with G = Hq / Hkv: grouped-query attention reads each kv head in place),
s = q k^T * softmax_scale, p = softmax(s) over the visible keys, o = p v. Causal masks
align to the bottom right (FlashAttention 2): query i sees key j iff j <= i + Nk - Nq.

Forward (``fa_fwd_kernel``, one program per BLOCK_M queries): walks the key blocks,
keeping the running row maximum m, the running sum l of exp(s - m) and the unnormalised
output, rescaled whenever m grows; never holds more than a [BLOCK_M, BLOCK_N] score tile.
Scores are kept in the base-2 domain (s * log2(e), exp2). Writes o and the natural-log
log-sum-exp lse = m + log(l) (fp32). Key blocks split into those every query of the
program sees (no mask) and the boundary blocks (causal diagonal, the last partial block),
masked. A query that sees no key gets o = 0 and lse = -inf.

Backward, with delta_i = sum_d o_id do_id - dlse_i (dlse: the cotangent of lse, if any)
and p recomputed from lse:

    dv_j = sum_i p_ij do_i,   dp_ij = do_i . v_j,   ds_ij = p_ij (dp_ij - delta_i),
    dq_i = scale * sum_j ds_ij k_j,   dk_j = scale * sum_i ds_ij q_i

``fa_bwd_delta_kernel`` computes delta and lse * log2(e) (+inf where lse = -inf, so p = 0
there); ``fa_bwd_dkdv_kernel`` (one program per key block of a kv head, looping over the
G query heads that share it: no atomics, a fixed summation order) writes dk and dv;
``fa_bwd_dq_kernel`` (one program per query block) writes dq.

Conventions as in the other families: input pointers, scalars, output pointers,
constexprs; explicit (b, h, n, d) strides; D and the b, h, n strides are multiples of
ALIGN; offsets of heads in int64, row tiles reached by advancing pointers. Accumulation in
fp32; p and ds enter the tensor cores in the input dtype (fp32 inputs: IEEE fp32 dots).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _dot(a, b, acc, PRECISION: tl.constexpr):
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _load_rows(ptrs, rows, n_rows, dmask, ROW_MASK: tl.constexpr, EVEN_D: tl.constexpr):
    """A [rows, BD] tile; rows >= n_rows (when ROW_MASK) and columns past D read as 0."""
    if ROW_MASK:
        if EVEN_D:
            x = tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
        else:
            x = tl.load(ptrs, mask=(rows < n_rows)[:, None] & dmask[None, :], other=0.0)
    else:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=dmask[None, :], other=0.0)
    return x


@triton.jit
def _head_base(X, b, h, sb, sh, ALIGN: tl.constexpr):
    return X + b * aligned(sb, ALIGN) + h * aligned(sh, ALIGN)


@triton.jit
def _tile_ptrs(base, first_row, offs_r, offs_d, sn, sd, ALIGN: tl.constexpr):
    """Pointers to rows first_row + offs_r (int64 row offset), columns offs_d."""
    base = base + tl.cast(first_row, tl.int64) * aligned(sn, ALIGN)
    return base + offs_r[:, None] * aligned(sn, ALIGN) + offs_d[None, :] * sd


@triton.jit
def _load_block(X, b, h, sb, sh, sn, sd, first, offs_r, n_rows, offs_d, dmask, EVEN_D: tl.constexpr,
                ALIGN: tl.constexpr):
    """Rows first + offs_r of head (b, h) of X, those past n_rows reading as 0."""
    ptrs = _tile_ptrs(_head_base(X, b, h, sb, sh, ALIGN), first, offs_r, offs_d, sn, sd, ALIGN)
    return _load_rows(ptrs, first + offs_r, n_rows, dmask, True, EVEN_D)


@triton.jit
def _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, start, end, Nk, shift, dmask, qk_scale, skn, svn,
                BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """Key blocks [start, end): the online-softmax update. With MASK, keys past Nk and (when
    CAUSAL) keys past each query's diagonal score -inf; a row with no visible key so far
    keeps m = -inf, and its p and rescale factor come out 0 rather than NaN."""
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += tl.cast(start, tl.int64) * aligned(skn, ALIGN)
    v_ptrs += tl.cast(start, tl.int64) * aligned(svn, ALIGN)
    for start_n in range(start, end, BLOCK_N):
        keys = start_n + offs_n
        k = _load_rows(k_ptrs, keys, Nk, dmask, MASK, EVEN_D)
        s = _dot(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION) * qk_scale
        if MASK:
            visible = (keys < Nk)[None, :]
            if CAUSAL:
                visible = visible & (keys[None, :] <= offs_m[:, None] + shift)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = m_new
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_rows(v_ptrs, keys, Nk, dmask, MASK, EVEN_D)
        acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], PRECISION)
        m_i = m_new
        k_ptrs += BLOCK_N * aligned(skn, ALIGN)
        v_ptrs += BLOCK_N * aligned(svn, ALIGN)
    return acc, m_i, l_i


@triton.jit
def _key_ranges(first_row, n_rows_block, Nk, shift, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """For queries [first_row, first_row + n_rows_block): (full_end, end), the keys [0,
    full_end) every one of them sees (whole blocks) and the end of the keys any of them sees."""
    nk_full = Nk // BLOCK_N * BLOCK_N
    if CAUSAL:
        full_end = tl.minimum(tl.maximum(first_row + shift + 1, 0) // BLOCK_N * BLOCK_N, nk_full)
        end = tl.minimum(tl.maximum(first_row + n_rows_block + shift, 0), Nk)
    else:
        full_end = nk_full
        end = Nk
    return full_end, end


@triton.jit
def _query_block(CAUSAL: tl.constexpr):
    """This program's query block. Causal: in reverse launch order, so that the blocks that
    see the most keys start first and the short ones fill the tail of the grid."""
    if CAUSAL:
        pid = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        pid = tl.program_id(0)
    return pid


@triton.jit
def _query_tile(Hq, G, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
                ALIGN: tl.constexpr):
    """The query block and head of a program of grid (query blocks, B*Hq): (bh, b, hq, hk (the
    kv head, int64), first (its first query row), row, key and head-dim offsets, the head-dim
    mask)."""
    pid_m = _query_block(CAUSAL)
    bh = tl.program_id(1)
    D = aligned(D, ALIGN)
    b = (bh // Hq).to(tl.int64)
    hq = bh % Hq
    hk = (hq // G).to(tl.int64)
    offs_d = tl.arange(0, BD)
    return (bh, b, hq.to(tl.int64), hk, pid_m * BLOCK_M, tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), offs_d,
            offs_d < D)


@triton.jit
def _block_tile(H, D, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """A program of grid (blocks, B*H), in launch order: (bh, b, h (int64), D carrying its
    alignment, the first row of its block, the block's row offsets)."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    D = aligned(D, ALIGN)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    return bh, b, h, D, pid * BLOCK, tl.arange(0, BLOCK)


@kernel(inputs=3, outputs=2)
def fa_fwd_kernel(
    Q, K, V,
    Hq, G, Nq, Nk, D, qk_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, LSE,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (query blocks, B*Hq). o[rows] and lse[rows] of one query block of one head.
    qk_scale = softmax_scale * log2(e). Causal: the last query blocks (the most keys) run first."""
    bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask = _query_tile(Hq, G, D, BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN)
    offs_m = first + offs_r
    q = _load_block(Q, b, hq, sqb, sqh, sqn, sqd, first, offs_r, Nq, offs_d, dmask, EVEN_D, ALIGN)
    k_ptrs = _tile_ptrs(_head_base(K, b, hk, skb, skh, ALIGN), 0, offs_n, offs_d, skn, skd, ALIGN)
    v_ptrs = _tile_ptrs(_head_base(V, b, hk, svb, svh, ALIGN), 0, offs_n, offs_d, svn, svd, ALIGN)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BD], tl.float32)
    shift = Nk - Nq
    full_end, end = _key_ranges(first, BLOCK_M, Nk, shift, BLOCK_N, CAUSAL)
    acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, 0, full_end, Nk, shift, dmask, qk_scale,
                                skn, svn, BLOCK_N, False, CAUSAL, EVEN_D, PRECISION, ALIGN)
    acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, full_end, end, Nk, shift, dmask, qk_scale,
                                skn, svn, BLOCK_N, True, CAUSAL, EVEN_D, PRECISION, ALIGN)
    empty = l_i == 0.0
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = _tile_ptrs(_head_base(O, b, hq, sob, soh, ALIGN), first, offs_r, offs_d, son, sod, ALIGN)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=(offs_m < Nq)[:, None] & dmask[None, :])
    tl.store(LSE + bh.to(tl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)


@kernel(inputs=4, outputs=2)
def fa_bwd_delta_kernel(
    O, DO, LSE, DLSE,
    Hq, Nq, D,
    sob, soh, son, sod, sdb, sdh, sdn, sdd,
    DELTA, LSE2,
    BLOCK_M: tl.constexpr, BD: tl.constexpr, HAS_DLSE: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (query blocks, B*Hq). delta = rowsum(o * do) - dlse and lse2 = lse * log2(e)
    (+inf for rows that saw no key), both [B*Hq, Nq] fp32."""
    bh, b, h, D, first, offs_r = _block_tile(Hq, D, BLOCK_M, ALIGN)
    offs_m = first + offs_r
    offs_d = tl.arange(0, BD)
    dmask = offs_d < D
    o = _load_block(O, b, h, sob, soh, son, sod, first, offs_r, Nq, offs_d, dmask, False, ALIGN)
    do = _load_block(DO, b, h, sdb, sdh, sdn, sdd, first, offs_r, Nq, offs_d, dmask, False, ALIGN)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    rows = bh.to(tl.int64) * Nq + offs_m
    mmask = offs_m < Nq
    if HAS_DLSE:
        delta -= tl.load(DLSE + rows, mask=mmask, other=0.0)
    lse = tl.load(LSE + rows, mask=mmask, other=0.0)
    tl.store(DELTA + rows, delta, mask=mmask)
    tl.store(LSE2 + rows, tl.where(lse == float("-inf"), float("inf"), lse * LOG2E), mask=mmask)


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, LSE2, DELTA, offs_n, start, end, Nq, shift, dmask, qk_scale,
                 sqn, sdn, BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                 EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """Query blocks [start, end) of one query head into dk, dv of one key block. LSE2 and
    DELTA point at the head's rows. With MASK, rows past Nq read as 0 (and p = 0 there,
    lse2 = +inf) and, when CAUSAL, p = 0 past the diagonal."""
    offs_r = tl.arange(0, BLOCK_M)
    q_ptrs += tl.cast(start, tl.int64) * aligned(sqn, ALIGN)
    do_ptrs += tl.cast(start, tl.int64) * aligned(sdn, ALIGN)
    for start_m in range(start, end, BLOCK_M):
        rows = start_m + offs_r
        q = _load_rows(q_ptrs, rows, Nq, dmask, MASK, EVEN_D)
        if MASK:
            lse2 = tl.load(LSE2 + rows, mask=rows < Nq, other=float("inf"))
        else:
            lse2 = tl.load(LSE2 + rows)
        sT = _dot(k, tl.trans(q), tl.zeros([k.shape[0], BLOCK_M], tl.float32), PRECISION) * qk_scale
        pT = tl.math.exp2(sT - lse2[None, :])
        if MASK:
            if CAUSAL:
                pT = tl.where(offs_n[:, None] <= rows[None, :] + shift, pT, 0.0)
        do = _load_rows(do_ptrs, rows, Nq, dmask, MASK, EVEN_D)
        dv = _dot(pT.to(do.dtype), do, dv, PRECISION)
        dpT = _dot(v, tl.trans(do), tl.zeros([k.shape[0], BLOCK_M], tl.float32), PRECISION)
        if MASK:
            delta = tl.load(DELTA + rows, mask=rows < Nq, other=0.0)
        else:
            delta = tl.load(DELTA + rows)
        dsT = pT * (dpT - delta[None, :])
        dk = _dot(dsT.to(q.dtype), q, dk, PRECISION)
        q_ptrs += BLOCK_M * aligned(sqn, ALIGN)
        do_ptrs += BLOCK_M * aligned(sdn, ALIGN)
    return dk, dv


@kernel(inputs=6, outputs=2)
def fa_bwd_dkdv_kernel(
    Q, K, V, DO, LSE2, DELTA,
    Hkv, G, Nq, Nk, D, qk_scale, softmax_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd,
    DK, DV,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (key blocks, B*Hkv). dk, dv of one key block, summed over the G query heads of
    its kv head in order. For each head, the query blocks split into the causal boundary
    (masked), those that see the whole key block (unmasked) and the last partial block."""
    bh, b, hk, D, first, offs_c = _block_tile(Hkv, D, BLOCK_N, ALIGN)  # a key block
    offs_n = first + offs_c
    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BD)
    dmask = offs_d < D
    k = _load_block(K, b, hk, skb, skh, skn, skd, first, offs_c, Nk, offs_d, dmask, EVEN_D, ALIGN)
    v = _load_block(V, b, hk, svb, svh, svn, svd, first, offs_c, Nk, offs_d, dmask, EVEN_D, ALIGN)
    dk = tl.zeros([BLOCK_N, BD], tl.float32)
    dv = tl.zeros([BLOCK_N, BD], tl.float32)
    shift = Nk - Nq
    nq_full = Nq // BLOCK_M * BLOCK_M
    if CAUSAL:
        # queries that see some key of the block, and those that see all of it
        lo = tl.maximum(first - shift, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(first + BLOCK_N - 1 - shift, 0), BLOCK_M) * BLOCK_M
    else:
        lo = 0
        full_lo = 0
    for g in range(0, G):
        hq = hk * G + g
        q_ptrs = _tile_ptrs(_head_base(Q, b, hq, sqb, sqh, ALIGN), 0, offs_r, offs_d, sqn, sqd, ALIGN)
        do_ptrs = _tile_ptrs(_head_base(DO, b, hq, sdb, sdh, ALIGN), 0, offs_r, offs_d, sdn, sdd, ALIGN)
        rows_base = ((b * Hkv + hk) * G + g) * Nq
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, LSE2 + rows_base, DELTA + rows_base, offs_n, lo,
                              tl.minimum(full_lo, Nq), Nq, shift, dmask, qk_scale, sqn, sdn, BLOCK_M, True, CAUSAL,
                              EVEN_D, PRECISION, ALIGN)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, LSE2 + rows_base, DELTA + rows_base, offs_n, full_lo,
                              nq_full, Nq, shift, dmask, qk_scale, sqn, sdn, BLOCK_M, False, CAUSAL, EVEN_D,
                              PRECISION, ALIGN)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, LSE2 + rows_base, DELTA + rows_base, offs_n,
                              tl.maximum(full_lo, nq_full), Nq, Nq, shift, dmask, qk_scale, sqn, sdn, BLOCK_M, True,
                              CAUSAL, EVEN_D, PRECISION, ALIGN)
    smask = (offs_n < Nk)[:, None] & dmask[None, :]
    dk_ptrs = _tile_ptrs(_head_base(DK, b, hk, sgkb, sgkh, ALIGN), first, offs_c, offs_d, sgkn, sgkd, ALIGN)
    dv_ptrs = _tile_ptrs(_head_base(DV, b, hk, sgvb, sgvh, ALIGN), first, offs_c, offs_d, sgvn, sgvd, ALIGN)
    tl.store(dk_ptrs, (dk * softmax_scale).to(DK.dtype.element_ty), mask=smask)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=smask)


@triton.jit
def _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, start, end, Nk, shift, dmask, qk_scale, skn, svn,
               BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
               PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """Key blocks [start, end) into dq of one query block (unscaled)."""
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += tl.cast(start, tl.int64) * aligned(skn, ALIGN)
    v_ptrs += tl.cast(start, tl.int64) * aligned(svn, ALIGN)
    for start_n in range(start, end, BLOCK_N):
        keys = start_n + offs_n
        k = _load_rows(k_ptrs, keys, Nk, dmask, MASK, EVEN_D)
        v = _load_rows(v_ptrs, keys, Nk, dmask, MASK, EVEN_D)
        s = _dot(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION) * qk_scale
        p = tl.math.exp2(s - lse2[:, None])
        if MASK:
            visible = (keys < Nk)[None, :]
            if CAUSAL:
                visible = visible & (keys[None, :] <= offs_m[:, None] + shift)
            p = tl.where(visible, p, 0.0)
        dp = _dot(do, tl.trans(v), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION)
        ds = p * (dp - delta[:, None])
        dq = _dot(ds.to(k.dtype), k, dq, PRECISION)
        k_ptrs += BLOCK_N * aligned(skn, ALIGN)
        v_ptrs += BLOCK_N * aligned(svn, ALIGN)
    return dq


@triton.jit
def _dq_tile(Q, K, V, DO, LSE2, DELTA, Hq, G, Nq, D,
             sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
             EVEN_D: tl.constexpr, ALIGN: tl.constexpr):
    """A dq program's query tile (flash and block-sparse attention): its q, do, lse2 and delta
    rows, and pointers to key and value row 0 of its kv head."""
    bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask = _query_tile(Hq, G, D, BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN)
    offs_m = first + offs_r
    mmask = offs_m < Nq
    q = _load_block(Q, b, hq, sqb, sqh, sqn, sqd, first, offs_r, Nq, offs_d, dmask, EVEN_D, ALIGN)
    do = _load_block(DO, b, hq, sdb, sdh, sdn, sdd, first, offs_r, Nq, offs_d, dmask, EVEN_D, ALIGN)
    rows = bh.to(tl.int64) * Nq + offs_m
    lse2 = tl.load(LSE2 + rows, mask=mmask, other=float("inf"))
    delta = tl.load(DELTA + rows, mask=mmask, other=0.0)
    k_ptrs = _tile_ptrs(_head_base(K, b, hk, skb, skh, ALIGN), 0, offs_n, offs_d, skn, skd, ALIGN)
    v_ptrs = _tile_ptrs(_head_base(V, b, hk, svb, svh, ALIGN), 0, offs_n, offs_d, svn, svd, ALIGN)
    return bh, b, hq, first, offs_r, offs_n, offs_d, dmask, offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs


@triton.jit
def _store_dq(DQ, dq, b, hq, first, offs_r, offs_d, mmask, dmask, softmax_scale, sgb, sgh, sgn, sgd,
              ALIGN: tl.constexpr):
    dq_ptrs = _tile_ptrs(_head_base(DQ, b, hq, sgb, sgh, ALIGN), first, offs_r, offs_d, sgn, sgd, ALIGN)
    tl.store(dq_ptrs, (dq * softmax_scale).to(DQ.dtype.element_ty), mask=mmask[:, None] & dmask[None, :])


@kernel(inputs=6, outputs=1)
def fa_bwd_dq_kernel(
    Q, K, V, DO, LSE2, DELTA,
    Hq, G, Nq, Nk, D, qk_scale, softmax_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    DQ,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (query blocks, B*Hq). dq of one query block, over the keys it sees (causal: the
    last blocks first)."""
    bh, b, hq, first, offs_r, offs_n, offs_d, dmask, offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs = _dq_tile(
        Q, K, V, DO, LSE2, DELTA, Hq, G, Nq, D, sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
        sdb, sdh, sdn, sdd, BLOCK_M, BLOCK_N, BD, CAUSAL, EVEN_D, ALIGN)
    dq = tl.zeros([BLOCK_M, BD], tl.float32)
    shift = Nk - Nq
    full_end, end = _key_ranges(first, BLOCK_M, Nk, shift, BLOCK_N, CAUSAL)
    dq = _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, 0, full_end, Nk, shift, dmask, qk_scale, skn, svn,
                    BLOCK_N, False, CAUSAL, EVEN_D, PRECISION, ALIGN)
    dq = _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, full_end, end, Nk, shift, dmask, qk_scale, skn,
                    svn, BLOCK_N, True, CAUSAL, EVEN_D, PRECISION, ALIGN)
    _store_dq(DQ, dq, b, hq, first, offs_r, offs_d, mmask, dmask, softmax_scale, sgb, sgh, sgn, sgd, ALIGN)
