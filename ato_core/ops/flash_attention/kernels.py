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

Options (constexprs, off by default; the plain path compiles as without them). WINDOW: query
i sees key j only if i + shift - left <= j <= i + shift + right (shift = Nk - Nq; causal
is right = 0 without WINDOW); key blocks wholly outside a program's band are never visited.
SOFTCAP: a score s becomes cap tanh(s / cap) (its gradient times 1 - tanh^2). ALIBI: adds
-slope_h |i + shift - j| after the softcap (slopes fp32 [Hq] or [B, Hq]). Q_LENS, KV_LENS:
batch b has q_len = QLEN[b] queries and kv_len = KVLEN[b] keys (the rest: o = 0, lse = -inf,
zero gradients; shift = kv_len - q_len). SEGMENTS: query i sees key j only if QSEG[b, i] ==
KSEG[b, j] (every key block then takes the masked path). DROPOUT: p is kept where
_dropout_keep draws so (seed: SEED_WORDS as triton_helpers.dropout_seed) and scaled by
DROP_SCALE (l still sums every p). The backward draws the mask again: dv from the kept, scaled
p, dp = keep * DROP_SCALE * (do v^T), and ds = p (dp - delta) as without (delta = rowsum(o do)
is sum_j p_ij dp_ij with the dropout).

Non-finite inputs: the key and value of a key that no query row sees (outside every row's band,
in no row's segment, masked for every row below q_len) and a padded query never reach an output,
as in the math: where a tile holds them beside visible pairs, the kernels read them as 0 (p = 0
or ds = 0 times a NaN is NaN). A key that some row of a block sees spreads a NaN of its key or
value to the block's other rows (0 * NaN in the tile's dot), as in other flash kernels.

Conventions as in the other families: input pointers, scalars, output pointers,
constexprs; explicit (b, h, n, d) strides; D and the b, h, n strides are multiples of
ALIGN; offsets of heads in int64, row tiles reached by advancing pointers. Accumulation in
fp32; p and ds enter the tensor cores in the input dtype (fp32 inputs: IEEE fp32 dots).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.target import has_gluon
from ato_core.triton_helpers import aligned, dropout_seed, tanh_rcp
from .packed import _clamp, _seen_keys, _sequence, _unwritten

# the Hopper kernels, in Gluon: only with the Triton they were written for (target.has_gluon), and then
# an error in them raises here rather than turning them off unseen
if has_gluon():
    from . import hopper
else:
    hopper = None

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
# Tiles whose segment ids a block's range scan reads a step (_segment_ranges).
SEGMENT_SCAN_TILES = tl.constexpr(16)
DROPOUT_ROUNDS = tl.constexpr(7)  # Philox rounds of the dropout draw (plans.DROPOUT_ROUNDS)


@triton.jit
def _dot(a, b, acc, PRECISION: tl.constexpr):
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _load_rows(ptrs, rows, n_rows, dmask, ROW_MASK: tl.constexpr, EVEN_D: tl.constexpr):
    """A [rows, BD] tile; rows >= n_rows (when ROW_MASK) and columns past D read as 0."""
    if ROW_MASK:
        x = _load_where(ptrs, rows < n_rows, dmask, EVEN_D)
    else:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=dmask[None, :], other=0.0)
    return x


@triton.jit
def _load_where(ptrs, row_mask, dmask, EVEN_D: tl.constexpr):
    """A [rows, BD] tile; rows where row_mask is false and columns past D read as 0."""
    if EVEN_D:
        return tl.load(ptrs, mask=row_mask[:, None], other=0.0)
    else:
        return tl.load(ptrs, mask=row_mask[:, None] & dmask[None, :], other=0.0)


@triton.jit
def _seen(visible, rows, q_len):
    """[BLOCK_N]: the keys of a tile that some query row (below q_len) sees. The others' values
    read as 0, so that a NaN among them meets no zero weight (0 * NaN) on its way into o."""
    return tl.max(((rows < q_len)[:, None] & visible).to(tl.int32), 0) > 0


