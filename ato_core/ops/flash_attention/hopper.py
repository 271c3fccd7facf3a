"""The flash forward on Hopper (sm_90), in Gluon: what the tl front end cannot express.

Triton's tl front end waits for every wgmma before the next instruction; this kernel keeps
the QK wgmma of key tile j in flight beside the PV wgmma of tile j - 1 and runs the softmax
of tile j under the PV (as FlashAttention 3's intra-warpgroup overlap). Warp-specialised:
a 4-warp producer fills a ring of STAGES K/V tiles by TMA, from descriptors the kernel makes in
Triton's global scratch (from JAX, where jaxlib passes none, its launch's last output:
ato_jax.launcher.scratch_from_last_output), synchronised by mbarriers; two consumer
warpgroups take 64 query rows each, at CONSUMER_REGS registers a thread (setmaxnreg).

The math is kernels.fa_fwd_kernel's with no option but a window, padding lengths, ALiBi and
packed sequences (VARLEN: flash_attention_varlen):
GQA (kv head hq // G), causal aligned to the bottom right (query i sees key j iff j <= i + Nk -
Nq), a window (WINDOW: tiles below it never visited), q / kv lengths, ALiBi slopes (ALIBI: the
biased scores in base 2 before the maximum), any Nq, Nk >= 1, o and the natural-log lse
[B, Hq, Nq] (a query that sees no key: o = 0, lse = -inf). The row maximum is taken on the
raw scores and p = 2^(s * qk_scale - m * qk_scale) in one FMA a score; only key tiles that
cross the causal diagonal, a window edge or Nk are masked. Attention dropout (DROPOUT, dense, either
form; plans.HOPPER_DROPOUT): the producer warpgroup draws each tile's mask into a shared ring of its
own beside the K/V copies (_mask_rings, _draw_masks), the consumers and p with it (_dropped). fp16 / bf16,
D = 128 (64 too on the persistent form); b, h and n strides multiples of 8 elements (16 bytes,
as TMA needs), unit d strides (the plan checks: plans._hopper_forward). Benchmarks: results
README, "flash_attention on Hopper".

The backward's dK / dV and dQ kernels (fa_bwd_dkdv_hopper_kernel, fa_bwd_dq_hopper_kernel) take
the same form, after the portable delta kernel, with the forward's options (causal, GQA, a
window, q / kv lengths, ALiBi, packed sequences; dropout dense, its masks drawn by their producers,
plans.HOPPER_DROPOUT_BACKWARD); plans.HOPPER_BACKWARD = False runs the portable ones instead.
block_sparse/hopper.py runs these consumers and producers over lists of kept blocks (BS:
_tile_start, _head_list). Keys no query sees: as kernels.py's docstring says (_seen_keys,
_zero_rows_outside, _zero_unseen_segments, _held's b_lo / b_hi).
"""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, dropout_seed, tanh_rcp
from .packed import _clamp, _seen_keys, _sequence, _unwritten

LN2 = gl.constexpr(0.6931471805599453)
LOG2E = gl.constexpr(1.4426950408889634)
ROWS = gl.constexpr(64)  # query rows of a consumer warpgroup (two a program)
DROPOUT_ROUNDS = gl.constexpr(7)  # Philox rounds of the dropout draw (plans.DROPOUT_ROUNDS, kernels')
DRAW_CALLS = gl.constexpr(2)  # Philox calls a thread of _draw_masks makes a loop step (independent chains)


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, Nk, lo_shift, hi_shift, alibi, kseg, CAUSAL: gl.constexpr,
             WINDOW: gl.constexpr, MASK: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr,
             SEGMENTS: gl.constexpr):
    """The online-softmax update of a raw score tile: (p, m, l, alpha). MASK: keys past Nk,
    past i + hi_shift (CAUSAL, WINDOW) or before i + lo_shift (WINDOW) score -inf, and a row
    with no visible key so far gets p = 0 and alpha = 0 rather than NaN (its m stays -inf).
    ALIBI: alibi = (rows + shift as fp32, slope2, slope2 x the tile's columns); the scores
    become s qk_scale - slope2 |i + shift - j| before the maximum, and qk_scale 1 from there on
    (m in base 2). CAUSAL: a row sees no key right of i + shift, so the bias is slope2 (j -
    start_n) (the same for every tile) plus the row's slope2 (start_n - i - shift), which is
    added to the row maximum and subtracted from m in the exponent, not added to each score.
    SOFTCAP: alibi[3] = (cap_in, cap_out) (_capped); the capped scores, in base 2, are those the
    bias is added to (qk_scale 1 from there on). SEGMENTS (with MASK): a row sees only keys of
    its segment (alibi[4], the rows' ids; kseg, the tile's keys')."""
    if SOFTCAP:
        s = _capped(s, alibi[3])
        qk_scale = 1.0
    if ALIBI:
        if CAUSAL:
            s = gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), alibi[2][None, :])
            row_bias = (start_n - alibi[0]) * alibi[1]
        else:
            s = _alibi(s, qk_scale, alibi[0][:, None], (start_n + offs_sn).to(gl.float32)[None, :], alibi[1])
        qk_scale = 1.0
    if MASK:
        keys = start_n + offs_sn
        if WINDOW:
            rows = offs_m[:, None]
            visible = (keys[None, :] <= rows + hi_shift) & (keys[None, :] >= rows + lo_shift) & (keys < Nk)[None, :]
            s = gl.where(visible, s, float("-inf"))
        elif CAUSAL:
            s = gl.where(keys[None, :] <= offs_m[:, None] + hi_shift, s, float("-inf"))
        else:
            s = gl.where((keys < Nk)[None, :], s, float("-inf"))
        if SEGMENTS:
            s = gl.where(alibi[4][:, None] == kseg[None, :], s, float("-inf"))
    row_max = gl.max(s, 1)
    if ALIBI and CAUSAL:
        row_max = row_max + row_bias
    m_new = gl.maximum(m_i, row_max)
    if MASK:
        m_s = gl.where(m_new == float("-inf"), 0.0, m_new * qk_scale)
    else:
        m_s = m_new * qk_scale
    alpha = gl.exp2(m_i * qk_scale - m_s)
    if ALIBI and CAUSAL:
        m_s = m_s - row_bias
    p = gl.exp2(gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), -m_s[:, None]))
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _tile_segments(alibi, start_n, offs_sn, Nk, LOAD: gl.constexpr):
    """The segment ids of keys start_n + offs_sn (alibi[5]: the batch's first, alibi[6]: their
    stride; -1 past Nk), or 0 without LOAD."""
    if LOAD:
        keys = start_n + offs_sn
        return gl.load(alibi[5] + keys.to(gl.int64) * alibi[6], mask=keys < Nk, other=-1)
    else:
        return 0


@gluon.jit
def _capped(s, cap):
    """cap_out tanh(s cap_in) (cap = (cap_in, cap_out): softmax_scale / softcap, softcap log2(e)), a
    raw score softcapped in base 2, as kernels._scores (triton_helpers.tanh_rcp: one exp2 and one
    approximate division; NaN for NaN)."""
    cap_in, cap_out = cap
    return cap_out - tanh_rcp(s, cap_in, 2.0 * cap_out)


@gluon.jit
def _cap_slope(capped, cap):
    """1 - tanh^2 of a _capped score, the softcap's slope, as the portable backward has it."""
    t = capped * (1.0 / cap[1])
    return 1.0 - t * t


@gluon.jit
def _alibi(s, qk_scale, rows_f, keys_f, slope2):
    """s qk_scale - slope2 |rows_f - keys_f| (rows_f: query rows + shift, keys_f: keys, as fp32
    broadcast against s; exact below 2^24), rounded once after the product."""
    return gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), gl.abs(rows_f - keys_f) * -slope2)