@triton.jit
def _seen_values(v_ptrs, keys, seen_lo, seen_hi, visible, rows, q_len, dmask, EVEN_D: tl.constexpr,
                 PER_PAIR: tl.constexpr):
    """A masked tile's values: those of keys outside [seen_lo, seen_hi) (_seen_keys) and, with
    PER_PAIR (a mask or segment ids), of keys no row sees (_seen) read as 0."""
    seen = (keys >= seen_lo) & (keys < seen_hi)
    if PER_PAIR:
        seen = seen & _seen(visible, rows, q_len)
    return _load_where(v_ptrs, seen, dmask, EVEN_D)


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
def _scores(s, qpos, kpos, qk_scale, cap_in, cap_out, slope2, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """A raw dot q . k -> (the score in base 2, tanh(s * cap_in) for the backward (SOFTCAP;
    else the score)). qpos (query row + shift) and kpos (key) broadcast to s's shape."""
    if SOFTCAP:
        s = cap_out - tanh_rcp(s, cap_in, 2.0 * cap_out)
        t = s * (1.0 / cap_out)
    else:
        s = s * qk_scale
        t = s
    if ALIBI:
        s = s - slope2 * tl.abs(qpos - kpos).to(tl.float32)
    return s, t


@triton.jit
def _visible(qpos, kpos, kv_len, lo_shift, hi_shift, qseg, kseg, KEYS: tl.constexpr, CAUSAL: tl.constexpr,
             WINDOW: tl.constexpr, SEGMENTS: tl.constexpr):
    """Whether query qpos sees key kpos (both broadcast): keys below kv_len (with KEYS), in
    the band [qpos + lo_shift, qpos + hi_shift] (causal: the upper bound alone), in the query's
    segment."""
    if KEYS:
        v = kpos < kv_len
        if CAUSAL or WINDOW:
            v = v & (kpos <= qpos + hi_shift)
    elif CAUSAL or WINDOW:
        v = kpos <= qpos + hi_shift
    else:
        v = qseg == kseg
    if WINDOW:
        v = v & (kpos >= qpos + lo_shift)
    if SEGMENTS:
        v = v & (qseg == kseg)
    return v


@triton.jit
def _pair_terms(s, visible, BIAS, AMASK, qrows, kcols, sbi, sbj, smi, smj, Nq, Nk, HAS_BIAS: tl.constexpr,
                HAS_MASK: tl.constexpr):
    """The bias (HAS_BIAS, times log2(e)) added to base-2 scores s and the boolean mask (HAS_MASK)
    anded into ``visible`` at query rows qrows and keys kcols (broadcast against each other);
    BIAS and AMASK point at the head's [Nq, Nk] (strides 0 on broadcast axes)."""
    inside = (qrows < Nq) & (kcols < Nk)
    if HAS_BIAS:
        s = s + tl.load(BIAS + qrows.to(tl.int64) * sbi + kcols.to(tl.int64) * sbj, mask=inside,
                        other=0.0).to(tl.float32) * LOG2E
    if HAS_MASK:
        visible = visible & (tl.load(AMASK + qrows.to(tl.int64) * smi + kcols.to(tl.int64) * smj, mask=inside,
                                     other=0) != 0)
    return s, visible


@triton.jit
def _pair_keys(start_n, offs_n, BLOCK_N: tl.constexpr):
    """Keys start_n + offs_n of a query block's tile for its bias and mask tiles, written as
    start_n // BLOCK_N * BLOCK_N + offs_n so that the compiler sees the tile start at a multiple
    of BLOCK_N and loads them in vectors (a multiple_of hint on a loop variable is dropped). The
    same keys: with a bias or a mask every tile is masked (DENSE) and the masked ranges start at
    multiples of BLOCK_N (_key_ranges, _segment_ranges); the interpreter's tests check it."""
    return start_n // BLOCK_N * BLOCK_N + offs_n


@triton.jit
def _pair_aligned(sbb, sbh, sbi, smb, smh, smi, Nk, PAIR_ALIGN: tl.constexpr):
    """The bias's and mask's strides but the keys' and Nk declared multiples of PAIR_ALIGN (the
    plan's, from their values), so that their [BLOCK_M, BLOCK_N] tiles load in 16-byte vectors
    along the keys: a mask on keys < Nk of unknown alignment makes every load one element."""
    return (aligned(sbb, PAIR_ALIGN), aligned(sbh, PAIR_ALIGN), aligned(sbi, PAIR_ALIGN), aligned(smb, PAIR_ALIGN),
            aligned(smh, PAIR_ALIGN), aligned(smi, PAIR_ALIGN), aligned(Nk, PAIR_ALIGN))


@triton.jit
def _segment_ids(SEG, b, sb, sn, idx, n, other, SEGMENTS: tl.constexpr):
    """Segment ids of positions idx (< n) of batch b (``other`` past n; 0 without SEGMENTS)."""
    if SEGMENTS:
        return tl.load(SEG + b * sb + idx.to(tl.int64) * sn, mask=idx < n, other=other)
    else:
        return tl.zeros(idx.shape, tl.int32)


@triton.jit
def _segment_ranges(SEG, b, ssb, ssn, own, own_valid, start, full_start, full_end, end, other_len,
                    TILE: tl.constexpr, DENSE: tl.constexpr):
    """A block's ranges of the other side's tiles (tiles of TILE from start: masked [start,
    full_start), unmasked [full_start, full_end), masked [full_end, end)) narrowed by segment
    ids. own [BLOCK]: the block's ids (own_valid: its rows that count); SEG: the other side's
    ids of batch b (strides ssb, ssn; positions from other_len on do not count). Visited: the
    tiles from the first to the last that hold an id between own's least and greatest (none:
    nothing). Unmasked (never with DENSE): where own is one segment, the tiles whose ids all
    equal it, if they form one run, within [full_start, full_end); else every tile masked."""
    o0 = tl.sum(tl.where(tl.arange(0, own.shape[0]) == 0, own, 0), 0)
    lo_id = tl.min(tl.where(own_valid, own, o0), 0)
    hi_id = tl.max(tl.where(own_valid, own, o0), 0)
    offs_t = tl.arange(0, SEGMENT_SCAN_TILES) * TILE
    offs_c = tl.arange(0, TILE)
    first_hit = end
    last_hit = start
    first_full = end
    last_full = start
    n_full = 0
    for t0 in range(start, end, SEGMENT_SCAN_TILES * TILE):
        tiles = t0 + offs_t
        pos = tiles[:, None] + offs_c[None, :]
        inside = (pos < end) & (pos < other_len)
        ids = tl.load(SEG + b * ssb + pos.to(tl.int64) * ssn, mask=inside, other=0)
        hit = tl.max((inside & (ids >= lo_id) & (ids <= hi_id)).to(tl.int32), 1) > 0
        first_hit = tl.minimum(first_hit, tl.min(tl.where(hit, tiles, end), 0))
        last_hit = tl.maximum(last_hit, tl.max(tl.where(hit, tiles + TILE, start), 0))
        if not DENSE:
            full = tl.min((inside & (ids == lo_id)).to(tl.int32), 1) > 0
            first_full = tl.minimum(first_full, tl.min(tl.where(full, tiles, end), 0))
            last_full = tl.maximum(last_full, tl.max(tl.where(full, tiles + TILE, start), 0))
            n_full += tl.sum(full.to(tl.int32), 0)
    new_start = tl.minimum(first_hit, end)
    new_end = tl.maximum(tl.minimum(last_hit, end), new_start)
    if DENSE:
        return new_start, new_end, new_end, new_end
    else:
        lo = tl.maximum(first_full, full_start)
        hi = tl.minimum(last_full, full_end)
        run = (lo_id == hi_id) & (n_full > 0) & (n_full * TILE == last_full - first_full) & (lo < hi)
        return new_start, tl.where(run, lo, new_end), tl.where(run, hi, new_end), new_end


@triton.jit
def _dropout_keep(seed, bh, row0, col0, thr, R: tl.constexpr, C: tl.constexpr):
    """The attention-dropout keep-mask of query rows [row0, row0 + R) and keys [col0, col0 + C)
    of head bh = b * Hq + hq ([R, C], True where kept; row0, R multiples of 16, col0, C of 32).
    One Philox4x32-7 call under key ``seed`` draws 16 bytes for queries {i, i + 8} x keys
    {j + 8 n + c: n < 4, c < 2} (i % 16 < 8, j % 32 < 8, j even): counter ((j // 32) * 4 +
    (j // 2) % 4, (i // 16) * 8 + i % 8, bh, 0); query i + 8 h, key j + 8 n + c takes byte
    c + 2 (n % 2) of word n // 2 + 2 h, kept iff >= thr. A group is the elements one thread
    holds in a tensor-core accumulator tile, so the draws need no data movement."""
    # axes: rows (R/16, h, 8), keys (C/32, n, 4, c)
    a = tl.arange(0, R // 16)[:, None, None, None, None, None, None]
    r = tl.arange(0, 8)[None, None, :, None, None, None, None]
    g = tl.arange(0, C // 32)[None, None, None, :, None, None, None]
    q = tl.arange(0, 4)[None, None, None, None, None, :, None]
    c1 = ((row0 // 16 + a) * 8 + r).to(tl.uint32)
    c0 = ((col0 // 32 + g) * 4 + q).to(tl.uint32)
    zero = c0 * 0 + c1 * 0
    w0, w1, w2, w3 = tl.philox(seed, c0 + zero, c1 + zero, zero + bh.to(tl.uint32), zero, DROPOUT_ROUNDS)
    h = tl.arange(0, 2)[None, :, None, None, None, None, None]
    n = tl.arange(0, 4)[None, None, None, None, :, None, None]
    c = tl.arange(0, 2)[None, None, None, None, None, None, :]
    word = n // 2 + 2 * h
    w = tl.where(word < 2, tl.where(word == 0, w0, w1), tl.where(word == 2, w2, w3))
    draws = (w >> (8 * (c + 2 * (n % 2))).to(tl.uint32)) & 0xFF
    return tl.reshape(draws, [R, C]) >= thr


@triton.jit
def _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, start, end, Nk, kv_len, shift, lo_shift, hi_shift, dmask,
                qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb, sksn, skn, svn, BIAS, AMASK, sbi, sbj, smi,
                smj, Nq, q_len, seen_lo, seen_hi, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
                WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, SEGMENTS: tl.constexpr,
                HAS_BIAS: tl.constexpr = False,
                HAS_MASK: tl.constexpr = False, seed=0, bh=0, row0=0, DROP_THR: tl.constexpr = 0,
                DROPOUT: tl.constexpr = False):
    """Key blocks [start, end): the online-softmax update. With MASK, keys past kv_len, those
    outside each query's band, (SEGMENTS) segment and (HAS_MASK) mask score -inf; a row with
    no visible key so far keeps m = -inf, and its p and rescale factor come out 0 rather than
    NaN; the values of keys no query row sees read as 0 (_seen_values). HAS_BIAS (only with
    MASK): the bias added (_pair_terms)."""
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += tl.cast(start, tl.int64) * aligned(skn, ALIGN)
    v_ptrs += tl.cast(start, tl.int64) * aligned(svn, ALIGN)
    for start_n in range(start, end, BLOCK_N):
        keys = start_n + offs_n
        k = _load_rows(k_ptrs, keys, kv_len, dmask, MASK, EVEN_D)
        s = _dot(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION)
        s, _ = _scores(s, offs_m[:, None] + shift, keys[None, :], qk_scale, cap_in, cap_out, slope2, SOFTCAP, ALIBI)
        if MASK:
            kseg = _segment_ids(KSEG, b, sksb, sksn, keys, Nk, -1, SEGMENTS)
            visible = _visible(offs_m[:, None], keys[None, :], kv_len, lo_shift, hi_shift, qseg[:, None],
                               kseg[None, :], True, CAUSAL, WINDOW, SEGMENTS)
            kpair = _pair_keys(start_n, offs_n, BLOCK_N)
            s, visible = _pair_terms(s, visible, BIAS, AMASK, offs_m[:, None], kpair[None, :], sbi, sbj, smi, smj, Nq,
                                     Nk, HAS_BIAS, HAS_MASK)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            v = _seen_values(v_ptrs, keys, seen_lo, seen_hi, visible, offs_m, q_len, dmask, EVEN_D,
                             SEGMENTS or HAS_MASK)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = m_new
            v = _load_rows(v_ptrs, keys, kv_len, dmask, False, EVEN_D)
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        if DROPOUT:  # l sums every p; dropped ones leave o (scaled by 1/(1 - p_drop) at the end)
            p = tl.where(_dropout_keep(seed, bh, row0, start_n, DROP_THR, q.shape[0], BLOCK_N), p, 0.0)
        acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], PRECISION)
        m_i = m_new
        k_ptrs += BLOCK_N * aligned(skn, ALIGN)
        v_ptrs += BLOCK_N * aligned(svn, ALIGN)
    return acc, m_i, l_i


@triton.jit
def _key_ranges(first_row, n_rows_block, kv_len, lo_shift, hi_shift, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                WINDOW: tl.constexpr, DENSE: tl.constexpr):
    """For queries [first_row, first_row + n_rows_block): (start, full_start, full_end, end),
    the key blocks to visit, masked [start, full_start), unmasked [full_start, full_end) (every
    query sees all of them), masked [full_end, end). Without WINDOW start = full_start = 0."""
    nk_full = kv_len // BLOCK_N * BLOCK_N
    last = first_row + n_rows_block - 1
    if CAUSAL or WINDOW:
        full_end = tl.minimum(tl.maximum(first_row + hi_shift + 1, 0) // BLOCK_N * BLOCK_N, nk_full)
        end = tl.minimum(tl.maximum(last + hi_shift + 1, 0), kv_len)
    else:
        full_end = nk_full
        end = kv_len
    start = 0
    full_start = 0
    if WINDOW:
        start = _clamp(first_row + lo_shift, 0, kv_len) // BLOCK_N * BLOCK_N
        full_start = _clamp(tl.cdiv(tl.maximum(last + lo_shift, 0), BLOCK_N) * BLOCK_N, start, end)
        full_end = _clamp(full_end, full_start, end)
    if DENSE:  # every block masked (segment ids, a bias, a mask)
        full_start = end
        full_end = end
    return start, full_start, full_end, end


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
def _batch_inner(H):
    """(bh = b * H + h, b (int64), h) of a program on axis 1 of a (blocks, B * H) grid whose
    batches run inner (BATCH_INNER), so that the B programs of a head run together and share its
    bias or mask tiles in L2 (an array broadcast over the batch). Else heads run inner."""
    p = tl.program_id(1)
    nb = tl.num_programs(1) // H
    b = (p % nb).to(tl.int64)
    h = p // nb
    return b * H + h, b, h


@triton.jit
def _query_tile(Hq, G, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
                ALIGN: tl.constexpr, BATCH_INNER: tl.constexpr = False):
    """The query block and head of a program of grid (query blocks, B*Hq): (bh = b * Hq + hq,
    b, hq, hk (the kv head, int64), first (its first query row), row, key and head-dim offsets,
    the head-dim mask). Axis 1 runs over heads, then batches (BATCH_INNER: batches, then heads;
    _batch_inner)."""
    pid_m = _query_block(CAUSAL)
    if BATCH_INNER:
        bh, b, hq = _batch_inner(Hq)
        D = aligned(D, ALIGN)
    else:
        bh = tl.program_id(1)
        D = aligned(D, ALIGN)
        b = (bh // Hq).to(tl.int64)
        hq = bh % Hq
    hk = (hq // G).to(tl.int64)
    offs_d = tl.arange(0, BD)
    return (bh, b, hq.to(tl.int64), hk, pid_m * BLOCK_M, tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), offs_d,
            offs_d < D)


@triton.jit
def _block_tile(H, D, BLOCK: tl.constexpr, ALIGN: tl.constexpr, BATCH_INNER: tl.constexpr = False):
    """A program of grid (blocks, B*H), in launch order (BATCH_INNER: _batch_inner): (bh, b, h
    (int64), D carrying its alignment, the first row of its block, the block's row offsets)."""
    pid = tl.program_id(0)
    if BATCH_INNER:
        bh, b, h = _batch_inner(H)
        D = aligned(D, ALIGN)
        h = h.to(tl.int64)
    else:
        bh = tl.program_id(1)
        D = aligned(D, ALIGN)
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
    return bh, b, h, D, pid * BLOCK, tl.arange(0, BLOCK)


@triton.jit
def _options(QLEN, KVLEN, SLOPES, b, hq, Nq, Nk, Tq, Tk, nseq, left, right, s_ab, s_ah, Q_LENS: tl.constexpr,
             KV_LENS: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, VARLEN: tl.constexpr):
    """A program's (q_len, kv_len, shift, lo_shift, hi_shift, slope2, q_row0, k_row0): the lengths
    of batch b (Q_LENS, KV_LENS; else Nq, Nk), the band's offsets from a query row (WINDOW; else
    both shift), head hq's ALiBi slope times log2(e) (ALIBI; else 0) and the first query and key
    rows of batch b (0 but with VARLEN: then QLEN and KVLEN are cu_seqlens_q and cu_seqlens_k,
    Nq and Nk the max_seqlen, Tq and Tk the packed rows, nseq the number of sequences)."""
    q_len = Nq
    kv_len = Nk
    q_row0 = 0
    k_row0 = 0
    if VARLEN:
        q_row0, q_len, _ = _sequence(QLEN, b, nseq, Nq, Tq)
        k_row0, kv_len, _ = _sequence(KVLEN, b, nseq, Nk, Tk)
    if Q_LENS:
        q_len = _clamp(tl.load(QLEN + b).to(tl.int32), 0, Nq)
    if KV_LENS:
        kv_len = _clamp(tl.load(KVLEN + b).to(tl.int32), 0, Nk)
    shift = kv_len - q_len
    lo_shift = shift
    hi_shift = shift
    if WINDOW:
        lo_shift = shift - left
        hi_shift = shift + right
    slope2 = _slope(SLOPES, b, hq, s_ab, s_ah, nseq, ALIBI, VARLEN)
    return q_len, kv_len, shift, lo_shift, hi_shift, slope2, q_row0, k_row0


@triton.jit
def _slope(SLOPES, b, hq, s_ab, s_ah, nseq, ALIBI: tl.constexpr, VARLEN: tl.constexpr):
    """Head hq's ALiBi slope times log2(e) (0 without ALIBI, and in a varlen grid's slot nseq)."""
    slope2 = 0.0
    if ALIBI:
        if VARLEN:
            slope2 = tl.load(SLOPES + b * s_ab + hq * s_ah, mask=b < nseq, other=0.0).to(tl.float32) * LOG2E
        else:
            slope2 = tl.load(SLOPES + b * s_ab + hq * s_ah).to(tl.float32) * LOG2E
    return slope2


@triton.jit
def _stored(n, n_seq, VARLEN: tl.constexpr):
    """The rows a program of a head stores below: n (Nq or Nk; rows past a length get zeros), or
    with VARLEN its sequence's n_seq (the next rows are another sequence's)."""
    if VARLEN:
        return n_seq
    else:
        return n


@triton.jit
def _fill_rows(base, sn, sd, lo, hi, first, step, offs_r, offs_d, dmask, ALIGN: tl.constexpr):
    """Zeros into rows [lo + first, hi) of a [rows, BD] head at base, one block of rows every step."""
    zero = tl.zeros([offs_r.shape[0], offs_d.shape[0]], base.dtype.element_ty)
    for r0 in range(lo + first, hi, step):
        rows = r0 + offs_r
        tl.store(_tile_ptrs(base, r0, offs_r, offs_d, sn, sd, ALIGN), zero, mask=(rows < hi)[:, None] & dmask[None, :])


@triton.jit
def _fill_lse(LSE, lo, hi, first, step, offs_r):
    """-inf into LSE[lo + first:hi], one block of rows every step (_fill_rows' lse)."""
    for r0 in range(lo + first, hi, step):
        rows = r0 + offs_r
        tl.store(LSE + rows, tl.full(offs_r.shape, float("-inf"), tl.float32), mask=rows < hi)


@triton.jit
def _fill_unwritten(X, h, sh, sn, sd, CU, b, nseq, row0, n, T, offs_r, offs_d, dmask, ALIGN: tl.constexpr):
    """Zeros into the rows of head h of the packed X ([T, H, BD]) that _unwritten gives this program."""
    lo1, hi1, lo2, hi2, first, step = _unwritten(CU, b, nseq, row0, n, T, offs_r.shape[0])
    base = X + h * aligned(sh, ALIGN)
    _fill_rows(base, sn, sd, lo1, hi1, first, step, offs_r, offs_d, dmask, ALIGN)
    _fill_rows(base, sn, sd, lo2, hi2, first, step, offs_r, offs_d, dmask, ALIGN)


@triton.jit
def _live_ranges(first, q_len, BLOCK_M: tl.constexpr, kv_len, lo_shift, hi_shift, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, WINDOW: tl.constexpr, DENSE: tl.constexpr, Q_LENS: tl.constexpr):
    """_key_ranges of a query block; none for a block past q_len (with Q_LENS)."""
    start, full_start, full_end, end = _key_ranges(first, BLOCK_M, kv_len, lo_shift, hi_shift, BLOCK_N, CAUSAL,
                                                   WINDOW, DENSE)
    if Q_LENS:
        live = first < q_len
        start = tl.where(live, start, 0)
        full_start = tl.where(live, full_start, 0)
        full_end = tl.where(live, full_end, 0)
        end = tl.where(live, end, 0)
    return start, full_start, full_end, end


@triton.jit
def _query_options(QLEN, KVLEN, SLOPES, QSEG, KSEG, b, hq, Nq, Nk, Tq, Tk, nseq, left, right, s_ab, s_ah, sqsb,
                   sqsn, sksb, sksn, first, offs_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                   WINDOW: tl.constexpr, ALIBI: tl.constexpr, Q_LENS: tl.constexpr, KV_LENS: tl.constexpr,
                   SEGMENTS: tl.constexpr, VARLEN: tl.constexpr, DENSE: tl.constexpr):
    """A query block's options (the forward's and dq's): _options, its rows' segment ids and
    its key ranges (_live_ranges, narrowed by the segment ids; DENSE: every block masked, as a
    bias or a mask need)."""
    q_len, kv_len, shift, lo_shift, hi_shift, slope2, q_row0, k_row0 = _options(
        QLEN, KVLEN, SLOPES, b, hq, Nq, Nk, Tq, Tk, nseq, left, right, s_ab, s_ah, Q_LENS, KV_LENS, WINDOW, ALIBI,
        VARLEN)
    qseg = _segment_ids(QSEG, b, sqsb, sqsn, offs_m, Nq, -2, SEGMENTS)
    start, full_start, full_end, end = _live_ranges(first, q_len, BLOCK_M, kv_len, lo_shift, hi_shift, BLOCK_N,
                                                    CAUSAL, WINDOW, DENSE, Q_LENS or VARLEN)
    if SEGMENTS:
        start, full_start, full_end, end = _segment_ranges(KSEG, b, sksb, sksn, qseg, offs_m < Nq, start, full_start,
                                                           full_end, end, kv_len, BLOCK_N, DENSE)
    return (q_len, kv_len, shift, lo_shift, hi_shift, slope2, qseg, start, full_start, full_end, end, q_row0,
            k_row0)


@triton.jit
def _query_program(QLEN, KVLEN, SLOPES, QSEG, KSEG, Hq, G, Nq, Nk, Tq, Tk, D, left, right, s_ab, s_ah, sqsb, sqsn,
                   sksb, sksn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
                   ALIGN: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr, Q_LENS: tl.constexpr,
                   KV_LENS: tl.constexpr, SEGMENTS: tl.constexpr, VARLEN: tl.constexpr, DENSE: tl.constexpr,
                   BATCH_INNER: tl.constexpr = False):
    """A query-block program of the forward or dq: _query_tile, its rows, the number of
    sequences of a varlen grid ((B + 1) * Hq programs on axis 1) and _query_options."""
    bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask = _query_tile(Hq, G, D, BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN,
                                                                      BATCH_INNER)
    offs_m = first + offs_r
    nseq = tl.num_programs(1) // Hq - 1
    q_len, kv_len, shift, lo_shift, hi_shift, slope2, qseg, start, full_start, full_end, end, q_row0, k_row0 = \
        _query_options(QLEN, KVLEN, SLOPES, QSEG, KSEG, b, hq, Nq, Nk, Tq, Tk, nseq, left, right, s_ab, s_ah, sqsb,
                       sqsn, sksb, sksn, first, offs_m, BLOCK_M, BLOCK_N, CAUSAL, WINDOW, ALIBI, Q_LENS, KV_LENS,
                       SEGMENTS, VARLEN, DENSE)
    return (bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask, offs_m, nseq, q_len, kv_len, shift, lo_shift,
            hi_shift, slope2, qseg, start, full_start, full_end, end, q_row0, k_row0)


@triton.jit
def _lse_rows(bh, hq, N, T, row0, VARLEN: tl.constexpr):
    """Where a head's rows start in lse, delta ([B*H, N]; with VARLEN [H, T], the packed rows)."""
    if VARLEN:
        return hq * T + row0
    else:
        return bh.to(tl.int64) * N


@kernel(inputs=11, outputs=3)
def fa_fwd_kernel(
    Q, K, V, SLOPES, QLEN, KVLEN, QSEG, KSEG, BIAS, AMASK, SEED,
    Hq, G, Nq, Nk, D, qk_scale, left, right, cap_in, cap_out,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod, s_ab, s_ah,
    sqsb, sqsn, sksb, sksn, sbb, sbh, sbi, sbj, smb, smh, smi, smj, seed, Tq, Tk,
    O, LSE, LSE2,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, Q_LENS: tl.constexpr = False,
    KV_LENS: tl.constexpr = False, SEGMENTS: tl.constexpr = False, VARLEN: tl.constexpr = False,
    HAS_BIAS: tl.constexpr = False, HAS_MASK: tl.constexpr = False, DROPOUT: tl.constexpr = False,
    SEED_WORDS: tl.constexpr = 0, DROP_THR: tl.constexpr = 0, DROP_SCALE: tl.constexpr = 1.0,
    PAIR_ALIGN: tl.constexpr = 1, BATCH_INNER: tl.constexpr = False,
):
    """Grid (query blocks, B*Hq). o[rows] and lse[rows] of one query block of one head (with
    SOFTCAP or ALIBI also LSE2, the base-2 lse the backward reads; +inf for no key).
    qk_scale = softmax_scale * log2(e); with SOFTCAP cap_in = softmax_scale / cap and cap_out
    = cap * log2(e). Causal: the last query blocks (the most keys) run first. VARLEN: grid
    (query blocks of max_seqlen_q, (B + 1) * Hq), q, k, v, o packed ([T, H, D], batch strides
    0), lse [Hq, Tq]; slot B fills the rows outside every sequence (_unwritten)."""
    sbb, sbh, sbi, smb, smh, smi, Nk = _pair_aligned(sbb, sbh, sbi, smb, smh, smi, Nk, PAIR_ALIGN)
    (bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask, offs_m, nseq, q_len, kv_len, shift, lo_shift, hi_shift,
     slope2, qseg, start, full_start, full_end, end, q_row0, k_row0) = _query_program(
        QLEN, KVLEN, SLOPES, QSEG, KSEG, Hq, G, Nq, Nk, Tq, Tk, D, left, right, s_ab, s_ah, sqsb, sqsn, sksb, sksn,
        BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN, WINDOW, ALIBI, Q_LENS, KV_LENS, SEGMENTS, VARLEN, HAS_BIAS or HAS_MASK,
        BATCH_INNER)
    n_store = _stored(Nq, q_len, VARLEN)
    q = _load_block(Q, b, hq, sqb, sqh, sqn, sqd, q_row0 + first, offs_r, q_row0 + n_store, offs_d, dmask, EVEN_D,
                    ALIGN)
    k_ptrs = _tile_ptrs(_head_base(K, b, hk, skb, skh, ALIGN), k_row0, offs_n, offs_d, skn, skd, ALIGN)
    v_ptrs = _tile_ptrs(_head_base(V, b, hk, svb, svh, ALIGN), k_row0, offs_n, offs_d, svn, svd, ALIGN)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BD], tl.float32)
    seed = dropout_seed(SEED, seed, SEED_WORDS)
    bias_h = BIAS + b * sbb + hq * sbh
    mask_h = AMASK + b * smb + hq * smh
    seen_lo, seen_hi = _seen_keys(first, BLOCK_M, q_len, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW)
    if WINDOW or SEGMENTS or HAS_BIAS or HAS_MASK:
        acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, start, full_start, Nk, kv_len, shift,
                                    lo_shift, hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb,
                                    sksn, skn, svn, bias_h, mask_h, sbi, sbj, smi, smj, Nq, q_len, seen_lo, seen_hi,
                                    BLOCK_N, True, CAUSAL, EVEN_D, PRECISION, ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS,
                                    HAS_BIAS, HAS_MASK, seed, bh, first, DROP_THR, DROPOUT)
    acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, full_start, full_end, Nk, kv_len, shift,
                                lo_shift, hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb, sksn,
                                skn, svn, bias_h, mask_h, sbi, sbj, smi, smj, Nq, q_len, seen_lo, seen_hi, BLOCK_N,
                                False, CAUSAL, EVEN_D, PRECISION, ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS, HAS_BIAS,
                                HAS_MASK, seed, bh, first, DROP_THR, DROPOUT)
    acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, full_end, end, Nk, kv_len, shift, lo_shift,
                                hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb, sksn, skn, svn,
                                bias_h, mask_h, sbi, sbj, smi, smj, Nq, q_len, seen_lo, seen_hi, BLOCK_N, True, CAUSAL,
                                EVEN_D, PRECISION, ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS, HAS_BIAS, HAS_MASK, seed,
                                bh, first, DROP_THR, DROPOUT)
    empty = l_i == 0.0
    if Q_LENS:
        empty = empty | (offs_m >= q_len)
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    if DROPOUT:
        o = o * DROP_SCALE
    if Q_LENS:
        o = tl.where(empty[:, None], 0.0, o)
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = _tile_ptrs(_head_base(O, b, hq, sob, soh, ALIGN), q_row0 + first, offs_r, offs_d, son, sod, ALIGN)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=(offs_m < n_store)[:, None] & dmask[None, :])
    lse_rows = _lse_rows(bh, hq, Nq, Tq, q_row0, VARLEN)
    tl.store(LSE + lse_rows + offs_m, lse, mask=offs_m < n_store)
    if SOFTCAP or ALIBI or HAS_BIAS:
        # the base-2 lse for the backward as the scores have it: lse * log2(e) rounds twice,
        # which at scores of 1e6 moves p by up to 4% once the scores are not s * log2(e) exactly
        tl.store(LSE2 + lse_rows + offs_m,
                 tl.where(empty, float("inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i))), mask=offs_m < n_store)
    if VARLEN:
        _fill_unwritten(O, hq, soh, son, sod, QLEN, b, nseq, q_row0, q_len, Tq, offs_r, offs_d, dmask, ALIGN)
        lo1, hi1, lo2, hi2, fill_first, step = _unwritten(QLEN, b, nseq, q_row0, q_len, Tq, BLOCK_M)
        _fill_lse(LSE + hq * Tq, lo1, hi1, fill_first, step, offs_r)
        _fill_lse(LSE + hq * Tq, lo2, hi2, fill_first, step, offs_r)


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
def _dkdv_tile(dk, dv, k, v, q_ptrs, do_ptrs, LSE2, DELTA, offs_n, start_m, Nq, q_len, shift, lo_shift, hi_shift, dmask,
               qk_scale, cap_in, cap_out, slope2, kseg, QSEG, b, sqsb, sqsn, BIAS, AMASK, sbi, sbj, smi, smj, Nk,
               BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
               PRECISION: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
               SEGMENTS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, seed, bh, key0,
               DROP_THR: tl.constexpr, DROP_SCALE: tl.constexpr, DROPOUT: tl.constexpr):
    """The query tile of rows start_m + [0, BLOCK_M) of one query head into dk, dv of one key
    block (q_ptrs, do_ptrs at its rows; LSE2, DELTA at the head's). MASK etc.: _dkdv_blocks."""
    offs_r = tl.arange(0, BLOCK_M)
    rows = start_m + offs_r
    q = _load_rows(q_ptrs, rows, q_len, dmask, MASK, EVEN_D)
    if MASK:
        lse2 = tl.load(LSE2 + rows, mask=rows < q_len, other=float("inf"))
    else:
        lse2 = tl.load(LSE2 + rows)
    sT = _dot(k, tl.trans(q), tl.zeros([k.shape[0], BLOCK_M], tl.float32), PRECISION)
    sT, tT = _scores(sT, rows[None, :] + shift, offs_n[:, None], qk_scale, cap_in, cap_out, slope2, SOFTCAP, ALIBI)
    if MASK:
        if CAUSAL or WINDOW or SEGMENTS or HAS_BIAS or HAS_MASK:
            qseg = _segment_ids(QSEG, b, sqsb, sqsn, rows, Nq, -2, SEGMENTS)
            visible = _visible(rows[None, :], offs_n[:, None], 0, lo_shift, hi_shift, qseg[None, :],
                               kseg[:, None], False, CAUSAL, WINDOW, SEGMENTS)
            sT, visible = _pair_terms(sT, visible, BIAS, AMASK, rows[None, :], offs_n[:, None], sbi, sbj, smi, smj,
                                      Nq, Nk, HAS_BIAS, HAS_MASK)
            if SEGMENTS or HAS_MASK:  # a padded row's p: 0 (its score meets lse2 +inf, NaN with a NaN key)
                visible = visible & (rows < q_len)[None, :]
            pT = tl.where(visible, tl.math.exp2(sT - lse2[None, :]), 0.0)
        else:
            pT = tl.math.exp2(sT - lse2[None, :])
    else:
        pT = tl.math.exp2(sT - lse2[None, :])
    do = _load_rows(do_ptrs, rows, q_len, dmask, MASK, EVEN_D)
    if DROPOUT:  # dv from the kept p * 1/(1 - p_drop); dp through the same mask
        keepT = tl.trans(_dropout_keep(seed, bh, start_m, key0, DROP_THR, BLOCK_M, k.shape[0]))
        dv = _dot(tl.where(keepT, pT * DROP_SCALE, 0.0).to(do.dtype), do, dv, PRECISION)
    else:
        dv = _dot(pT.to(do.dtype), do, dv, PRECISION)
    dpT = _dot(v, tl.trans(do), tl.zeros([k.shape[0], BLOCK_M], tl.float32), PRECISION)
    if DROPOUT:
        dpT = tl.where(keepT, dpT * DROP_SCALE, 0.0)
    if MASK:
        delta = tl.load(DELTA + rows, mask=rows < q_len, other=0.0)
    else:
        delta = tl.load(DELTA + rows)
    dsT = pT * (dpT - delta[None, :])
    if MASK:
        # p = 0 times a NaN value's dp is NaN: the kernel reads the values of keys that no query sees
        # by the band as 0, and with a mask or segment ids ds is 0 outside the visible pairs of the
        # rows below q_len (a padded row's do is 0, but its dp is not where the value is NaN)
        if SEGMENTS or HAS_MASK:
            dsT = tl.where(visible, dsT, 0.0)
    if SOFTCAP:
        dsT = dsT * (1.0 - tT * tT)
    dk = _dot(dsT.to(q.dtype), q, dk, PRECISION)
    return dk, dv


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, LSE2, DELTA, offs_n, start, end, Nq, q_len, shift, lo_shift, hi_shift,
                 dmask, qk_scale, cap_in, cap_out, slope2, kseg, QSEG, b, sqsb, sqsn, sqn, sdn, BIAS, AMASK, sbi, sbj,
                 smi, smj, Nk, BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                 PRECISION: tl.constexpr, ALIGN: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                 ALIBI: tl.constexpr, SEGMENTS: tl.constexpr, HAS_BIAS: tl.constexpr = False,
                 HAS_MASK: tl.constexpr = False, seed=0, bh=0, key0=0, DROP_THR: tl.constexpr = 0,
                 DROP_SCALE: tl.constexpr = 1.0, DROPOUT: tl.constexpr = False):
    """Query blocks [start, end) of one query head into dk, dv of one key block. LSE2 and
    DELTA point at the head's rows. With MASK, rows past q_len read as 0 (and p = 0 there,
    lse2 = +inf) and p = 0 outside the band and segment. DROPOUT: the mask of query head bh =
    b * Hq + hq and keys key0 + [0, BLOCK_N)."""
    q_ptrs += tl.cast(start, tl.int64) * aligned(sqn, ALIGN)
    do_ptrs += tl.cast(start, tl.int64) * aligned(sdn, ALIGN)
    for start_m in range(start, end, BLOCK_M):
        dk, dv = _dkdv_tile(dk, dv, k, v, q_ptrs, do_ptrs, LSE2, DELTA, offs_n, start_m, Nq, q_len, shift, lo_shift,
                            hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, kseg, QSEG, b, sqsb, sqsn, BIAS, AMASK,
                            sbi, sbj, smi, smj, Nk, BLOCK_M, MASK, CAUSAL, EVEN_D, PRECISION, WINDOW, SOFTCAP, ALIBI,
                            SEGMENTS, HAS_BIAS, HAS_MASK, seed, bh, key0, DROP_THR, DROP_SCALE, DROPOUT)
        q_ptrs += BLOCK_M * aligned(sqn, ALIGN)
        do_ptrs += BLOCK_M * aligned(sdn, ALIGN)
    return dk, dv


@triton.jit
def _dkdv_head_blocks(dk, dv, k, v, q_heads, do_heads, LSE2, DELTA, offs_n, start, end, Nq, q_len, shift, lo_shift,
                      hi_shift, dmask, qk_scale, cap_in, cap_out, G, sqh, sdh, head_rows, SLOPES, b, hq0, s_ab, s_ah,
                      nseq, kseg, QSEG, sqsb, sqsn, sqn, sdn, BIAS, AMASK, sbh, smh, sbi, sbj, smi, smj, Nk,
                      BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                      PRECISION: tl.constexpr, ALIGN: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                      ALIBI: tl.constexpr, SEGMENTS: tl.constexpr, VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
                      HAS_MASK: tl.constexpr, seed, bh0, key0, DROP_THR: tl.constexpr, DROP_SCALE: tl.constexpr,
                      DROPOUT: tl.constexpr):
    """_dkdv_blocks over the G query heads hq0 + g of one kv head at once: one loop over (head,
    block), heads outer. q_heads, do_heads: head hq0's tiles from row 0 (a head further by sqh,
    sdh); LSE2, DELTA its rows (a head further by head_rows); BIAS, AMASK at head hq0 (sbh, smh);
    bh0 the dropout head of hq0."""
    nb = tl.cdiv(tl.maximum(end - start, 0), BLOCK_M)
    # at least 1: the compiled loop's first loads are issued before its bound is tested, and an
    # address from j // 0 lies outside every array (an empty range: start's rows, as in _dkdv_blocks)
    per_head = tl.maximum(nb, 1)
    for j in range(0, G * nb):
        g = j // per_head
        start_m = start + (j - g * per_head) * BLOCK_M
        g64 = tl.cast(g, tl.int64)
        q_ptrs = q_heads + g64 * aligned(sqh, ALIGN) + tl.cast(start_m, tl.int64) * aligned(sqn, ALIGN)
        do_ptrs = do_heads + g64 * aligned(sdh, ALIGN) + tl.cast(start_m, tl.int64) * aligned(sdn, ALIGN)
        slope2 = _slope(SLOPES, b, hq0 + g, s_ab, s_ah, nseq, ALIBI, VARLEN)
        dk, dv = _dkdv_tile(dk, dv, k, v, q_ptrs, do_ptrs, LSE2 + g64 * head_rows, DELTA + g64 * head_rows, offs_n,
                            start_m, Nq, q_len, shift, lo_shift, hi_shift, dmask, qk_scale, cap_in, cap_out, slope2,
                            kseg, QSEG, b, sqsb, sqsn, BIAS + g64 * sbh, AMASK + g64 * smh, sbi, sbj, smi, smj, Nk,
                            BLOCK_M, MASK, CAUSAL, EVEN_D, PRECISION, WINDOW, SOFTCAP, ALIBI, SEGMENTS, HAS_BIAS,
                            HAS_MASK, seed, bh0 + g, key0, DROP_THR, DROP_SCALE, DROPOUT)
    return dk, dv


@triton.jit
def _query_ranges(first, q_len, kv_len, lo_shift, hi_shift, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SEGMENTS: tl.constexpr, KV_LENS: tl.constexpr,
                  DENSE: tl.constexpr):
    """For the key block [first, first + BLOCK_N): the query blocks that see some of its keys
    as three ranges, masked [m0, m1), unmasked [u0, u1) (they see all of its keys), masked
    [e0, e1): (m0, m1, u0, u1, e0, e1); with SEGMENTS (any of segment ids, a bias, a mask) m1 =
    u0 and u1 = e0, and DENSE (a bias or a mask) masks every block. None for a block past
    kv_len."""
    q_full = q_len // BLOCK_M * BLOCK_M
    last = first + BLOCK_N - 1
    if CAUSAL or WINDOW:
        lo = tl.maximum(first - hi_shift, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(last - hi_shift, 0), BLOCK_M) * BLOCK_M
    else:
        lo = 0
        full_lo = 0
    if WINDOW or SEGMENTS or KV_LENS:
        end = q_len
        full_end = q_full
        if WINDOW:
            end = _clamp(last - lo_shift + 1, 0, q_len)
            full_end = tl.minimum(tl.maximum(first - lo_shift + 1, 0) // BLOCK_M * BLOCK_M, q_full)
        end = tl.where(first < kv_len, end, 0)
        full_lo = _clamp(full_lo, lo, end)
        full_end = _clamp(full_end, full_lo, end)
        if DENSE:
            full_lo = end
            full_end = end
        return lo, full_lo, full_lo, full_end, full_end, end
    else:
        return lo, tl.minimum(full_lo, q_len), full_lo, q_full, tl.maximum(full_lo, q_full), q_len


@kernel(inputs=14, outputs=2)
def fa_bwd_dkdv_kernel(
    Q, K, V, DO, LSE2, DELTA, SLOPES, QLEN, KVLEN, QSEG, KSEG, BIAS, AMASK, SEED,
    Hkv, G, Nq, Nk, D, qk_scale, softmax_scale, left, right, cap_in, cap_out,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd, s_ab, s_ah, sqsb, sqsn, sksb, sksn, sbb, sbh, sbi, sbj, smb, smh,
    smi, smj, seed, Tq, Tk,
    DK, DV,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, Q_LENS: tl.constexpr = False,
    KV_LENS: tl.constexpr = False, SEGMENTS: tl.constexpr = False, VARLEN: tl.constexpr = False,
    HAS_BIAS: tl.constexpr = False, HAS_MASK: tl.constexpr = False, DROPOUT: tl.constexpr = False,
    SEED_WORDS: tl.constexpr = 0, DROP_THR: tl.constexpr = 0, DROP_SCALE: tl.constexpr = 1.0,
    HEADS_IN_LOOP: tl.constexpr = False, PAIR_ALIGN: tl.constexpr = 1, BATCH_INNER: tl.constexpr = False,
):
    """Grid (key blocks, B*Hkv). dk, dv of one key block, summed over the G query heads of
    its kv head. The query blocks split into the band's boundaries (masked), those that see the
    whole key block (unmasked) and the last partial block; each head's in turn, or with
    HEADS_IN_LOOP (G > 1) each range's (head, block) pairs in one loop (a loop over heads
    around the three ranges' loops held 1672 bytes of stack a thread at G 4 on sm_90, 40 so).
    VARLEN: as fa_fwd_kernel, grid (key blocks of max_seqlen_k, (B + 1) * Hkv)."""
    sbb, sbh, sbi, smb, smh, smi, Nk = _pair_aligned(sbb, sbh, sbi, smb, smh, smi, Nk, PAIR_ALIGN)
    bh, b, hk, D, first, offs_c = _block_tile(Hkv, D, BLOCK_N, ALIGN, BATCH_INNER)  # a key block
    offs_n = first + offs_c
    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BD)
    dmask = offs_d < D
    nseq = tl.num_programs(1) // Hkv - 1
    q_len, kv_len, shift, lo_shift, hi_shift, _, q_row0, k_row0 = _options(
        QLEN, KVLEN, SLOPES, b, 0, Nq, Nk, Tq, Tk, nseq, left, right, s_ab, s_ah, Q_LENS, KV_LENS, WINDOW, False,
        VARLEN)
    k = _load_block(K, b, hk, skb, skh, skn, skd, k_row0 + first, offs_c, k_row0 + kv_len, offs_d, dmask, EVEN_D,
                    ALIGN)
    v = _load_block(V, b, hk, svb, svh, svn, svd, k_row0 + first, offs_c, k_row0 + kv_len, offs_d, dmask, EVEN_D,
                    ALIGN)
    if WINDOW:  # keys before the first query's band: no query sees them (_dkdv_tile)
        v = tl.where((offs_n >= lo_shift)[:, None], v, 0.0)
    kseg = _segment_ids(KSEG, b, sksb, sksn, offs_n, Nk, -1, SEGMENTS)
    dk = tl.zeros([BLOCK_N, BD], tl.float32)
    dv = tl.zeros([BLOCK_N, BD], tl.float32)
    m0, m1, u0, u1, e0, e1 = _query_ranges(first, q_len, kv_len, lo_shift, hi_shift, BLOCK_M, BLOCK_N, CAUSAL, WINDOW,
                                           SEGMENTS or HAS_BIAS or HAS_MASK, KV_LENS or VARLEN, HAS_BIAS or HAS_MASK)
    if SEGMENTS:
        m0, u0, e0, e1 = _segment_ranges(QSEG, b, sqsb, sqsn, kseg, offs_n < kv_len, m0, u0, e0, e1, q_len, BLOCK_M,
                                         HAS_BIAS or HAS_MASK)
        m1 = u0
        u1 = e0
    seed = dropout_seed(SEED, seed, SEED_WORDS)
    if HEADS_IN_LOOP:
        hq0 = hk * G
        q_heads = _tile_ptrs(_head_base(Q, b, hq0, sqb, sqh, ALIGN), q_row0, offs_r, offs_d, sqn, sqd, ALIGN)
        do_heads = _tile_ptrs(_head_base(DO, b, hq0, sdb, sdh, ALIGN), q_row0, offs_r, offs_d, sdn, sdd, ALIGN)
        if VARLEN:
            lse_rows = LSE2 + hq0 * Tq + q_row0
            delta_rows = DELTA + hq0 * Tq + q_row0
            head_rows = Tq
        else:
            lse_rows = LSE2 + (b * Hkv + hk) * G * Nq
            delta_rows = DELTA + (b * Hkv + hk) * G * Nq
            head_rows = Nq
        bias_h = BIAS + b * sbb + hq0 * sbh
        mask_h = AMASK + b * smb + hq0 * smh
        bh0 = (b * Hkv + hk) * G
        for r in tl.static_range(3):  # the masked, unmasked and masked ranges
            lo = m0 if r == 0 else (u0 if r == 1 else e0)
            hi = m1 if r == 0 else (u1 if r == 1 else e1)
            dk, dv = _dkdv_head_blocks(
                dk, dv, k, v, q_heads, do_heads, lse_rows, delta_rows, offs_n, lo, hi, Nq, q_len, shift, lo_shift,
                hi_shift, dmask, qk_scale, cap_in, cap_out, G, sqh, sdh, head_rows, SLOPES, b, hq0, s_ab, s_ah, nseq,
                kseg, QSEG, sqsb, sqsn, sqn, sdn, bias_h, mask_h, sbh, smh, sbi, sbj, smi, smj, Nk, BLOCK_M, r != 1,
                CAUSAL, EVEN_D, PRECISION, ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS, VARLEN, HAS_BIAS, HAS_MASK, seed,
                bh0, first, DROP_THR, DROP_SCALE, DROPOUT)
    else:
        for g in range(0, G):
            hq = hk * G + g
            bhq = (b * Hkv + hk) * G + g  # (b * Hq + hq)
            slope2 = _slope(SLOPES, b, hq, s_ab, s_ah, nseq, ALIBI, VARLEN)
            bias_h = BIAS + b * sbb + hq * sbh
            mask_h = AMASK + b * smb + hq * smh
            q_ptrs = _tile_ptrs(_head_base(Q, b, hq, sqb, sqh, ALIGN), q_row0, offs_r, offs_d, sqn, sqd, ALIGN)
            do_ptrs = _tile_ptrs(_head_base(DO, b, hq, sdb, sdh, ALIGN), q_row0, offs_r, offs_d, sdn, sdd, ALIGN)
            if VARLEN:
                rows_base = hq * Tq + q_row0
            else:
                rows_base = ((b * Hkv + hk) * G + g) * Nq
            for r in tl.static_range(3):  # the masked, unmasked and masked ranges
                lo = m0 if r == 0 else (u0 if r == 1 else e0)
                hi = m1 if r == 0 else (u1 if r == 1 else e1)
                dk, dv = _dkdv_blocks(
                    dk, dv, k, v, q_ptrs, do_ptrs, LSE2 + rows_base, DELTA + rows_base, offs_n, lo, hi, Nq, q_len,
                    shift, lo_shift, hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, kseg, QSEG, b, sqsb, sqsn,
                    sqn, sdn, bias_h, mask_h, sbi, sbj, smi, smj, Nk, BLOCK_M, r != 1, CAUSAL, EVEN_D, PRECISION,
                    ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS, HAS_BIAS, HAS_MASK, seed, bhq, first, DROP_THR,
                    DROP_SCALE, DROPOUT)
    if KV_LENS:
        kv = (offs_n < kv_len)[:, None]
        dk = tl.where(kv, dk, 0.0)
        dv = tl.where(kv, dv, 0.0)
    smask = (offs_n < _stored(Nk, kv_len, VARLEN))[:, None] & dmask[None, :]
    dk_ptrs = _tile_ptrs(_head_base(DK, b, hk, sgkb, sgkh, ALIGN), k_row0 + first, offs_c, offs_d, sgkn, sgkd, ALIGN)
    dv_ptrs = _tile_ptrs(_head_base(DV, b, hk, sgvb, sgvh, ALIGN), k_row0 + first, offs_c, offs_d, sgvn, sgvd, ALIGN)
    tl.store(dk_ptrs, (dk * softmax_scale).to(DK.dtype.element_ty), mask=smask)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=smask)
    if VARLEN:
        _fill_unwritten(DK, hk, sgkh, sgkn, sgkd, KVLEN, b, nseq, k_row0, kv_len, Tk, offs_c, offs_d, dmask, ALIGN)
        _fill_unwritten(DV, hk, sgvh, sgvn, sgvd, KVLEN, b, nseq, k_row0, kv_len, Tk, offs_c, offs_d, dmask, ALIGN)


@triton.jit
def _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, start, end, Nk, kv_len, shift, lo_shift, hi_shift,
               dmask, qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb, sksn, skn, svn, BIAS, AMASK, sbi, sbj,
               smi, smj, Nq, q_len, seen_lo, seen_hi, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
               CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
               WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, SEGMENTS: tl.constexpr,
               HAS_BIAS: tl.constexpr = False, HAS_MASK: tl.constexpr = False, seed=0, bh=0, row0=0,
               DROP_THR: tl.constexpr = 0, DROP_SCALE: tl.constexpr = 1.0, DROPOUT: tl.constexpr = False):
    """Key blocks [start, end) into dq of one query block (unscaled); MASK as _fwd_blocks (the
    keys and values of keys outside [seen_lo, seen_hi) read as 0; with a mask or segment ids ds
    is 0 outside the visible pairs and the keys no row below q_len sees are 0), so that p = 0
    never meets a NaN value's dp and ds = 0 never a NaN key."""
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += tl.cast(start, tl.int64) * aligned(skn, ALIGN)
    v_ptrs += tl.cast(start, tl.int64) * aligned(svn, ALIGN)
    for start_n in range(start, end, BLOCK_N):
        keys = start_n + offs_n
        if MASK:
            inside = (keys >= seen_lo) & (keys < seen_hi)
            k = _load_where(k_ptrs, inside, dmask, EVEN_D)
            v = _load_where(v_ptrs, inside, dmask, EVEN_D)
        else:
            k = _load_rows(k_ptrs, keys, kv_len, dmask, False, EVEN_D)
            v = _load_rows(v_ptrs, keys, kv_len, dmask, False, EVEN_D)
        s = _dot(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION)
        s, t = _scores(s, offs_m[:, None] + shift, keys[None, :], qk_scale, cap_in, cap_out, slope2, SOFTCAP, ALIBI)
        if MASK:
            kseg = _segment_ids(KSEG, b, sksb, sksn, keys, Nk, -1, SEGMENTS)
            visible = _visible(offs_m[:, None], keys[None, :], kv_len, lo_shift, hi_shift, qseg[:, None],
                               kseg[None, :], True, CAUSAL, WINDOW, SEGMENTS)
            kpair = _pair_keys(start_n, offs_n, BLOCK_N)
            s, visible = _pair_terms(s, visible, BIAS, AMASK, offs_m[:, None], kpair[None, :], sbi, sbj, smi, smj, Nq,
                                     Nk, HAS_BIAS, HAS_MASK)
            p = tl.where(visible, tl.math.exp2(s - lse2[:, None]), 0.0)
        else:
            p = tl.math.exp2(s - lse2[:, None])
        dp = _dot(do, tl.trans(v), tl.zeros([q.shape[0], BLOCK_N], tl.float32), PRECISION)
        if DROPOUT:
            keep = _dropout_keep(seed, bh, row0, start_n, DROP_THR, q.shape[0], BLOCK_N)
            dp = tl.where(keep, dp * DROP_SCALE, 0.0)
        ds = p * (dp - delta[:, None])
        if MASK:
            if SEGMENTS or HAS_MASK:
                ds = tl.where(visible, ds, 0.0)
                k = tl.where(_seen(visible, offs_m, q_len)[:, None], k, tl.zeros_like(k))
        if SOFTCAP:
            ds = ds * (1.0 - t * t)
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
    offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs = _dq_rows(
        Q, K, V, DO, LSE2, DELTA, b, hq, hk, 0, 0, Nq, bh.to(tl.int64) * Nq, first, offs_r, offs_n, offs_d, dmask,
        sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, EVEN_D, ALIGN)
    return bh, b, hq, first, offs_r, offs_n, offs_d, dmask, offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs


@triton.jit
def _dq_rows(Q, K, V, DO, LSE2, DELTA, b, hq, hk, q_row0, k_row0, n_rows, lse_rows, first, offs_r, offs_n, offs_d,
             dmask, sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
             EVEN_D: tl.constexpr, ALIGN: tl.constexpr):
    """_dq_tile's rows (first + offs_r of a head whose rows start at q_row0, n_rows of them; its
    lse2 and delta from lse_rows) and its kv head's key and value pointers (from k_row0)."""
    offs_m = first + offs_r
    mmask = offs_m < n_rows
    q = _load_block(Q, b, hq, sqb, sqh, sqn, sqd, q_row0 + first, offs_r, q_row0 + n_rows, offs_d, dmask, EVEN_D,
                    ALIGN)
    do = _load_block(DO, b, hq, sdb, sdh, sdn, sdd, q_row0 + first, offs_r, q_row0 + n_rows, offs_d, dmask, EVEN_D,
                     ALIGN)
    rows = lse_rows + offs_m
    lse2 = tl.load(LSE2 + rows, mask=mmask, other=float("inf"))
    delta = tl.load(DELTA + rows, mask=mmask, other=0.0)
    k_ptrs = _tile_ptrs(_head_base(K, b, hk, skb, skh, ALIGN), k_row0, offs_n, offs_d, skn, skd, ALIGN)
    v_ptrs = _tile_ptrs(_head_base(V, b, hk, svb, svh, ALIGN), k_row0, offs_n, offs_d, svn, svd, ALIGN)
    return offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs


@triton.jit
def _store_dq(DQ, dq, b, hq, first, offs_r, offs_d, mmask, dmask, softmax_scale, sgb, sgh, sgn, sgd,
              ALIGN: tl.constexpr, q_row0=0):
    dq_ptrs = _tile_ptrs(_head_base(DQ, b, hq, sgb, sgh, ALIGN), q_row0 + first, offs_r, offs_d, sgn, sgd, ALIGN)
    tl.store(dq_ptrs, (dq * softmax_scale).to(DQ.dtype.element_ty), mask=mmask[:, None] & dmask[None, :])


@kernel(inputs=14, outputs=1)
def fa_bwd_dq_kernel(
    Q, K, V, DO, LSE2, DELTA, SLOPES, QLEN, KVLEN, QSEG, KSEG, BIAS, AMASK, SEED,
    Hq, G, Nq, Nk, D, qk_scale, softmax_scale, left, right, cap_in, cap_out,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    s_ab, s_ah, sqsb, sqsn, sksb, sksn, sbb, sbh, sbi, sbj, smb, smh, smi, smj, seed, Tq, Tk,
    DQ,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, Q_LENS: tl.constexpr = False,
    KV_LENS: tl.constexpr = False, SEGMENTS: tl.constexpr = False, VARLEN: tl.constexpr = False,
    HAS_BIAS: tl.constexpr = False, HAS_MASK: tl.constexpr = False, DROPOUT: tl.constexpr = False,
    SEED_WORDS: tl.constexpr = 0, DROP_THR: tl.constexpr = 0, DROP_SCALE: tl.constexpr = 1.0,
    PAIR_ALIGN: tl.constexpr = 1, BATCH_INNER: tl.constexpr = False,
):
    """Grid (query blocks, B*Hq). dq of one query block, over the keys it sees (causal: the
    last blocks first). VARLEN: as fa_fwd_kernel."""
    sbb, sbh, sbi, smb, smh, smi, Nk = _pair_aligned(sbb, sbh, sbi, smb, smh, smi, Nk, PAIR_ALIGN)
    (bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask, offs_m, nseq, q_len, kv_len, shift, lo_shift, hi_shift,
     slope2, qseg, start, full_start, full_end, end, q_row0, k_row0) = _query_program(
        QLEN, KVLEN, SLOPES, QSEG, KSEG, Hq, G, Nq, Nk, Tq, Tk, D, left, right, s_ab, s_ah, sqsb, sqsn, sksb, sksn,
        BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN, WINDOW, ALIBI, Q_LENS, KV_LENS, SEGMENTS, VARLEN, HAS_BIAS or HAS_MASK,
        BATCH_INNER)
    offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs = _dq_rows(
        Q, K, V, DO, LSE2, DELTA, b, hq, hk, q_row0, k_row0, _stored(Nq, q_len, VARLEN),
        _lse_rows(bh, hq, Nq, Tq, q_row0, VARLEN), first, offs_r, offs_n, offs_d, dmask, sqb, sqh, sqn, sqd, skb, skh,
        skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, EVEN_D, ALIGN)
    dq = tl.zeros([BLOCK_M, BD], tl.float32)
    seed = dropout_seed(SEED, seed, SEED_WORDS)
    bias_h = BIAS + b * sbb + hq * sbh
    mask_h = AMASK + b * smb + hq * smh
    seen_lo, seen_hi = _seen_keys(first, BLOCK_M, q_len, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW)
    for r in tl.static_range(3):  # the masked, unmasked and masked ranges (the first only for these options)
        if r > 0 or WINDOW or SEGMENTS or HAS_BIAS or HAS_MASK:
            lo = start if r == 0 else (full_start if r == 1 else full_end)
            hi = full_start if r == 0 else (full_end if r == 1 else end)
            dq = _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, lo, hi, Nk, kv_len, shift, lo_shift,
                            hi_shift, dmask, qk_scale, cap_in, cap_out, slope2, qseg, KSEG, b, sksb, sksn, skn, svn,
                            bias_h, mask_h, sbi, sbj, smi, smj, Nq, q_len, seen_lo, seen_hi, BLOCK_N, r != 1, CAUSAL,
                            EVEN_D, PRECISION, ALIGN, WINDOW, SOFTCAP, ALIBI, SEGMENTS, HAS_BIAS, HAS_MASK, seed, bh,
                            first, DROP_THR, DROP_SCALE, DROPOUT)
    if Q_LENS:
        dq = tl.where((offs_m < q_len)[:, None], dq, 0.0)
    _store_dq(DQ, dq, b, hq, first, offs_r, offs_d, mmask, dmask, softmax_scale, sgb, sgh, sgn, sgd, ALIGN, q_row0)
    if VARLEN:
        _fill_unwritten(DQ, hq, sgh, sgn, sgd, QLEN, b, nseq, q_row0, q_len, Tq, offs_r, offs_d, dmask, ALIGN)