@gluon.jit
def _tile_start(lo, j, LIST, TILE: gl.constexpr, BS: gl.constexpr):
    """The first row of a program's j-th tile of TILE rows: tile lo + j; with BS (block-sparse
    attention), tile lo + j of the blocks of BS rows that LIST holds, in order (BS // TILE tiles
    a block)."""
    if BS:
        per: gl.constexpr = BS // TILE
        return gl.load(LIST + (lo + j) // per) * BS + ((lo + j) % per) * TILE
    else:
        return (lo + j) * TILE


@gluon.jit
def _step(q_smem, k_bufs, v_bufs, ready, empty, j, start_n, p, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk,
          lo_shift, hi_shift, alibi, p_layout: gl.constexpr, o_layout: gl.constexpr, CAUSAL: gl.constexpr,
          WINDOW: gl.constexpr, MASK: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr,
          SEGMENTS: gl.constexpr, STAGES: gl.constexpr, masks=None):
    """The program's j-th key tile (its first key start_n): QK_j in flight with PV_{j-1} (p of
    tile j - 1), softmax of tile j under PV_{j-1}; frees tile j - 1's slot (split barriers, _split:
    tile j's K once QK_j is done, tile j - 1's V once PV_{j-1} is). SEGMENTS (with MASK):
    the tile's key segment ids loaded before the wait (_tile_segments), and the values of keys in
    no segment of the program's rows zeroed (_zero_unseen_segments). masks (dropout): the ring of
    the warpgroup's keep-masks (_dropped)."""
    kseg = _tile_segments(alibi, start_n, offs_sn, Nk, MASK and SEGMENTS)
    slot = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(_kv_barriers(ready, 0).index(slot), (j // STAGES) & 1)
    fence_async_shared()
    if MASK and SEGMENTS:
        if _split(ready):
            mbarrier.wait(ready[1].index(slot), (j // STAGES) & 1)
        _zero_unseen_segments(v_bufs.index(slot), start_n, Nk, alibi)
    p_op = _dropped(gl.convert_layout(p.to(v_bufs.dtype), p_layout), masks, j - 1)
    s_tok = warpgroup_mma(q_smem, k_bufs.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if _split(ready):
        mbarrier.wait(ready[1].index(prev), ((j - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, v_bufs.index(prev), acc, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    if _split(empty):
        mbarrier.arrive(empty[0].index(slot), count=1)
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, Nk, lo_shift, hi_shift, alibi, kseg,
                                  CAUSAL, WINDOW, MASK, ALIBI, SOFTCAP, SEGMENTS)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(_kv_barriers(empty, 1).index(prev), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return p, m_i, l_i, acc


@gluon.jit
def _attend(q_smem, k_bufs, v_bufs, ready, empty, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk, lo_shift,
            hi_shift, alibi, tiles, LIST, p_layout: gl.constexpr, o_layout: gl.constexpr, CAUSAL: gl.constexpr,
            WINDOW: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, SEGMENTS: gl.constexpr,
            BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BS: gl.constexpr, c0, q_free, Q_FREE: gl.constexpr,
            band, KV_GUARD: gl.constexpr = False, masks=None):
    """(m, l, acc) over key tiles [lo, hi) (at least one): masked but for [full_lo, full_hi)
    (tiles = (lo, full_lo, full_hi, hi), _key_tiles, _segment_tiles); BS: tiles of LIST's blocks
    (_tile_start). The tiles are the ring's c0-th on; Q_FREE: an arrival on q_free once the last
    QK is done (the query tile may be refilled). band: the program's _seen_keys; the values of keys
    outside it, which no row of the program sees, are zeroed in the first tile (WINDOW) and the
    last (CAUSAL, WINDOW, KV_GUARD) before their PV: only those tiles hold such keys (their K are
    masked in the scores). KV_GUARD: the ring's rows past the Nk keys hold anything (another
    batch's keys, NaN). masks: as _step's."""
    lo, full_lo, full_hi, hi = tiles
    kseg = _tile_segments(alibi, _tile_start(lo, 0, LIST, BLOCK_N, BS), offs_sn, Nk, SEGMENTS)
    mbarrier.wait(_kv_barriers(ready, 0).index(c0 % STAGES), (c0 // STAGES) & 1)
    fence_async_shared()
    s_tok = warpgroup_mma(q_smem, k_bufs.index(c0 % STAGES).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    if _split(empty):
        mbarrier.arrive(empty[0].index(c0 % STAGES), count=1)
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, _tile_start(lo, 0, LIST, BLOCK_N, BS), offs_sn, Nk,
                                  lo_shift, hi_shift, alibi, kseg, CAUSAL, WINDOW, True, ALIBI, SOFTCAP, SEGMENTS)
    if WINDOW or SEGMENTS:  # the first tile's values of keys before the band, or in no row's segment
        if _split(ready):
            mbarrier.wait(ready[1].index(c0 % STAGES), (c0 // STAGES) & 1)
        start0 = _tile_start(lo, 0, LIST, BLOCK_N, BS)
        if WINDOW:
            _zero_rows_outside(v_bufs.index(c0 % STAGES), band[0] - start0, band[1] - start0)
        if SEGMENTS:
            _zero_unseen_segments(v_bufs.index(c0 % STAGES), start0, Nk, alibi)
    if WINDOW or SEGMENTS:  # the tiles that cross the window's lower edge, or not one segment's
        for j in range(1, full_lo - lo):
            p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, c0 + j, _tile_start(lo, j, LIST, BLOCK_N, BS),
                                     p, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk, lo_shift, hi_shift, alibi,
                                     p_layout, o_layout, CAUSAL, WINDOW, True, ALIBI, SOFTCAP, SEGMENTS, STAGES,
                                     masks)
    for j in range(gl.maximum(full_lo - lo, 1), full_hi - lo):
        p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, c0 + j, _tile_start(lo, j, LIST, BLOCK_N, BS), p, m_i,
                                 l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk, lo_shift, hi_shift, alibi, p_layout,
                                 o_layout, CAUSAL, WINDOW, False, ALIBI, SOFTCAP, SEGMENTS, STAGES, masks)
    for j in range(gl.maximum(full_hi - lo, 1), hi - lo):
        p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, c0 + j, _tile_start(lo, j, LIST, BLOCK_N, BS), p, m_i,
                                 l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk, lo_shift, hi_shift, alibi, p_layout,
                                 o_layout, CAUSAL, WINDOW, True, ALIBI, SOFTCAP, SEGMENTS, STAGES, masks)
    if Q_FREE:
        mbarrier.arrive(q_free, count=1)
    last = (c0 + hi - lo - 1) % STAGES
    if _split(ready):
        mbarrier.wait(ready[1].index(last), ((c0 + hi - lo - 1) // STAGES) & 1)
    if KV_GUARD or CAUSAL or WINDOW:  # the last tile's values of keys past the band (or past Nk: KV_GUARD)
        start1 = _tile_start(lo, hi - lo - 1, LIST, BLOCK_N, BS)
        _zero_rows_outside(v_bufs.index(last), band[0] - start1, band[1] - start1)
    o_tok = warpgroup_mma(_dropped(gl.convert_layout(p.to(v_bufs.dtype), p_layout), masks, c0 + hi - lo - 1),
                          v_bufs.index(last),
                          acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(_kv_barriers(empty, 1).index(last), count=1)
    return m_i, l_i, acc


@gluon.jit
def _zero_rows_outside(buf, lo, hi):
    """Zeros into a shared [TILE, D] tile's rows before lo and from hi on (the others as they
    were), by the calling warpgroup, 16 rows at a time (only the parts that hold such rows); then
    a fence for the async proxy (wgmma). The other consumer warpgroup may write the same tile at
    once: both write the same values."""
    TILE: gl.constexpr = buf.shape[0]
    D: gl.constexpr = buf.shape[1]
    R: gl.constexpr = 16
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    for c in gl.static_range(TILE // R):
        if (c * R < lo) | ((c + 1) * R > hi):
            rows = c * R + gl.arange(0, R, layout=gl.SliceLayout(1, ld))
            _keep_rows(buf, c * R, (rows >= lo) & (rows < hi), ld)
    fence_async_shared()


@gluon.jit
def _keep_rows(buf, first, keep, ld: gl.constexpr):
    """Zeros into the rows [first, first + keep's length) of a shared tile where keep (in
    SliceLayout(1, ld)) is false; the others as they were."""
    part = buf.slice(first, keep.shape[0])
    x = part.load(ld)
    part.store(gl.where(keep[:, None], x, gl.zeros_like(x)))


@gluon.constexpr_function
def _segment_layout():
    """Of the [16 keys, 2 ROWS rows] segment-id comparison (_program_segments, _zero_unseen_segments)."""
    return gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _program_segments(QSEG, sqsn, start_m, n):
    """The segment ids of the program's 2 ROWS query rows (start_m: a consumer's first) below n
    (-2 from there on: no key's), for _zero_unseen_segments."""
    rows = start_m // (2 * ROWS) * (2 * ROWS) + gl.arange(0, 2 * ROWS, layout=gl.SliceLayout(0, _segment_layout()))
    return gl.load(QSEG + rows.to(gl.int64) * sqsn, mask=rows < n, other=-2)


@gluon.jit
def _zero_unseen_segments(buf, start_n, Nk, alibi):
    """Zeros into a shared [TILE, D] V tile (keys from start_n) the rows of keys below Nk whose
    segment (alibi[5], alibi[6]: the key ids and their stride) no query row of the program is in
    (alibi[7], _program_segments): their values meet p = 0 alone, and 0 * NaN is NaN. 16 rows at a
    time, written only where such a key is; then a fence for the async proxy. The other consumer
    warpgroup may write the same tile at once: both write the same values."""
    TILE: gl.constexpr = buf.shape[0]
    D: gl.constexpr = buf.shape[1]
    R: gl.constexpr = 16
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    for c in gl.static_range(TILE // R):
        keys = start_n + c * R + gl.arange(0, R, layout=gl.SliceLayout(1, _segment_layout()))
        kseg = gl.load(alibi[5] + keys.to(gl.int64) * alibi[6], mask=keys < Nk, other=-1)
        seen = (gl.max((kseg[:, None] == alibi[7][None, :]).to(gl.int32), 1) > 0) | (keys >= Nk)
        if gl.min(seen.to(gl.int32), 0) == 0:
            _keep_rows(buf, c * R, gl.convert_layout(seen, gl.SliceLayout(1, ld)), ld)
    fence_async_shared()


@gluon.jit
def _consumer(q_smem, k_bufs, v_bufs, ready, empty, O, LSE, LSE2, o_off, lse_off, son, Nq, q_len, Nk, lo_shift,
              hi_shift, qk_scale, slope2, cap, seg, shift, start_m, tiles, LIST, CAUSAL: gl.constexpr,
              WINDOW: gl.constexpr, Q_LENS: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr,
              SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
              BS: gl.constexpr = 0, c0=0, q_free=None, Q_FREE: gl.constexpr = False, KV_GUARD: gl.constexpr = False,
              drop=None):
    """One warpgroup: query rows [start_m, start_m + ROWS); writes their o and lse (Q_LENS: rows
    from q_len on get o = 0, lse = -inf), with ALIBI (head slope2; shift = kv_len - q_len) or
    SOFTCAP (cap: _capped's) also the base-2 lse LSE2 (+inf for those rows) that the backward
    reads. Nk: the keys of this batch. SEGMENTS: seg = (the batch's query segment ids, their
    stride, its key segment ids, their stride). BS: the key tiles are LIST's blocks (_tile_start).
    c0, q_free, Q_FREE, KV_GUARD: as _attend's (with no tile, the arrival at once). drop (dropout):
    (the ring of the warpgroup's keep-masks, _draw_masks'; the kept values' scale)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    offs_m = start_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    offs_sn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([ROWS], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, D], gl.float32, o_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)  # the QK wgmma's ignored accumulator
    # ALiBi's query positions (bottom-right aligned), slope, and bias of a tile's columns (CAUSAL); the softcap's
    # and the rows' segment ids (-2 past Nq: no key's), the keys' and their stride, the program's rows' ids
    qseg = 0
    prog_seg = 0
    if SEGMENTS:
        qseg = gl.load(seg[0] + offs_m.to(gl.int64) * seg[1], mask=offs_m < Nq, other=-2)
        prog_seg = _program_segments(seg[0], seg[1], start_m, gl.minimum(Nq, q_len))
    alibi = ((offs_m + shift).to(gl.float32), slope2, offs_sn.to(gl.float32) * slope2, cap, qseg, seg[2], seg[3],
             prog_seg)
    if tiles[3] > tiles[0]:
        band = _seen_keys(start_m // (2 * ROWS) * (2 * ROWS), 2 * ROWS, q_len, Nk, lo_shift, hi_shift, CAUSAL, WINDOW)
        m_i, l_i, acc = _attend(q_smem, k_bufs, v_bufs, ready, empty, m_i, l_i, acc, s_zero, qk_scale, offs_m,
                                offs_sn, Nk, lo_shift, hi_shift, alibi, tiles, LIST, p_layout, o_layout, CAUSAL,
                                WINDOW, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, STAGES, BS, c0, q_free, Q_FREE, band,
                                KV_GUARD, None if drop is None else drop[0])
    elif Q_FREE:
        mbarrier.arrive(q_free, count=1)
    if ALIBI or SOFTCAP:  # m is in base 2 already
        qk_scale = 1.0
    empty_row = l_i == 0.0
    if Q_LENS:
        empty_row = empty_row | (offs_m >= q_len)
    l_safe = gl.where(empty_row, 1.0, l_i)
    acc = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    if drop is not None:
        acc = acc * drop[1]
    if Q_LENS:
        acc = gl.where(gl.convert_layout(empty_row, gl.SliceLayout(1, o_layout))[:, None], 0.0, acc)
    offs_om = start_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    offs_od = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + o_off + offs_om.to(gl.int64)[:, None] * son + offs_od[None, :]
    gl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=(offs_om < Nq)[:, None])
    lse2 = m_i * qk_scale + gl.log2(l_safe)
    gl.store(LSE + lse_off + offs_m, gl.where(empty_row, float("-inf"), lse2 * LN2), mask=offs_m < Nq)
    if ALIBI or SOFTCAP:
        gl.store(LSE2 + lse_off + offs_m, gl.where(empty_row, float("inf"), lse2), mask=offs_m < Nq)


@gluon.jit
def _tma_producer(k_bufs, v_bufs, ready, empty, k_desc, v_desc, lo, hi, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  LIST=None, BS: gl.constexpr = 0, c0=0, head=None, masks=None, drop=None):
    """K/V tiles [lo, hi) into the ring by TMA (BS: of LIST's blocks, _tile_start; descriptors
    over the program's [kv_len, D] rows: rows past kv_len land as zeros), as its c0-th tiles on:
    one arrival on ready[slot] expecting both tiles' bytes. head = (b, kv head): the
    descriptors are _heads_descriptor's. masks (dropout): each tile's keep-masks drawn while its
    copies fly (_draw_masks; _mask_rings' rings and barriers, drop = (seed, bh, thr, the rows' first)).
    Split barriers (_split): K and V each awaited and announced on their own."""
    for j in range(hi - lo):
        c = c0 + j
        slot = c % STAGES
        start = _tile_start(lo, j, LIST, BLOCK_N, BS)
        phase = ((c // STAGES) & 1) ^ 1
        if _split(ready):  # K, then V, each on its own barriers
            mbarrier.wait(empty[0].index(slot), phase)
            mbarrier.expect(ready[0].index(slot), k_desc.block_type.nbytes)
            _copy_tile(k_desc, start, head, ready[0].index(slot), k_bufs.index(slot))
            mbarrier.wait(empty[1].index(slot), phase)
            mbarrier.expect(ready[1].index(slot), v_desc.block_type.nbytes)
            _copy_tile(v_desc, start, head, ready[1].index(slot), v_bufs.index(slot))
        else:
            mbarrier.wait(empty.index(slot), phase)
            mbarrier.expect(ready.index(slot), 2 * k_desc.block_type.nbytes)
            _copy_tile(k_desc, start, head, ready.index(slot), k_bufs.index(slot))
            _copy_tile(v_desc, start, head, ready.index(slot), v_bufs.index(slot))
        if masks is not None:
            _draw_masks(masks, c, drop, start, BLOCK_N)


@gluon.jit
def _copy_tile(desc, start, head, bar, buf):
    """A [TILE, D] tile from row ``start`` by TMA into ``buf``, announced on ``bar``; head = (b, kv
    head): desc is _heads_descriptor's ([1, 1, TILE, D] boxes), else None."""
    if head is None:
        tma.async_copy_global_to_shared(desc, [start, 0], bar, buf)
    else:
        tma.async_copy_global_to_shared(desc, [head[0], head[1], start, 0], bar,
                                        buf.reshape([1, 1, buf.shape[0], buf.shape[1]]))


@gluon.constexpr_function
def _split(barriers):
    """Whether a K / V ring's barriers are split (_tile_ring(SPLIT)): a pair, K's and V's."""
    return isinstance(barriers, tl.tuple)


@gluon.jit
def _kv_barriers(barriers, which: gl.constexpr):
    """K's (0) or V's (1) barriers of a K / V ring: of split barriers that half, else the ring's."""
    out = barriers
    if _split(barriers):
        out = barriers[which]
    return out


@gluon.jit
def _dropped(p_op, masks, c):
    """p (the PV wgmma's operand, in v's dtype) of the ring's c-th tile with dropout's dropped
    elements 0: and-ed with its keep-masks (masks = (the warpgroup's [STAGES, ROWS, BLOCK_N] ring,
    ready, empty): _mask_rings'; _kept, an and a pair), the slot freed once read; or p as it is
    (masks None)."""
    if masks is not None:
        p_op = _kept(p_op, _keep_mask(masks, c, gl.constexpr(p_op.type.layout)))
    return p_op


@gluon.jit
def _kept(x, m):
    """x where m (a keep-mask of _draw_masks in v's dtype: each element's bits all ones, kept, or
    zeros, dropped) says kept, else +0, by bitwise ands: x fp16 / bf16 as m (a pair an and), or fp32
    (the mask sign-extended by a byte permute, two elements an asm)."""
    if x.dtype == gl.float32:
        return gl.inline_asm_elementwise(
            "{ .reg .b32 l, h; prmt.b32 l, $4, 0, 0x9999; prmt.b32 h, $4, 0, 0xBBBB; "
            "and.b32 $0, $2, l; and.b32 $1, $3, h; }", "=r,=r,r,r,r", [x, m], dtype=gl.float32, is_pure=True,
            pack=2)
    else:
        return gl.inline_asm_elementwise("and.b32 $0, $1, $2;", "=r,r,r", [x, m], dtype=x.dtype, is_pure=True, pack=2)


@gluon.jit
def _mask_rings(dtype: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, RINGS: gl.constexpr = 2):
    """The consumers' rings of dropout keep-masks ([STAGES, ROWS, BLOCK_N] of ``dtype``, v's, as bits; RINGS
    of them: one a consumer, or one whose key halves the dK / dV consumers read) that _draw_masks
    fills and _dropped / _keep_mask read, and their barriers (_ring: ready, one arrival; empty,
    both consumers'): (rings, ready, empty). Their own barriers, not the K / V ring's: a tile's
    masks are read at the PV, a step after its K, so the draw has that step."""
    layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
    ready, empty = _ring(STAGES, 1)
    rings = (gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_N], layout), )
    if RINGS == 2:
        rings = (rings[0], gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_N], layout))
    return rings, ready, empty


@gluon.jit
def _consumer_drop(masks, ring: gl.constexpr, scale: gl.constexpr):
    """A consumer warpgroup's dropout: ((ring ``ring`` of _mask_rings' masks, ready, empty), the kept
    values' scale, its inverse)."""
    return (masks[0][ring], masks[1], masks[2]), scale, 1.0 / scale


@gluon.jit
def _keep_mask(masks, c, layout: gl.constexpr, T: gl.constexpr = False, KEY0: gl.constexpr = 0):
    """The ring's c-th tile of keep-masks in ``layout``, in v's dtype (_draw_masks' bits); T (a dK /
    dV consumer's): keys [KEY0, KEY0 + KEYS) of it, transposed ([KEYS, ROWS]). masks = (a [STAGES,
    ROWS, keys] ring, ready, empty), _mask_rings'; the slot freed once read."""
    STAGES: gl.constexpr = masks[0].shape[0]
    mbarrier.wait(masks[1].index(c % STAGES), (c // STAGES) & 1)
    tile = masks[0].index(c % STAGES)
    if T:
        tile = tile.slice(KEY0, KEYS, 1).permute((1, 0))
    m = tile.load(layout)
    mbarrier.arrive(masks[2].index(c % STAGES), count=1)
    return m


@gluon.constexpr_function
def _draw_layout(block_n):
    """_draw_masks' layout of a step's [2048 / block_n rows, block_n / 2 key pairs]: a thread's 8
    pairs are one Philox call's, registers (row + 8, pair + 4, pair + 8), lanes (pair q, row r),
    warps the 32-key chunks (128 keys) or two chunks and 16 rows (64)."""
    warps = [[0, 16], [0, 32]] if block_n == 128 else [[0, 16], [16, 0]]
    return gl.DistributedLinearLayout([[8, 0], [0, 4], [0, 8]], [[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]], warps, [],
                                      [2048 // block_n, block_n // 2])


@gluon.jit
def _draw_masks(masks, c, drop, start, BLOCK_N: gl.constexpr):
    """The dropout keep-masks of the ring's c-th key tile, keys [start, start + BLOCK_N) (128 or
    64), for query rows from drop[3] (drop = (seed, bh, thr, the rows' first)): once its slot is
    free, rows drop[3] + ROWS h into masks[0][h] ([STAGES, ROWS, BLOCK_N] of v's dtype, an element's
    bits all ones kept, all zeros dropped: _mask_rings', one or two rings; _kept applies them), then
    an arrival on its ready barrier. Run by a producer warpgroup, idle between copies: in the
    consumers the draws slowed their issue-bound instruction stream.

    kernels._dropout_keep's draws and bytes, 2048 elements a step (_draw_layout): one Philox call a
    thread covers rows {r, r + 8} x keys {2q + 8n + c} of a 32-key chunk, 4 bytes a word, a word's
    bytes 0-1 and 2-3 two key pairs. The ring is written as 32-bit pairs of v's dtype (the same
    swizzle), each word's four bytes compared with thr at once (_keep_flags), a pair's two halves
    all ones or zeros by byte permutes (sign replication). The steps a range loop, DRAW_CALLS of them
    a loop step: written unrolled (static_range), they spilled."""
    PAIRS: gl.constexpr = BLOCK_N // 2
    STEP: gl.constexpr = 2048 // BLOCK_N
    layout: gl.constexpr = _draw_layout(BLOCK_N)
    rows = gl.arange(0, STEP, layout=gl.SliceLayout(1, layout))[:, None]
    pairs = gl.arange(0, PAIRS, layout=gl.SliceLayout(0, layout))[None, :]
    c0 = ((start // 32) * 4 + (pairs // 16) * 4 + pairs % 4).to(gl.uint32)
    c1_row = (rows // 16) * 8 + rows % 8  # a row's counter past its step's first
    word = (pairs // 8) % 2 + 2 * ((rows // 8) % 2)  # of the call's four
    select = gl.where((pairs // 4) % 2 == 0, 0x9988, 0xBBAA)  # prmt: sign-replicate bytes 0, 1 or 2, 3
    thr4 = drop[2].to(gl.uint32) * 0x01010101
    shared: gl.constexpr = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])
    STAGES: gl.constexpr = masks[0][0].shape[0]
    slot = c % STAGES
    mbarrier.wait(masks[2].index(slot), ((c // STAGES) & 1) ^ 1)
    for half in gl.static_range(len(masks[0])):
        ring = masks[0][half]._reinterpret(gl.int32, [STAGES * (ROWS // STEP), STEP, PAIRS], shared)
        for steps in range(0, ROWS // STEP, DRAW_CALLS):
            for u in gl.static_range(DRAW_CALLS):
                step = steps + u
                row0 = drop[3] + half * ROWS + step * STEP
                c1 = ((row0 // 16) * 8 + c1_row).to(gl.uint32)
                zero = c0 * 0 + c1 * 0
                w0, w1, w2, w3 = tl.philox(drop[0], c0 + zero, c1 + zero, zero + drop[1].to(gl.uint32), zero,
                                           DROPOUT_ROUNDS)
                w = gl.where(word < 2, gl.where(word == 0, w0, w1), gl.where(word == 2, w2, w3))
                pair = gl.inline_asm_elementwise("prmt.b32 $0, $1, 0, $2;", "=r,r,r", [_keep_flags(w, thr4), select],
                                                 dtype=gl.int32, is_pure=True, pack=1)
                ring.index(slot * (ROWS // STEP) + step).store(pair)
    gl.thread_barrier()  # every thread's masks stored before the arrival
    mbarrier.arrive(masks[1].index(slot), count=1)


@gluon.jit
def _keep_flags(w, thr4):
    """Bit 7 of each byte of w: that byte >= thr (thr4 = thr in every byte), four unsigned byte
    compares at once (the high bits compared apart, the low seven by a borrow-free subtraction)."""
    low = (w | 0x80808080) - (thr4 & 0x7F7F7F7F)
    return (w & ~thr4) | (~(w ^ thr4) & low)


@gluon.jit
def _descriptor(A, a_off, san, n, BLOCK_N: gl.constexpr, D: gl.constexpr):
    """A TMA descriptor of [BLOCK_N, D] tiles over the n rows (at least 1, as TMA needs) of
    [., D] at A + a_off, san apart (a multiple of 8: 16 bytes), made in the kernel (Triton's
    global scratch: the launch's last output, plans.TMA_SCRATCH bytes a program for two)."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], A.dtype.element_ty)
    return tma.make_tensor_descriptor(A + a_off, [gl.maximum(n, 1), D], [san, 1], [BLOCK_N, D], layout)


@gluon.jit
def _load_rows(dst, A, a_off, san, start, N, D: gl.constexpr, lo=0):
    """Rows [start, start + dst's rows) of an [N, D] array (rows san apart; before lo and past N
    zeros) into shared memory, by the calling warps."""
    R: gl.constexpr = dst.shape[0]
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    rows = start + gl.arange(0, R, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    dst.store(gl.load(A + a_off + rows.to(gl.int64)[:, None] * san + offs_d[None, :],
                      mask=((rows < N) & (rows >= lo))[:, None], other=0.0))


@gluon.jit
def _strides8(sb, sh, sn):
    """An array's (b, h, n) strides declared multiples of 8 elements, as the plan checked
    (16-byte rows for TMA and cp.async; triton_helpers.aligned)."""
    return aligned(sb, 8), aligned(sh, 8), aligned(sn, 8)


@gluon.jit
def _held(A, B, a_off, b_off, san, sbn, start, N, R: gl.constexpr, D: gl.constexpr, b_lo=0, b_hi=None):
    """Rows [start, start + 2R) of two [N, D] arrays (rows san, sbn apart; zeros past N, and B's
    before b_lo and from b_hi on: the values of keys no query sees) in shared memory for a
    program's two consumer warpgroups, R rows each: (a0, a1, b0, b1), loaded by the calling warps
    and fenced for the wgmma (async proxy)."""
    if b_hi is None:
        b_hi = N
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([R, D], A.dtype.element_ty)
    a0 = gl.allocate_shared_memory(A.dtype.element_ty, [R, D], layout)
    a1 = gl.allocate_shared_memory(A.dtype.element_ty, [R, D], layout)
    b0 = gl.allocate_shared_memory(A.dtype.element_ty, [R, D], layout)
    b1 = gl.allocate_shared_memory(A.dtype.element_ty, [R, D], layout)
    _load_rows(a0, A, a_off, san, start, N, D)
    _load_rows(b0, B, b_off, sbn, start, b_hi, D, b_lo)
    _load_rows(a1, A, a_off, san, start + R, N, D)
    _load_rows(b1, B, b_off, sbn, start + R, b_hi, D, b_lo)
    fence_async_shared()
    gl.thread_barrier()
    return a0, a1, b0, b1


@gluon.jit
def _forward_buffers(dtype: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                     ARRIVALS: gl.constexpr = 128, SPLIT: gl.constexpr = False):
    """A forward program's shared memory, unfilled: its consumers' query tiles and the ring of
    STAGES K / V tiles with its barriers (_tile_ring, SPLIT): (q0, q1, k_bufs, v_bufs, ready, empty)."""
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], dtype)
    q0 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    q1 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    k_bufs, v_bufs, ready, empty = _tile_ring(dtype, BLOCK_N, D, STAGES, ARRIVALS, SPLIT)
    return q0, q1, k_bufs, v_bufs, ready, empty


@gluon.jit
def _forward_smem(Q, q_off, sqn, start_m, n_q, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                  ARRIVALS: gl.constexpr = 128, SPLIT: gl.constexpr = False):
    """_forward_buffers with the consumers' query rows [start_m, start_m + 2 ROWS) (zeros from n_q
    on) loaded and fenced."""
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_buffers(Q.dtype.element_ty, BLOCK_N, D, STAGES, ARRIVALS, SPLIT)
    _load_rows(q0, Q, q_off, sqn, start_m, n_q, D)
    _load_rows(q1, Q, q_off, sqn, start_m + ROWS, n_q, D)
    fence_async_shared()
    gl.thread_barrier()
    return q0, q1, k_bufs, v_bufs, ready, empty


@gluon.jit
def _query_program(Hq, G, CAUSAL: gl.constexpr):
    """(query block, batch, query head, kv head) of a program of grid (query blocks, B * Hq);
    causal: the last query blocks (the most keys) first."""
    return _work(gl.program_id(1) * gl.num_programs(0) + gl.program_id(0), gl.num_programs(0), Hq, G, CAUSAL)


@gluon.jit
def _work(w, n_m, Hq, G, CAUSAL: gl.constexpr):
    """(query block, batch, query head, kv head) of work item w = (b Hq + h) n_m + i of n_m query
    blocks a head; causal: i = 0 is the last block (the most keys)."""
    pid_m = w % n_m
    if CAUSAL:
        pid_m = n_m - 1 - pid_m
    bh = w // n_m
    b = bh // Hq
    h = bh % Hq
    return pid_m, b, h, h // G


@gluon.jit
def _tile_ring(dtype: gl.constexpr, TILE: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
               ARRIVALS: gl.constexpr = 128, SPLIT: gl.constexpr = False):
    """A ring of STAGES pairs of [TILE, D] tiles (K / V, or Q / dO) with its barriers (_ring):
    (a_bufs, b_bufs, ready, empty). SPLIT (a TMA-fed K / V ring): ready and empty are pairs, the
    K tiles' barriers and the V tiles', so a K slot comes free at its QK, a step before its V."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, D], dtype)
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, TILE, D], layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, TILE, D], layout)
    ready, empty = _ring(STAGES, ARRIVALS)
    if SPLIT:
        b_ready, b_empty = _ring(STAGES, ARRIVALS)
        ready = (ready, b_ready)
        empty = (empty, b_empty)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def _ring(STAGES: gl.constexpr, ARRIVALS: gl.constexpr = 128):
    """The ring's (ready, empty) barriers: ready[slot] completes when the producer's ARRIVALS
    arrivals are in and its copies landed (128: each thread of a cp.async producer, decode's; 1:
    a TMA producer's, with the tiles' bytes expected), empty[slot] when both consumers have
    arrived."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=ARRIVALS)
        mbarrier.init(empty.index(i), count=2)
    return ready, empty


@gluon.jit
def _lengths(QLEN, KVLEN, b, nseq, Nq, Nk, Tq, Tk, left, right, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
             VARLEN: gl.constexpr):
    """(q_row0, q_len, k_row0, kv_len, lo_shift, hi_shift) of batch b: its first query and key
    rows (0; VARLEN: QLEN, KVLEN are cu_seqlens_q, cu_seqlens_k, Nq, Nk the max_seqlen, Tq, Tk
    the packed rows, nseq the sequences), its lengths (Q_LENS, KV_LENS: clamped to [0, Nq],
    [0, Nk]; else Nq, Nk) and the band of keys a query row i sees, [i + lo_shift, i +
    hi_shift] (shift = kv_len - q_len; causal: right = 0)."""
    q_row0 = 0
    k_row0 = 0
    q_len = Nq
    kv_len = Nk
    if VARLEN:
        q_row0, q_len, _ = _sequence(QLEN, b, nseq, Nq, Tq)
        k_row0, kv_len, _ = _sequence(KVLEN, b, nseq, Nk, Tk)
    if Q_LENS:
        q_len = _clamp(gl.load(QLEN + b).to(gl.int32), 0, Nq)
    if KV_LENS:
        kv_len = _clamp(gl.load(KVLEN + b).to(gl.int32), 0, Nk)
    return q_row0, q_len, k_row0, kv_len, kv_len - q_len - left, kv_len - q_len + right


@gluon.jit
def _head(b, h, row0, sb, sh, sn, VARLEN: gl.constexpr):
    """The offset of head h of batch b (VARLEN: of the packed sequence's first row, row0)."""
    off = b.to(gl.int64) * sb + h.to(gl.int64) * sh
    if VARLEN:
        off += row0.to(gl.int64) * sn
    return off


@gluon.jit
def _fill_unwritten(X, x_head, sxn, CU, b, nseq, row0, n, T, LSE, lse_head, D: gl.constexpr, LSE_TOO: gl.constexpr):
    """kernels._fill_unwritten: zeros into the rows of a packed head of X (at x_head, rows sxn
    apart) that no program's tiles cover (packed._unwritten), and -inf into LSE's (at lse_head)
    with LSE_TOO."""
    R: gl.constexpr = 64
    lo1, hi1, lo2, hi2, first, step = _unwritten(CU, b, nseq, row0, n, T, R)
    _zero_rows(X, x_head, sxn, LSE, lse_head, lo1 + first, hi1, step, R, D, LSE_TOO)
    _zero_rows(X, x_head, sxn, LSE, lse_head, lo2 + first, hi2, step, R, D, LSE_TOO)


@gluon.jit
def _zero_rows(X, x_head, sxn, LSE, lse_head, start, hi, step, R: gl.constexpr, D: gl.constexpr,
               LSE_TOO: gl.constexpr):
    """Zeros into rows [start, hi) of X's head (and -inf into LSE's), R rows every step."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, R, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    zero = gl.zeros([R, D], X.dtype.element_ty, ld)
    for r0 in range(start, hi, step):
        rows = r0 + offs_r
        gl.store(X + x_head + rows.to(gl.int64)[:, None] * sxn + offs_d[None, :], zero, mask=(rows < hi)[:, None])
        if LSE_TOO:
            gl.store(LSE + lse_head + rows, gl.full([R], float("-inf"), gl.float32, gl.SliceLayout(1, ld)),
                     mask=rows < hi)


@gluon.jit
def _slope2(SLOPES, b, h, s_ab, s_ah, nseq, ALIBI: gl.constexpr, VARLEN: gl.constexpr):
    """Query head h's ALiBi slope times log2(e) (0.0 without ALIBI, and in a varlen grid's slot
    nseq), as kernels._slope."""
    slope2 = 0.0
    if ALIBI:
        if VARLEN:
            slope2 = gl.load(SLOPES + b.to(gl.int64) * s_ab + h * s_ah, mask=b < nseq, other=0.0).to(gl.float32)
            slope2 = slope2 * LOG2E
        else:
            slope2 = gl.load(SLOPES + b.to(gl.int64) * s_ab + h * s_ah).to(gl.float32) * LOG2E
    return slope2


@gluon.jit
def _key_tiles(start_m, Nk, lo_shift, hi_shift, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, BLOCK_M: gl.constexpr,
               BLOCK_N: gl.constexpr):
    """(lo, full_lo, full_hi, hi) of the query rows [start_m, start_m + BLOCK_M): they visit key
    tiles [lo, hi), every row sees every key of those in [full_lo, full_hi) (unmasked); as
    kernels._key_ranges, in tiles. hi <= lo: no key."""
    last = start_m + BLOCK_M - 1
    if CAUSAL or WINDOW:
        full_hi = gl.minimum(gl.maximum(start_m + hi_shift + 1, 0) // BLOCK_N, Nk // BLOCK_N)
        hi = gl.cdiv(gl.minimum(gl.maximum(last + hi_shift + 1, 0), Nk), BLOCK_N)
    else:
        full_hi = Nk // BLOCK_N
        hi = gl.cdiv(Nk, BLOCK_N)
    lo = 0
    full_lo = 0
    if WINDOW:
        lo = gl.minimum(gl.maximum(start_m + lo_shift, 0), Nk) // BLOCK_N
        full_lo = gl.minimum(gl.maximum(gl.cdiv(gl.maximum(last + lo_shift, 0), BLOCK_N), lo), gl.maximum(hi, lo))
        full_hi = gl.minimum(gl.maximum(full_hi, full_lo), gl.maximum(hi, lo))
    return lo, full_lo, full_hi, hi


@kernel(inputs=9, outputs=4, gluon=True)
def fa_fwd_hopper_kernel(Q, K, V, QLEN, KVLEN, SLOPES, QSEG, KSEG, SEED, Hq, G, Nq, Nk, qk_scale, left, right, cap_in,
                         cap_out, s_ab, s_ah, sqsb, sqsn, sksb, sksn, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob,
                         soh, son, Tq, Tk, seed, O, LSE, LSE2, SCRATCH, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                         D: gl.constexpr, STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, WINDOW: gl.constexpr = False, Q_LENS: gl.constexpr = False,
                         KV_LENS: gl.constexpr = False, ALIBI: gl.constexpr = False, SOFTCAP: gl.constexpr = False,
                         SEGMENTS: gl.constexpr = False, VARLEN: gl.constexpr = False, DROPOUT: gl.constexpr = False,
                         SEED_WORDS: gl.constexpr = 0, DROP_THR: gl.constexpr = 0, DROP_SCALE: gl.constexpr = 1.0,
                         SPLIT_KV: gl.constexpr = False):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (the default partition: the first consumer; 12
    in all). qk_scale = softmax_scale * log2(e). WINDOW: query i sees key j only if
    i + shift - left <= j <= i + shift + right (kernels.fa_fwd_kernel's window; causal is
    right = 0). Q_LENS, KV_LENS: batch b has QLEN[b] queries and KVLEN[b] keys (clamped to
    [0, Nq], [0, Nk]; shift = kv_len - q_len), as kernels._options. ALIBI: scores get
    -slope |i + shift - j| (SLOPES fp32 [Hq] or [B, Hq], strides s_ab, s_ah) and LSE2, the
    base-2 lse the backward reads, is written (else never). SOFTCAP: scores become softcap
    tanh(s softmax_scale / softcap) (cap_in = softmax_scale / softcap, cap_out = softcap log2(e);
    the bias added after), LSE2 written. SEGMENTS: query i sees key j only if QSEG[b, i] ==
    KSEG[b, j] (strides sqsb, sqsn, sksb, sksn; the key tiles narrowed, _segment_tiles). Causal:
    the last query blocks (the most keys) run first. VARLEN: as kernels.fa_fwd_kernel's, grid (cdiv(Nq, 128), (B + 1) *
    Hq), q, k, v, o packed (batch strides 0, Tq and Tk rows), lse [Hq, Tq]; slot B fills the
    rows outside every sequence (_fill_unwritten). SCRATCH: Triton's global scratch, where the
    K / V TMA descriptors are made (_descriptor; the launch's last output, never named here).
    DROPOUT (SEED, seed, SEED_WORDS, DROP_THR, DROP_SCALE; dense): kernels.fa_fwd_kernel's
    attention dropout, the same mask, drawn by the producer (_draw_masks). SPLIT_KV: the K / V ring's
    barriers split, K's and V's (_tile_ring)."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sob, soh, son = _strides8(sob, soh, son)
    BLOCK_M: gl.constexpr = 2 * ROWS
    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)
    bh = gl.program_id(1)
    start_m = pid_m * BLOCK_M
    nseq = gl.num_programs(1) // Hq - 1  # VARLEN's sequences
    q_row0, q_len, k_row0, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, nseq, Nq, Nk, Tq, Tk, left, right,
                                                                 Q_LENS, KV_LENS, VARLEN)
    q_off = _head(b, h, q_row0, sqb, sqh, sqn, VARLEN)
    k_off = _head(b, hk, k_row0, skb, skh, skn, VARLEN)
    v_off = _head(b, hk, k_row0, svb, svh, svn, VARLEN)
    o_off = _head(b, h, q_row0, sob, soh, son, VARLEN)
    n_q = Nq  # the rows this program may write: with VARLEN its sequence's (the next are another's)
    if VARLEN:
        n_q = q_len
        lse_off = h.to(gl.int64) * Tq + q_row0
        _fill_unwritten(O, h.to(gl.int64) * soh, son, QLEN, b, nseq, q_row0, q_len, Tq, LSE, h.to(gl.int64) * Tq, D,
                        True)
    else:
        lse_off = bh.to(gl.int64) * Nq

    k_desc = _descriptor(K, k_off, skn, kv_len, BLOCK_N, D)
    v_desc = _descriptor(V, v_off, svn, kv_len, BLOCK_N, D)
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_smem(Q, q_off, sqn, start_m, n_q, BLOCK_N, D, STAGES, 1,
                                                         SPLIT_KV)
    tiles = _live(_key_tiles(start_m, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, BLOCK_M, BLOCK_N), start_m, q_len,
                  Q_LENS or VARLEN)
    seg = (QSEG + b.to(gl.int64) * sqsb, sqsn, KSEG + b.to(gl.int64) * sksb, sksn)
    if SEGMENTS:
        tiles = _segment_tiles(tiles, seg[0], sqsn, seg[2], sksn, start_m, n_q, kv_len, BLOCK_M, BLOCK_N)
    slope2 = _slope2(SLOPES, b, h, s_ab, s_ah, nseq, ALIBI, VARLEN)
    shift = kv_len - q_len
    gl.static_assert(not (DROPOUT and VARLEN), "dropout on the Gluon forward: dense only")
    drops = (None, None, None, None)  # the consumers' (_consumer_drop), the producer's rings and draw
    if DROPOUT:
        masks = _mask_rings(V.dtype.element_ty, STAGES, BLOCK_N)
        drops = (_consumer_drop(masks, 0, DROP_SCALE), _consumer_drop(masks, 1, DROP_SCALE), masks,
                 (dropout_seed(SEED, seed, SEED_WORDS), bh, DROP_THR, start_m))
    gl.warp_specialize([
        (_consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, LSE2, o_off, lse_off, son, n_q, q_len, kv_len,
                     lo_shift, hi_shift, qk_scale, slope2, (cap_in, cap_out), seg, shift, start_m, tiles, None,
                     CAUSAL, WINDOW, Q_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, 0, 0, None, False, False,
                     drops[0])),
        (_consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, LSE2, o_off, lse_off, son, n_q, q_len, kv_len,
                     lo_shift, hi_shift, qk_scale, slope2, (cap_in, cap_out), seg, shift, start_m + ROWS, tiles,
                     None, CAUSAL, WINDOW, Q_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, 0, 0, None, False,
                     False, drops[1])),
        (_tma_producer, (k_bufs, v_bufs, ready, empty, k_desc, v_desc, tiles[0], tiles[3], BLOCK_N, STAGES, None, 0,
                         0, None, drops[2], drops[3])),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


@kernel(inputs=9, outputs=4, gluon=True)
def fa_fwd_hopper_persistent_kernel(Q, K, V, QLEN, KVLEN, SLOPES, QSEG, KSEG, SEED, Hq, G, Nq, Nk, qk_scale, left,
                                    right, cap_in, cap_out, s_ab, s_ah, sqsb, sqsn, sksb, sksn, sqb, sqh, sqn, skb, skh,
                                    skn, svb, svh, svn, sob, soh, son, B, seed, O, LSE, LSE2, SCRATCH,
                                    CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                                    PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                    WINDOW: gl.constexpr = False, Q_LENS: gl.constexpr = False,
                                    KV_LENS: gl.constexpr = False, ALIBI: gl.constexpr = False,
                                    SOFTCAP: gl.constexpr = False, SEGMENTS: gl.constexpr = False,
                                    VARLEN: gl.constexpr = False, DROPOUT: gl.constexpr = False,
                                    SEED_WORDS: gl.constexpr = 0, DROP_THR: gl.constexpr = 0,
                                    DROP_SCALE: gl.constexpr = 1.0, SPLIT_KV: gl.constexpr = False):
    """fa_fwd_hopper_kernel's forward, dense [B, H, N, D] (K/V rows past a head's Nk keys land as
    zeros, through one descriptor over all heads; KV_LENS: the consumers zero the rows of the last
    tile past the batch's keys, _zero_rows_outside), as a persistent kernel: grid
    (programs, 1), each taking one work item a round (_work: items in fa_fwd_hopper_kernel's grid
    order; _snake: which a program takes). The producer loads the next item's query tiles once the
    consumers' last QK is done, with its first K/V tiles, under their last PV and epilogue: what
    a program of the one-item grid pays in series (loads, descriptors, launch). B: the batch.
    DROPOUT: as fa_fwd_hopper_kernel's (each item's masks drawn by the producer, _draw_masks). SPLIT_KV: as
    fa_fwd_hopper_kernel's."""
    gl.static_assert(not VARLEN, "the persistent forward takes no packed sequences")
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sob, soh, son = _strides8(sob, soh, son)
    n_m = gl.cdiv(Nq, 2 * ROWS)
    q_desc = _heads_descriptor(Q, B, Hq, Nq, sqb, sqh, sqn, ROWS, D)
    k_desc = _heads_descriptor(K, B, Hq // G, Nk, skb, skh, skn, BLOCK_N, D)
    v_desc = _heads_descriptor(V, B, Hq // G, Nk, svb, svh, svn, BLOCK_N, D)
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_buffers(Q.dtype.element_ty, BLOCK_N, D, STAGES, 1, SPLIT_KV)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=2)
    fence_async_shared()
    gl.thread_barrier()
    item = (QLEN, QSEG, KSEG, Hq, G, Nq, Nk, left, right, sqsb, sqsn, sksb, sksn, n_m, n_m * B * Hq, KVLEN)
    out = (O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, (cap_in, cap_out))
    drops = (None, None, None)  # the consumers' (_consumer_drop), the producer's (rings, seed, thr, Hq)
    if DROPOUT:
        masks = _mask_rings(V.dtype.element_ty, STAGES, BLOCK_N)
        drops = (_consumer_drop(masks, 0, DROP_SCALE), _consumer_drop(masks, 1, DROP_SCALE),
                 (masks, dropout_seed(SEED, seed, SEED_WORDS), DROP_THR, Hq))
    gl.warp_specialize([
        (_persistent_consumer, (q0, 0, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, CAUSAL, WINDOW,
                                Q_LENS, KV_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, drops[0])),
        (_persistent_consumer, (q1, ROWS, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, CAUSAL, WINDOW,
                                Q_LENS, KV_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, drops[1])),
        (_persistent_producer, (q0, q1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, k_desc, v_desc, item,
                                CAUSAL, WINDOW, Q_LENS, KV_LENS, SEGMENTS, BLOCK_N, STAGES, drops[2])),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.constexpr_function
def _tile_layout(shape, dtype, swizzled=True):
    """The shared layout of a TMA-written tile of ``shape``: the default swizzle for it, or none
    (swizzled False: each row contiguous, so a row can be read out of it by index)."""
    if swizzled:
        return gl.NVMMASharedLayout.get_default_for(shape, dtype)
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=dtype.primitive_bitwidth, rank=len(shape))


@gluon.jit
def _heads_descriptor(A, B, H, n, sab, sah, san, TILE: gl.constexpr, D: gl.constexpr,
                      SWIZZLED: gl.constexpr = True):
    """A TMA descriptor of [1, 1, TILE, D] tiles over an array [B, H, n, D] (n >= 1; strides sab,
    sah, san, 1; tiles laid out as _tile_layout(SWIZZLED)): rows past n land as zeros."""
    layout: gl.constexpr = _tile_layout([1, 1, TILE, D], A.dtype.element_ty, SWIZZLED)
    return tma.make_tensor_descriptor(A, [B, H, n, D], [sab, sah, san, 1], [1, 1, TILE, D], layout)


@gluon.jit
def _item(w, item, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
          SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr):
    """Work item w of the persistent forward: (b, h, kv head, start_m, q_len, kv_len, lo_shift,
    hi_shift, tiles, seg), as fa_fwd_hopper_kernel's program finds them."""
    QLEN, QSEG, KSEG, Hq, G, Nq, Nk, left, right, sqsb, sqsn, sksb, sksn, n_m, n_items, KVLEN = item
    pid_m, b, h, hk = _work(w, n_m, Hq, G, CAUSAL)
    start_m = pid_m * (2 * ROWS)
    _, q_len, _, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, 0, Nq, Nk, Nq, Nk, left, right, Q_LENS, KV_LENS,
                                                       False)
    tiles = _live(_key_tiles(start_m, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, 2 * ROWS, BLOCK_N), start_m, q_len,
                  Q_LENS)
    seg = (QSEG + b.to(gl.int64) * sqsb, sqsn, KSEG + b.to(gl.int64) * sksb, sksn)
    if SEGMENTS:
        tiles = _segment_tiles(tiles, seg[0], sqsn, seg[2], sksn, start_m, Nq, kv_len, 2 * ROWS, BLOCK_N)
    return b, h, hk, start_m, q_len, kv_len, lo_shift, hi_shift, tiles, seg


@gluon.jit
def _persistent_consumer(q_smem, half, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item,
                         CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
                         ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr,
                         D: gl.constexpr, STAGES: gl.constexpr, drop=None):
    """A consumer warpgroup of the persistent forward: rows [start_m + half, + ROWS) of each of
    its program's items (_consumer's work), its query tile awaited on q_ready and freed on
    q_empty, in _snake's order; c counts the ring's tiles, it the query tiles. drop: _consumer's."""
    c = 0
    it = 0
    for r in range(gl.cdiv(item[14], gl.num_programs(0))):
        w = _snake(r)
        if w < item[14]:
            c, it = _consumer_item(q_smem, half, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, w, c, it,
                                   CAUSAL, WINDOW, Q_LENS, KV_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, drop)


@gluon.jit
def _consumer_item(q_smem, half, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, w, c, it,
                   CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
                   ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr,
                   D: gl.constexpr, STAGES: gl.constexpr, drop=None):
    """_persistent_consumer's work item w, the ring's c-th tile on and the it-th query tile: (c,
    it) after it."""
    O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, cap = out
    Hq = item[3]
    Nq = item[5]
    b, h, hk, start_m, q_len, kv_len, lo_shift, hi_shift, tiles, seg = _item(w, item, CAUSAL, WINDOW, Q_LENS,
                                                                             KV_LENS, SEGMENTS, BLOCK_N)
    slope2 = _slope2(SLOPES, b, h, s_ab, s_ah, 0, ALIBI, False)
    mbarrier.wait(q_ready, it & 1)
    _consumer(q_smem, k_bufs, v_bufs, ready, empty, O, LSE, LSE2, _head(b, h, 0, sob, soh, son, False),
              (b * Hq + h).to(gl.int64) * Nq, son, Nq, q_len, kv_len, lo_shift, hi_shift, qk_scale, slope2, cap,
              seg, kv_len - q_len, start_m + half, tiles, None, CAUSAL, WINDOW, Q_LENS, ALIBI, SOFTCAP, SEGMENTS,
              BLOCK_N, D, STAGES, 0, c, q_empty, True, KV_LENS, drop)
    c += gl.maximum(tiles[3] - tiles[0], 0)
    it += 1
    return c, it


@gluon.jit
def _snake(r):
    """The work item of this program in round r of a persistent grid: programs take the items of
    a round in order, and in reverse every other round, so that items heaviest first (causal)
    spread evenly (a round-robin gives the first programs the heaviest of every round)."""
    P = gl.num_programs(0)
    p = gl.program_id(0)
    return r * P + p + (r % 2) * (P - 1 - 2 * p)


@gluon.jit
def _persistent_producer(q0, q1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, k_desc, v_desc, item,
                         CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
                         SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, dropout=None):
    """The persistent forward's loads: for each item, its first STAGES - 1 K/V tiles (their slots
    are the last item's, so they come free without the next query tile), its query tiles once
    q_empty says both consumers are done with the last, then its other K/V tiles. dropout =
    (the consumers' mask rings, seed, thr, Hq): each tile's masks drawn too (_held_item_loads)."""
    c = 0
    it = 0
    for r in range(gl.cdiv(item[14], gl.num_programs(0))):
        w = _snake(r)
        if w < item[14]:
            c, it = _producer_item(q0, q1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, k_desc, v_desc,
                                   item, w, c, it, CAUSAL, WINDOW, Q_LENS, KV_LENS, SEGMENTS, BLOCK_N, STAGES, dropout)


@gluon.jit
def _producer_item(q0, q1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, k_desc, v_desc, item, w, c, it,
                   CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr, KV_LENS: gl.constexpr,
                   SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, dropout=None):
    """_persistent_producer's work item w: (c, it) after it, as _consumer_item's."""
    b, h, hk, start_m, q_len, kv_len, lo_shift, hi_shift, tiles, seg = _item(w, item, CAUSAL, WINDOW, Q_LENS,
                                                                             KV_LENS, SEGMENTS, BLOCK_N)
    return _held_item_loads(k_bufs, v_bufs, ready, empty, k_desc, v_desc, q_ready, q_empty, ((q_desc, q0, q1), ), b,
                            h, hk, start_m, tiles, c, it, BLOCK_N, STAGES, dropout)


@gluon.jit
def _held_item_loads(k_bufs, v_bufs, ready, empty, k_desc, v_desc, q_ready, q_empty, held, b, h, hk, m0, tiles, c,
                     it, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, dropout=None):
    """A persistent program's loads for one item whose query rows the consumers hold: its first
    STAGES - 1 K/V tiles (their slots are the last item's, so they come free without the next rows),
    the held rows [m0, m0 + 2 ROWS) of each (descriptor, first half, second half) in ``held`` on
    q_ready once q_empty says both consumers are done with the last item's, then its other K/V
    tiles. Returns (c, it) after the item. dropout = (the consumers' mask rings, seed, thr, Hq):
    each tile's masks drawn too (_tma_producer's masks, drop)."""
    D: gl.constexpr = k_bufs.shape[2]
    masks = None
    drop = None
    if dropout is not None:
        masks = dropout[0]
        drop = (dropout[1], b * dropout[3] + h, dropout[2], m0)
    lo = tiles[0]
    hi = gl.maximum(tiles[3], lo)
    first = gl.minimum(hi, lo + (STAGES - 1))
    _tma_producer(k_bufs, v_bufs, ready, empty, k_desc, v_desc, lo, first, BLOCK_N, STAGES, None, 0, c, (b, hk), masks,
                  drop)
    mbarrier.wait(q_empty, (it & 1) ^ 1)
    mbarrier.expect(q_ready, 2 * len(held) * held[0][0].block_type.nbytes)
    for i in gl.static_range(len(held)):
        desc, first_half, second_half = held[i]
        tma.async_copy_global_to_shared(desc, [b, h, m0, 0], q_ready, first_half.reshape([1, 1, ROWS, D]))
        tma.async_copy_global_to_shared(desc, [b, h, m0 + ROWS, 0], q_ready, second_half.reshape([1, 1, ROWS, D]))
    _tma_producer(k_bufs, v_bufs, ready, empty, k_desc, v_desc, first, hi, BLOCK_N, STAGES, None, 0,
                  c + (first - lo), (b, hk), masks, drop)
    return c + (hi - lo), it + 1


SCAN = gl.constexpr(16)  # tiles of segment ids a step of _segment_tiles reads


@gluon.jit
def _segment_tiles(tiles, OWN, sown, OTHER, sother, start, n_own, n_other, BLOCK: gl.constexpr, TILE: gl.constexpr):
    """kernels._segment_ranges in tiles: the tiles (lo, full_lo, full_hi, hi) of TILE positions of
    the other side that rows [start, start + BLOCK) of this side visit, narrowed by segment ids
    (OWN: this side's ids, rows below n_own counting; OTHER: the other side's, positions below
    n_other counting; strides sown, sother). Visited: the tiles from the first to the last that
    hold an id between the rows' least and greatest. Unmasked: where the rows are one segment,
    the tiles whose ids all equal it, if they form one run, within [full_lo, full_hi); else
    every visited tile masked."""
    lo, full_lo, full_hi, hi = tiles
    own_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    rows = start + gl.arange(0, BLOCK, layout=own_layout)
    valid = rows < n_own
    own = gl.load(OWN + rows.to(gl.int64) * sown, mask=valid, other=0)
    first = gl.load(OWN + start.to(gl.int64) * sown, mask=start < n_own, other=0)
    lo_id = gl.min(gl.where(valid, own, first), 0)
    hi_id = gl.max(gl.where(valid, own, first), 0)
    scan: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0])
    offs_t = gl.arange(0, SCAN, layout=gl.SliceLayout(1, scan))
    offs_c = gl.arange(0, TILE, layout=gl.SliceLayout(0, scan))
    first_hit = hi
    last_hit = lo
    first_full = hi
    last_full = lo
    n_full = 0
    for t0 in range(lo, hi, SCAN):
        t = t0 + offs_t
        pos = t[:, None] * TILE + offs_c[None, :]
        inside = (t < hi)[:, None] & (pos < n_other)
        ids = gl.load(OTHER + pos.to(gl.int64) * sother, mask=inside, other=0)
        hit = gl.max((inside & (ids >= lo_id) & (ids <= hi_id)).to(gl.int32), 1) > 0
        first_hit = gl.minimum(first_hit, gl.min(gl.where(hit, t, hi), 0))
        last_hit = gl.maximum(last_hit, gl.max(gl.where(hit, t + 1, lo), 0))
        full = gl.min((inside & (ids == lo_id)).to(gl.int32), 1) > 0
        first_full = gl.minimum(first_full, gl.min(gl.where(full, t, hi), 0))
        last_full = gl.maximum(last_full, gl.max(gl.where(full, t + 1, lo), 0))
        n_full += gl.sum(full.to(gl.int32), 0)
    new_lo = gl.minimum(first_hit, hi)
    new_hi = gl.maximum(gl.minimum(last_hit, hi), new_lo)
    run_lo = gl.maximum(first_full, full_lo)
    run_hi = gl.minimum(last_full, full_hi)
    run = (lo_id == hi_id) & (n_full > 0) & (n_full == last_full - first_full) & (run_lo < run_hi)
    return new_lo, gl.where(run, run_lo, new_hi), gl.where(run, run_hi, new_hi), new_hi


@gluon.jit
def _live(tiles, start, q_len, LIVE: gl.constexpr):
    """tiles (lo, full_lo, full_hi, hi), or none (all lo) for query rows from start on past q_len
    (LIVE: lengths or packed sequences, whose grid covers the longest)."""
    lo, full_lo, full_hi, hi = tiles
    if LIVE:
        past = start >= q_len
        full_lo = gl.where(past, lo, full_lo)
        full_hi = gl.where(past, lo, full_hi)
        hi = gl.where(past, lo, hi)
    return lo, full_lo, full_hi, hi


# ---- the backward: dK, dV (a program's keys held, query tiles streamed) and dQ (the forward's
# form). p = 2^(s qk_scale - lse2) and delta = rowsum(o * do) (- dlse) are the portable delta
# kernel's (kernels.fa_bwd_delta_kernel; lse2 = +inf for a row that saw no key or past q_len:
# p = 0). Rows past q_len and keys past kv_len are loaded as zeros.

KEYS = gl.constexpr(64)  # keys of a dK / dV warpgroup (two a program), of a dQ key tile


@gluon.jit
def _visible(keys, rows, kv_len, lo_shift, hi_shift, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
             BOUND: gl.constexpr):
    """Whether query rows see keys (absolute indices, broadcast against each other): at most a
    row + hi_shift (CAUSAL, WINDOW), at least a row + lo_shift (WINDOW), before kv_len (BOUND;
    needed by at least one of the three)."""
    if CAUSAL or WINDOW:
        ok = keys <= rows + hi_shift
        if WINDOW:
            ok = ok & (keys >= rows + lo_shift)
        if BOUND:
            ok = ok & (keys < kv_len)
    else:
        ok = keys < kv_len
    return ok


@gluon.jit
def _query_tiles(k0, q_len, kv_len, lo_shift, hi_shift, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
                 KV_LENS: gl.constexpr, BLOCK_K: gl.constexpr):
    """(lo, full_lo, full_hi, hi) of the keys [k0, k0 + BLOCK_K): the query tiles (ROWS rows)
    [lo, hi) see some of them, every row of those in [full_lo, full_hi) sees all (unmasked); as
    kernels._query_ranges, in tiles. Rows past q_len need no mask (p = 0: lse2 = +inf)."""
    n_q = gl.cdiv(q_len, ROWS)
    last = k0 + BLOCK_K - 1
    lo = 0
    full_lo = 0
    if CAUSAL or WINDOW:
        lo = gl.minimum(gl.maximum(k0 - hi_shift, 0) // ROWS, n_q)
        full_lo = gl.cdiv(gl.maximum(last - hi_shift, 0), ROWS)
    hi = n_q
    full_hi = n_q
    if WINDOW:
        hi = gl.cdiv(gl.minimum(gl.maximum(last - lo_shift + 1, 0), q_len), ROWS)
        full_hi = gl.maximum(k0 - lo_shift + 1, 0) // ROWS
    if KV_LENS:  # keys past kv_len: masked; none before it: no tile
        hi = gl.where(k0 < kv_len, hi, 0)
        full_hi = gl.where(last < kv_len, full_hi, 0)
    hi = gl.maximum(hi, lo)
    full_lo = gl.minimum(gl.maximum(full_lo, lo), hi)
    full_hi = gl.minimum(gl.maximum(full_hi, full_lo), hi)
    return lo, full_lo, full_hi, hi


@gluon.jit
def _dkdv_tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, r0, dk, dv, zero_s, LSE2, DELTA, lse_off, Nq,
               kv_len, lo_shift, hi_shift, qk_scale, keys, offs_q, alibi, op_layout: gl.constexpr,
               s_layout: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, KV_LENS: gl.constexpr,
               MASK: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, STAGES: gl.constexpr, drop=None,
               KEY0: gl.constexpr = 0):
    """The query tile from row r0 (the ring's c-th): S^T = K Q^T and dP^T = V dO^T in flight together,
    P^T = 2^(S^T qk_scale - lse2), dS^T = P^T (dP^T - delta); dV += P^T dO, dK += dS^T Q.
    MASK: scores of keys a row does not see (_visible) are 0. ALIBI: alibi = (keys as fp32,
    shift, slope2, slope2 (keys - k0), k0, cap), the forward's biased scores (_alibi; CAUSAL:
    split into a key and a row term, as _softmax). SOFTCAP: the scores _capped (by alibi[5])
    before the bias, dS^T times the cap's slope 1 - tanh^2. drop (dropout): (the ring of the
    program's masks, _keep_mask's, this warpgroup's keys from KEY0 in it; the kept values' scale s,
    1 / s): dV from the kept P^T, dP^T through the same mask (_kept), dS^T = P^T (dP^T - delta / s),
    so that dK and dV are s times the sums (the caller's; kernels._dkdv_tile's math). Frees the
    tile's slot."""
    slot = c % STAGES
    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
    fence_async_shared()
    q_s = q_bufs.index(slot)
    do_s = do_bufs.index(slot)
    st_tok = warpgroup_mma(k_smem, q_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dpt_tok = warpgroup_mma(v_smem, do_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    rows = r0 + offs_q
    inside = rows < Nq
    lse2 = gl.load(LSE2 + lse_off + rows, mask=inside, other=float("inf"))
    delta = gl.load(DELTA + lse_off + rows, mask=inside, other=0.0)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok, ))
    keys_f, shift, slope2, key_bias, k0, cap = alibi
    if SOFTCAP:
        st = _capped(st, cap)
        qk_scale = 1.0
    if ALIBI and CAUSAL:  # -slope2 (i + shift - j) = slope2 (j - k0) + slope2 (k0 - i - shift), as _softmax
        row_term = (k0 - (rows + shift).to(gl.float32)) * slope2 - lse2
        pt = gl.exp2(gl.fma(st, gl.full(st.shape, qk_scale, gl.float32, s_layout), key_bias[:, None])
                     + row_term[None, :])
    elif ALIBI:
        pt = gl.exp2(_alibi(st, qk_scale, (rows + shift).to(gl.float32)[None, :], keys_f[:, None], slope2)
                     - lse2[None, :])
    else:
        pt = gl.exp2(gl.fma(st, gl.full(st.shape, qk_scale, gl.float32, s_layout), -lse2[None, :]))
    if MASK:
        visible = _visible(keys[:, None], rows[None, :], kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, KV_LENS)
        pt = gl.where(visible, pt, 0.0)
    if drop is not None:  # loaded once lse2 is spent (at 240 registers the consumer has none to spare)
        keep = _keep_mask(drop[0], c, s_layout, True, KEY0)
        delta = delta * drop[2]
    dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt_tok, ))
    pv = pt.to(q_bufs.dtype)
    if drop is not None:
        dpt = _kept(dpt, keep)
        pv = _kept(pv, keep)
    dst = pt * (dpt - delta[None, :])
    if SOFTCAP:
        dst = dst * _cap_slope(st, cap)
    dst = dst.to(q_bufs.dtype)
    dv_tok = warpgroup_mma(gl.convert_layout(pv, op_layout), do_s, dv, is_async=True)
    dk_tok = warpgroup_mma(gl.convert_layout(dst, op_layout), q_s, dk, is_async=True)
    dv = warpgroup_mma_wait(num_outstanding=1, deps=(dv_tok, ))
    dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok, ))
    mbarrier.arrive(empty.index(slot), count=1)
    return dk, dv


@gluon.jit
def _dkdv_consumer(k_smem, v_smem, q_bufs, do_bufs, ready, empty, LSE2, DELTA, SLOPES, DK, DV, dk_off, dv_off,
                   sdkn, sdvn, s_ab, s_ah, lse_h0, lse_sh, lse_row0, G, hk, b, nseq, n_q, n_k, kv_len, lo_shift,
                   hi_shift, shift, qk_scale, sm_scale, cap, k0, tiles, lists, CAUSAL: gl.constexpr,
                   WINDOW: gl.constexpr, KV_LENS: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr,
                   VARLEN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, BS: gl.constexpr = 0, drop=None,
                   KEY0: gl.constexpr = 0):
    """One warpgroup: keys [k0, k0 + KEYS); over the G query heads of kv head hk, query tiles
    [lo, full_lo) and [full_hi, hi) masked, [full_lo, full_hi) not (tiles: _query_tiles'; BS:
    each head's list of query blocks, _head_list); writes the keys' dK (times sm_scale) and dV
    (rows below n_k). Head hq's lse2 and delta rows start at (lse_h0 + hq) lse_sh + lse_row0; n_q
    rows of them are read. drop: _dkdv_tile's, the ring's keys from KEY0 (0 or KEYS: the program's half)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    keys = k0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
    offs_q = gl.arange(0, ROWS, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([KEYS, ROWS], gl.float32, s_layout)
    dk = gl.zeros([KEYS, D], gl.float32, a_layout)
    dv = gl.zeros([KEYS, D], gl.float32, a_layout)
    lo, full_lo, full_hi, hi = tiles
    c = 0
    for g in range(G):
        lse_off = (lse_h0 + hk * G + g).to(gl.int64) * lse_sh + lse_row0
        slope2 = _slope2(SLOPES, b, hk * G + g, s_ab, s_ah, nseq, ALIBI, VARLEN)
        alibi = (keys.to(gl.float32), shift, slope2, (keys - k0).to(gl.float32) * slope2, k0, cap)
        listed, count = _head_list(lists, g, BS)
        if BS:
            lo, full_lo, full_hi, hi = _listed_query_tiles(listed, count, k0, shift, BS, CAUSAL)
        for i in range(lo, full_lo):
            dk, dv = _dkdv_tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, _tile_start(0, i, listed, ROWS, BS),
                                dk, dv, zero_s, LSE2, DELTA, lse_off, n_q, kv_len, lo_shift, hi_shift, qk_scale, keys,
                                offs_q, alibi, op_layout, s_layout, CAUSAL, WINDOW, KV_LENS, True, ALIBI, SOFTCAP,
                                STAGES, drop, KEY0)
            c += 1
        for i in range(full_lo, full_hi):
            dk, dv = _dkdv_tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, _tile_start(0, i, listed, ROWS, BS),
                                dk, dv, zero_s, LSE2, DELTA, lse_off, n_q, kv_len, lo_shift, hi_shift, qk_scale, keys,
                                offs_q, alibi, op_layout, s_layout, CAUSAL, WINDOW, KV_LENS, False, ALIBI, SOFTCAP,
                                STAGES, drop, KEY0)
            c += 1
        if WINDOW or KV_LENS:  # the tiles past the window's lower edge, or those of a block past kv_len
            for i in range(full_hi, hi):
                dk, dv = _dkdv_tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c,
                                    _tile_start(0, i, listed, ROWS, BS), dk, dv, zero_s, LSE2, DELTA, lse_off, n_q,
                                    kv_len, lo_shift, hi_shift, qk_scale, keys, offs_q, alibi, op_layout, s_layout,
                                    CAUSAL, WINDOW, KV_LENS, True, ALIBI, SOFTCAP, STAGES, drop, KEY0)
                c += 1
    offs_r = k0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, a_layout))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, a_layout))
    keep = (offs_r < n_k)[:, None]
    if drop is not None:  # the kept values' scale, out of _dkdv_tile's sums
        dk = dk * drop[1]
        dv = dv * drop[1]
    gl.store(DK + dk_off + offs_r.to(gl.int64)[:, None] * sdkn + offs_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=keep)
    gl.store(DV + dv_off + offs_r.to(gl.int64)[:, None] * sdvn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=keep)


@gluon.jit
def _key_program(Hq, G):
    """(Hkv, batch, kv head, first key) of a program of grid (blocks of 2 KEYS keys, B * Hkv)."""
    Hkv = Hq // G
    bh = gl.program_id(1)
    return Hkv, bh // Hkv, bh % Hkv, gl.program_id(0) * (2 * KEYS)


@gluon.jit
def _head_list(lists, g, BS: gl.constexpr):
    """BS (block-sparse attention): the list of query blocks that keep the program's key block
    for its g-th query head and their number, lists = (LIST, COUNT, the first head's column,
    its columns' stride (Mk), the list's length (Mq)) as bs_lists_kernel's columns; else
    (lists[0], 0)."""
    if BS:
        col = lists[2] + g * lists[3]
        return lists[0] + col * lists[4], gl.load(lists[1] + col)
    else:
        return lists[0], 0


@gluon.jit
def _listed_query_tiles(listed, count, k0, shift, BS: gl.constexpr, CAUSAL: gl.constexpr):
    """(lo, full_lo, full_hi, hi) of the query tiles of a listed head for keys [k0, k0 + KEYS):
    causal, the first (at most two) blocks whose first row does not see the last key masked."""
    per: gl.constexpr = BS // ROWS
    masked = count * 0
    if CAUSAL:
        last = k0 + KEYS - 1
        first = gl.load(listed, mask=count >= 1, other=0)
        second = gl.load(listed + 1, mask=count >= 2, other=0)
        masked = ((count >= 1) & (first * BS + shift < last)).to(gl.int32) + \
            ((count >= 2) & (second * BS + shift < last)).to(gl.int32)
    return count * 0, masked * per, count * per, count * per


@gluon.jit
def _head_descriptor(A, a_off, sah, san, G, n, TILE: gl.constexpr, D: gl.constexpr):
    """A TMA descriptor of [1, TILE, D] tiles over G heads (sah apart) of n rows (at least 1) of
    [., D] at A + a_off, san apart: rows past n land as zeros (as _descriptor's)."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, TILE, D], A.dtype.element_ty)
    return tma.make_tensor_descriptor(A + a_off, [G, gl.maximum(n, 1), D], [sah, san, 1], [1, TILE, D], layout)


@gluon.jit
def _dkdv_producer(q_bufs, do_bufs, ready, empty, q_desc, do_desc, G, lo, hi, lists, STAGES: gl.constexpr,
                   BS: gl.constexpr = 0, masks=None, drop=None):
    """Q and dO tiles [lo, hi) (BS: each head's listed blocks, _head_list) of the G query heads of
    the program's kv head, head after head, by TMA (_head_descriptor's: one arrival on
    ready[slot] expecting both tiles' bytes). masks (dropout): each tile's keep-masks for the
    program's 2 KEYS keys drawn while its copies fly (_draw_masks into _mask_rings' one ring;
    drop = (seed, the first query head's b Hq + hq, thr, the first key))."""
    TILE: gl.constexpr = q_bufs.shape[1]
    D: gl.constexpr = q_bufs.shape[2]
    c = lo * 0
    for g in range(G):
        listed, count = _head_list(lists, g, BS)
        first = lo
        n = hi - lo
        if BS:
            first = 0
            n = count * (BS // TILE)
        for j in range(n):
            slot = c % STAGES
            start = _tile_start(first, j, listed, TILE, BS)
            mbarrier.wait(empty.index(slot), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(slot), 2 * q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [g, start, 0], ready.index(slot),
                                            q_bufs.index(slot).reshape([1, TILE, D]))
            tma.async_copy_global_to_shared(do_desc, [g, start, 0], ready.index(slot),
                                            do_bufs.index(slot).reshape([1, TILE, D]))
            if masks is not None:
                _draw_masks(masks, c, (drop[0], drop[1] + g, drop[2], start), drop[3], 2 * KEYS)
            c += 1


@kernel(inputs=12, outputs=3, gluon=True)
def fa_bwd_dkdv_hopper_kernel(Q, K, V, DO, LSE2, DELTA, QLEN, KVLEN, SLOPES, QSEG, KSEG, SEED, Hq, G, Nq, Nk, qk_scale,
                              sm_scale, left, right, cap_in, cap_out, s_ab, s_ah, sqsb, sqsn, sksb, sksn, sqb, sqh, sqn,
                              skb, skh, skn, svb, svh, svn, sdob, sdoh, sdon, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, Tq,
                              Tk, seed, DK, DV, SCRATCH, CAUSAL: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                              PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                              WINDOW: gl.constexpr = False, Q_LENS: gl.constexpr = False, KV_LENS: gl.constexpr = False,
                              ALIBI: gl.constexpr = False, SOFTCAP: gl.constexpr = False,
                              SEGMENTS: gl.constexpr = False, VARLEN: gl.constexpr = False,
                              DROPOUT: gl.constexpr = False, SEED_WORDS: gl.constexpr = 0, DROP_THR: gl.constexpr = 0,
                              DROP_SCALE: gl.constexpr = 1.0):
    """Grid (cdiv(Nk, 2 KEYS), B * Hkv), 4 warps (12 in all): a program's 2 KEYS keys held in
    shared memory, one consumer warpgroup for each half; a producer streams the Q and dO tiles
    of the G query heads through a ring of STAGES. The producer is the default partition (the
    registers the consumers leave; PRODUCER_REGS unused): as a default partition, a consumer
    spilled 848 bytes a thread where the same code as a worker spilled about 100 (causal,
    sm_90). LSE2, DELTA: [B, Hq, Nq] fp32 (with ALIBI or SOFTCAP, LSE2 the forward's). WINDOW,
    Q_LENS, KV_LENS, ALIBI, SOFTCAP, left, right, cap_in, cap_out, SLOPES: as fa_fwd_hopper_kernel's.
    Only the query tiles that see the program's keys are visited; those crossing the causal
    diagonal, a window edge or kv_len masked. VARLEN: as fa_fwd_hopper_kernel's, grid (cdiv(Nk,
    2 KEYS), (B + 1) * Hkv), LSE2 and DELTA [Hq, Tq]; slot B zero-fills the dK, dV rows outside
    every sequence. Q / dO by TMA (SCRATCH: Triton's global scratch, the descriptors'). DROPOUT
    (dense): as fa_fwd_hopper_kernel's, the same mask, drawn by the producer (_dkdv_producer)."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdkb, sdkh, sdkn = _strides8(sdkb, sdkh, sdkn)
    sdvb, sdvh, sdvn = _strides8(sdvb, sdvh, sdvn)
    dtype: gl.constexpr = Q.dtype.element_ty
    Hkv, b, hk, k0 = _key_program(Hq, G)
    nseq = gl.num_programs(1) // Hkv - 1  # VARLEN's sequences
    q_row0, q_len, k_row0, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, nseq, Nq, Nk, Tq, Tk, left, right,
                                                                 Q_LENS, KV_LENS, VARLEN)
    tiles = _query_tiles(k0, q_len, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, KV_LENS or VARLEN, 2 * KEYS)

    k_off = _head(b, hk, k_row0, skb, skh, skn, VARLEN)
    v_off = _head(b, hk, k_row0, svb, svh, svn, VARLEN)
    v_lo = 0
    if WINDOW:  # keys before the first query's band: no query sees them (_dkdv_tile's dS = 0 times their value)
        v_lo = lo_shift
    k0_s, k1_s, v0_s, v1_s = _held(K, V, k_off, v_off, skn, svn, k0, kv_len, KEYS, D, v_lo)
    q_bufs, do_bufs, ready, empty = _tile_ring(dtype, ROWS, D, STAGES, 1)

    dk_off = _head(b, hk, k_row0, sdkb, sdkh, sdkn, VARLEN)
    dv_off = _head(b, hk, k_row0, sdvb, sdvh, sdvn, VARLEN)
    q_off = b.to(gl.int64) * sqb + (hk * G).to(gl.int64) * sqh  # the G query heads'
    do_off = b.to(gl.int64) * sdob + (hk * G).to(gl.int64) * sdoh
    if VARLEN:  # the rows written: the sequence's (the next are another's)
        q_off += q_row0.to(gl.int64) * sqn
        do_off += q_row0.to(gl.int64) * sdon
        n_q = q_len
        n_k = kv_len
        lse_h0 = 0
        lse_sh = Tq
        lse_row0 = q_row0.to(gl.int64)
        _fill_unwritten(DK, hk.to(gl.int64) * sdkh, sdkn, KVLEN, b, nseq, k_row0, kv_len, Tk, DK, 0, D, False)
        _fill_unwritten(DV, hk.to(gl.int64) * sdvh, sdvn, KVLEN, b, nseq, k_row0, kv_len, Tk, DV, 0, D, False)
    else:
        n_q = Nq
        n_k = Nk
        lse_h0 = b * Hq
        lse_sh = Nq
        lse_row0 = 0
    q_desc = _head_descriptor(Q, q_off, sqh, sqn, G, q_len, ROWS, D)
    do_desc = _head_descriptor(DO, do_off, sdoh, sdon, G, q_len, ROWS, D)
    gl.static_assert(not (DROPOUT and VARLEN), "dropout on the Gluon backward: dense only")
    drops = (None, None, None)  # the consumers' (_consumer_drop), the producer's rings and draw
    if DROPOUT:
        masks = _mask_rings(dtype, STAGES, 2 * KEYS, 1)
        drops = _consumer_drop(masks, 0, DROP_SCALE), masks, \
            (dropout_seed(SEED, seed, SEED_WORDS), b * Hq + hk * G, DROP_THR, k0)
    gl.warp_specialize([
        (_dkdv_producer, (q_bufs, do_bufs, ready, empty, q_desc, do_desc, G, tiles[0], tiles[3], (Q, Q, 0, 0, 0),
                          STAGES, 0, drops[1], drops[2])),
        (_dkdv_consumer, (k0_s, v0_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, SLOPES, DK, DV, dk_off, dv_off,
                          sdkn, sdvn, s_ab, s_ah, lse_h0, lse_sh, lse_row0, G, hk, b, nseq, n_q, n_k, kv_len, lo_shift,
                          hi_shift, kv_len - q_len, qk_scale, sm_scale, (cap_in, cap_out), k0, tiles, (Q, Q, 0, 0, 0),
                          CAUSAL, WINDOW, KV_LENS or VARLEN, ALIBI, SOFTCAP, VARLEN, D, STAGES, 0, drops[0], 0)),
        (_dkdv_consumer, (k1_s, v1_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, SLOPES, DK, DV, dk_off, dv_off,
                          sdkn, sdvn, s_ab, s_ah, lse_h0, lse_sh, lse_row0, G, hk, b, nseq, n_q, n_k, kv_len, lo_shift,
                          hi_shift, kv_len - q_len, qk_scale, sm_scale, (cap_in, cap_out), k0 + KEYS, tiles,
                          (Q, Q, 0, 0, 0), CAUSAL, WINDOW, KV_LENS or VARLEN, ALIBI, SOFTCAP, VARLEN, D, STAGES, 0,
                          drops[0], KEYS)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


@gluon.jit
def _dq_tile(q_smem, do_smem, k_bufs, v_bufs, ready, empty, c, k0, dq, zero_s, lse2, delta, qk_scale, rows, offs_n,
             kv_len, lo_shift, hi_shift, alibi, band, dq_op: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
             MASK: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, STAGES: gl.constexpr, drop=None):
    """The key tile from key k0 (the ring's c-th): S = Q K^T and dP = dO V^T in flight together, dS = P (dP -
    delta), dQ += dS K. MASK: scores of keys a row does not see (_visible) are 0, and the keys and
    values outside band (the program's _seen_keys) are zeroed (dS = 0 never meets a NaN). ALIBI: alibi =
    (rows + shift as fp32, slope2, slope2 x the tile's columns, cap), the forward's biased scores
    (_alibi; CAUSAL: split into a column and a row term, as _softmax). SOFTCAP: as _dkdv_tile's.
    drop (dropout): (the warpgroup's mask ring, _keep_mask's, ...): dP through the mask (delta
    divided by the kept values' scale, dQ times it: the caller's). Frees the tile's slot."""
    slot = c % STAGES
    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
    fence_async_shared()
    k_s = k_bufs.index(slot)
    if MASK:
        _zero_rows_outside(k_s, band[0] - k0, band[1] - k0)
        _zero_rows_outside(v_bufs.index(slot), band[0] - k0, band[1] - k0)
    s_tok = warpgroup_mma(q_smem, k_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(do_smem, v_bufs.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if drop is not None:
        keep = _keep_mask(drop[0], c, gl.constexpr(zero_s.type.layout))
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    rows_f, slope2, col_bias, cap = alibi
    if SOFTCAP:
        s = _capped(s, cap)
        qk_scale = 1.0
    if ALIBI and CAUSAL:  # split into a column and a row term, as _softmax
        row_term = (k0 - rows_f) * slope2 - lse2
        p = gl.exp2(gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), col_bias[None, :])
                    + row_term[:, None])
    elif ALIBI:
        p = gl.exp2(_alibi(s, qk_scale, rows_f[:, None], (k0 + offs_n).to(gl.float32)[None, :], slope2)
                    - lse2[:, None])
    else:
        p = gl.exp2(gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), -lse2[:, None]))
    if MASK:
        keys = k0 + offs_n
        p = gl.where(_visible(keys[None, :], rows[:, None], kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, True), p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
    if drop is not None:
        dp = _kept(dp, keep)
    ds = p * (dp - delta[:, None])
    if SOFTCAP:
        ds = ds * _cap_slope(s, cap)
    dq_tok = warpgroup_mma(gl.convert_layout(ds.to(k_bufs.dtype), dq_op), k_s, dq, is_async=True)
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
    mbarrier.arrive(empty.index(slot), count=1)
    return dq


@gluon.jit
def _dq_consumer(q_smem, do_smem, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, kv_len,
                 lo_shift, hi_shift, shift, qk_scale, sm_scale, slope2, cap, m0, tiles, LIST, CAUSAL: gl.constexpr,
                 WINDOW: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr, D: gl.constexpr,
                 STAGES: gl.constexpr, BS: gl.constexpr = 0, c0=0, q_free=None, Q_FREE: gl.constexpr = False,
                 drop=None):
    """One warpgroup: query rows [m0, m0 + ROWS); key tiles [lo, full_lo) and [full_hi, hi)
    masked, [full_lo, full_hi) not (tiles: _key_tiles'; BS: tiles of LIST's blocks, _tile_start),
    the ring's c0-th on; writes their dQ (times sm_scale), rows below Nq. Q_FREE: an arrival on
    q_free once the last tile is done (the held Q and dO rows may be refilled). drop (dropout): (the
    warpgroup's mask ring, the kept values' scale s, 1 / s): dQ = s dS K with dS = P (dP - delta / s)
    (_dq_tile)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, KEYS, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    dq_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    rows = m0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    inside = rows < Nq
    lse2 = gl.load(LSE2 + lse_off + rows, mask=inside, other=float("inf"))
    delta = gl.load(DELTA + lse_off + rows, mask=inside, other=0.0)
    if drop is not None:
        delta = delta * drop[2]
    offs_n = gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([ROWS, KEYS], gl.float32, s_layout)
    dq = gl.zeros([ROWS, D], gl.float32, a_layout)
    alibi = ((rows + shift).to(gl.float32), slope2, offs_n.to(gl.float32) * slope2, cap)
    band = _seen_keys(m0 // (2 * ROWS) * (2 * ROWS), 2 * ROWS, Nq, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW)
    lo, full_lo, full_hi, hi = tiles
    for r in gl.static_range(3):  # the masked, unmasked and masked ranges (the first only with a window)
        if r > 0 or WINDOW:
            j0 = lo if r == 0 else (full_lo if r == 1 else full_hi)
            j1 = full_lo if r == 0 else (full_hi if r == 1 else hi)
            for j in range(j0, j1):
                dq = _dq_tile(q_smem, do_smem, k_bufs, v_bufs, ready, empty, c0 + j - lo,
                              _tile_start(0, j, LIST, KEYS, BS), dq, zero_s, lse2, delta, qk_scale, rows, offs_n,
                              kv_len, lo_shift, hi_shift, alibi, band, dq_op, CAUSAL, WINDOW, r != 1, ALIBI, SOFTCAP,
                              STAGES, drop)
    if Q_FREE:
        mbarrier.arrive(q_free, count=1)
    if drop is not None:
        dq = dq * drop[1]
    offs_r = m0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, a_layout))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, a_layout))
    gl.store(DQ + dq_off + offs_r.to(gl.int64)[:, None] * sdqn + offs_d[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty), mask=(offs_r < Nq)[:, None])


@kernel(inputs=12, outputs=2, gluon=True)
def fa_bwd_dq_hopper_kernel(Q, K, V, DO, LSE2, DELTA, QLEN, KVLEN, SLOPES, QSEG, KSEG, SEED, Hq, G, Nq, Nk, qk_scale,
                            sm_scale, left, right, cap_in, cap_out, s_ab, s_ah, sqsb, sqsn, sksb, sksn, sqb, sqh, sqn,
                            skb, skh, skn, svb, svh, svn, sdob, sdoh, sdon, sdqb, sdqh, sdqn, Tq, Tk, seed, DQ, SCRATCH,
                            CAUSAL: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                            PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, WINDOW: gl.constexpr = False,
                            Q_LENS: gl.constexpr = False, KV_LENS: gl.constexpr = False, ALIBI: gl.constexpr = False,
                            SOFTCAP: gl.constexpr = False, SEGMENTS: gl.constexpr = False,
                            VARLEN: gl.constexpr = False, DROPOUT: gl.constexpr = False,
                            SEED_WORDS: gl.constexpr = 0, DROP_THR: gl.constexpr = 0,
                            DROP_SCALE: gl.constexpr = 1.0):
    """Grid (cdiv(Nq, 2 ROWS), B * Hq), 4 warps (12 in all): the forward's form, Q and dO rows
    held, two consumer warpgroups of ROWS rows, K and V tiles of KEYS rows streamed by the
    producer (only those the rows see). Options as fa_bwd_dkdv_hopper_kernel's. Causal: the
    last query blocks (the most keys) run first. VARLEN: grid (cdiv(Nq, 2 ROWS), (B + 1) * Hq);
    slot B zero-fills the dQ rows outside every sequence. K / V by TMA (_tma_producer; SCRATCH:
    Triton's global scratch, the descriptors'). DROPOUT (dense): as fa_fwd_hopper_kernel's, the
    same mask, drawn by the producer beside each K / V tile."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdqb, sdqh, sdqn = _strides8(sdqb, sdqh, sdqn)
    BLOCK_M: gl.constexpr = 2 * ROWS
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)
    bh = gl.program_id(1)
    m0 = pid_m * BLOCK_M
    nseq = gl.num_programs(1) // Hq - 1  # VARLEN's sequences
    q_row0, q_len, k_row0, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, nseq, Nq, Nk, Tq, Tk, left, right,
                                                                 Q_LENS, KV_LENS, VARLEN)
    q_off = _head(b, h, q_row0, sqb, sqh, sqn, VARLEN)
    do_off = _head(b, h, q_row0, sdob, sdoh, sdon, VARLEN)
    q0_s, q1_s, do0_s, do1_s = _held(Q, DO, q_off, do_off, sqn, sdon, m0, q_len, ROWS, D)
    k_bufs, v_bufs, ready, empty = _tile_ring(dtype, KEYS, D, STAGES, 1)

    tiles = _live(_key_tiles(m0, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, BLOCK_M, KEYS), m0, q_len,
                  Q_LENS or VARLEN)
    dq_off = _head(b, h, q_row0, sdqb, sdqh, sdqn, VARLEN)
    k_off = _head(b, hk, k_row0, skb, skh, skn, VARLEN)
    v_off = _head(b, hk, k_row0, svb, svh, svn, VARLEN)
    k_desc = _descriptor(K, k_off, skn, kv_len, KEYS, D)
    v_desc = _descriptor(V, v_off, svn, kv_len, KEYS, D)
    if VARLEN:  # the rows written: the sequence's (the next are another's)
        n_q = q_len
        lse_off = h.to(gl.int64) * Tq + q_row0
        _fill_unwritten(DQ, h.to(gl.int64) * sdqh, sdqn, QLEN, b, nseq, q_row0, q_len, Tq, DQ, 0, D, False)
    else:
        n_q = Nq
        lse_off = bh.to(gl.int64) * Nq
    slope2 = _slope2(SLOPES, b, h, s_ab, s_ah, nseq, ALIBI, VARLEN)
    gl.static_assert(not (DROPOUT and VARLEN), "dropout on the Gluon backward: dense only")
    drops = (None, None, None, None)  # the consumers' (_consumer_drop), the producer's rings and draw
    if DROPOUT:
        masks = _mask_rings(dtype, STAGES, KEYS)
        drops = _consumer_drop(masks, 0, DROP_SCALE), _consumer_drop(masks, 1, DROP_SCALE), masks, \
            (dropout_seed(SEED, seed, SEED_WORDS), bh, DROP_THR, m0)
    gl.warp_specialize([
        (_dq_consumer, (q0_s, do0_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, n_q, kv_len,
                        lo_shift, hi_shift, kv_len - q_len, qk_scale, sm_scale, slope2, (cap_in, cap_out), m0, tiles,
                        None, CAUSAL, WINDOW, ALIBI, SOFTCAP, D, STAGES, 0, 0, None, False, drops[0])),
        (_dq_consumer, (q1_s, do1_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, n_q, kv_len,
                        lo_shift, hi_shift, kv_len - q_len, qk_scale, sm_scale, slope2, (cap_in, cap_out), m0 + ROWS,
                        tiles, None, CAUSAL, WINDOW, ALIBI, SOFTCAP, D, STAGES, 0, 0, None, False, drops[1])),
        (_tma_producer, (k_bufs, v_bufs, ready, empty, k_desc, v_desc, tiles[0], tiles[3], KEYS, STAGES, None, 0, 0,
                         None, drops[2], drops[3])),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


@kernel(inputs=12, outputs=2, gluon=True)
def fa_bwd_dq_hopper_persistent_kernel(Q, K, V, DO, LSE2, DELTA, QLEN, KVLEN, SLOPES, QSEG, KSEG, SEED, Hq, G, Nq,
                                       Nk, qk_scale, sm_scale, left, right, cap_in, cap_out, s_ab, s_ah, sqsb, sqsn,
                                       sksb, sksn, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sdob, sdoh, sdon, sdqb,
                                       sdqh, sdqn, Tq, Tk, B, seed, DQ, SCRATCH, CAUSAL: gl.constexpr, D: gl.constexpr,
                                       STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                                       CONSUMER_REGS: gl.constexpr, WINDOW: gl.constexpr = False,
                                       Q_LENS: gl.constexpr = False, KV_LENS: gl.constexpr = False,
                                       ALIBI: gl.constexpr = False, SOFTCAP: gl.constexpr = False,
                                       SEGMENTS: gl.constexpr = False, VARLEN: gl.constexpr = False,
                                       DROPOUT: gl.constexpr = False, SEED_WORDS: gl.constexpr = 0,
                                       DROP_THR: gl.constexpr = 0, DROP_SCALE: gl.constexpr = 1.0):
    """fa_bwd_dq_hopper_kernel's dQ, dense [B, H, N, D] with no lengths, as a persistent kernel (the
    forward's form, fa_fwd_hopper_persistent_kernel): grid (programs, 1), work items in
    fa_bwd_dq_hopper_kernel's grid order (_work), dealt by _snake. Q, dO and K / V by TMA through
    descriptors over all heads (rows past Nq, Nk land as zeros); the producer loads an item's Q and
    dO rows once both consumers are done with the last item's (q_empty), after its first K / V
    tiles, so that they arrive under the last item's epilogue. B: the batch. DROPOUT: as
    fa_bwd_dq_hopper_kernel's."""
    gl.static_assert(not (VARLEN or Q_LENS or KV_LENS), "the persistent dQ takes no lengths nor packed sequences")
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdqb, sdqh, sdqn = _strides8(sdqb, sdqh, sdqn)
    dtype: gl.constexpr = Q.dtype.element_ty
    n_m = gl.cdiv(Nq, 2 * ROWS)
    q_desc = _heads_descriptor(Q, B, Hq, Nq, sqb, sqh, sqn, ROWS, D)
    do_desc = _heads_descriptor(DO, B, Hq, Nq, sdob, sdoh, sdon, ROWS, D)
    k_desc = _heads_descriptor(K, B, Hq // G, Nk, skb, skh, skn, KEYS, D)
    v_desc = _heads_descriptor(V, B, Hq // G, Nk, svb, svh, svn, KEYS, D)
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], dtype)
    q0 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    q1 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    do0 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    do1 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    k_bufs, v_bufs, ready, empty = _tile_ring(dtype, KEYS, D, STAGES, 1)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=2)
    fence_async_shared()
    gl.thread_barrier()
    item = (QLEN, KVLEN, Hq, G, Nq, Nk, left, right, n_m, n_m * B * Hq)
    out = (LSE2, DELTA, DQ, SLOPES, s_ab, s_ah, sdqb, sdqh, sdqn, qk_scale, sm_scale, (cap_in, cap_out))
    drops = (None, None, None)  # the consumers' (_consumer_drop), the producer's (rings, seed, thr, Hq)
    if DROPOUT:
        masks = _mask_rings(dtype, STAGES, KEYS)
        drops = _consumer_drop(masks, 0, DROP_SCALE), _consumer_drop(masks, 1, DROP_SCALE), \
            (masks, dropout_seed(SEED, seed, SEED_WORDS), DROP_THR, Hq)
    gl.warp_specialize([
        (_dq_persistent_consumer, (q0, do0, 0, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, CAUSAL,
                                   WINDOW, ALIBI, SOFTCAP, D, STAGES, drops[0])),
        (_dq_persistent_consumer, (q1, do1, ROWS, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item, CAUSAL,
                                   WINDOW, ALIBI, SOFTCAP, D, STAGES, drops[1])),
        (_dq_persistent_producer, (q0, q1, do0, do1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, do_desc,
                                   k_desc, v_desc, item, CAUSAL, WINDOW, STAGES, drops[2])),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit
def _dq_item(w, item, CAUSAL: gl.constexpr, WINDOW: gl.constexpr):
    """Work item w of the persistent dQ: (b, h, kv head, m0, kv_len, lo_shift, hi_shift, tiles), as
    fa_bwd_dq_hopper_kernel's program finds them (no lengths)."""
    QLEN, KVLEN, Hq, G, Nq, Nk, left, right, n_m, n_items = item
    pid_m, b, h, hk = _work(w, n_m, Hq, G, CAUSAL)
    m0 = pid_m * (2 * ROWS)
    _, q_len, _, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, 0, Nq, Nk, Nq, Nk, left, right, False, False,
                                                       False)
    tiles = _key_tiles(m0, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, 2 * ROWS, KEYS)
    return b, h, hk, m0, kv_len, lo_shift, hi_shift, tiles


@gluon.jit
def _dq_persistent_consumer(q_smem, do_smem, half, k_bufs, v_bufs, ready, empty, q_ready, q_empty, out, item,
                            CAUSAL: gl.constexpr, WINDOW: gl.constexpr, ALIBI: gl.constexpr, SOFTCAP: gl.constexpr,
                            D: gl.constexpr, STAGES: gl.constexpr, drop=None):
    """A consumer warpgroup of the persistent dQ: rows [m0 + half, + ROWS) of each of its program's
    items (_dq_consumer's work), its Q and dO rows awaited on q_ready and freed on q_empty, in
    _snake's order; c counts the ring's tiles, it the items. drop: _dq_consumer's."""
    LSE2, DELTA, DQ, SLOPES, s_ab, s_ah, sdqb, sdqh, sdqn, qk_scale, sm_scale, cap = out
    Hq = item[2]
    Nq = item[4]
    c = 0
    it = 0
    for r in range(gl.cdiv(item[9], gl.num_programs(0))):
        w = _snake(r)
        if w < item[9]:
            b, h, hk, m0, kv_len, lo_shift, hi_shift, tiles = _dq_item(w, item, CAUSAL, WINDOW)
            slope2 = _slope2(SLOPES, b, h, s_ab, s_ah, 0, ALIBI, False)
            mbarrier.wait(q_ready, it & 1)
            _dq_consumer(q_smem, do_smem, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, (b * Hq + h).to(gl.int64) * Nq,
                         _head(b, h, 0, sdqb, sdqh, sdqn, False), sdqn, Nq, kv_len, lo_shift, hi_shift, kv_len - Nq,
                         qk_scale, sm_scale, slope2, cap, m0 + half, tiles, None, CAUSAL, WINDOW, ALIBI, SOFTCAP, D,
                         STAGES, 0, c, q_empty, True, drop)
            c += gl.maximum(tiles[3] - tiles[0], 0)
            it += 1


@gluon.jit
def _dq_persistent_producer(q0, q1, do0, do1, k_bufs, v_bufs, ready, empty, q_ready, q_empty, q_desc, do_desc,
                            k_desc, v_desc, item, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, STAGES: gl.constexpr,
                            dropout=None):
    """The persistent dQ's loads: for each item, its first STAGES - 1 K / V tiles, its Q and dO rows
    once q_empty says both consumers are done with the last item's, then its other K / V tiles.
    dropout: _persistent_producer's."""
    c = 0
    it = 0
    for r in range(gl.cdiv(item[9], gl.num_programs(0))):
        w = _snake(r)
        if w < item[9]:
            b, h, hk, m0, kv_len, lo_shift, hi_shift, tiles = _dq_item(w, item, CAUSAL, WINDOW)
            c, it = _held_item_loads(k_bufs, v_bufs, ready, empty, k_desc, v_desc, q_ready, q_empty,
                                     ((q_desc, q0, q1), (do_desc, do0, do1)), b, h, hk, m0, tiles, c, it, KEYS, STAGES,
                                     dropout)
