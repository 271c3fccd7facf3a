"""Decode attention kernels over a paged KV cache, and the merge of partial attentions.

The cache: k_cache, v_cache [num_blocks, BS, Hkv, D]; sequence b's token t lives in physical
block table[b, t // BS], row t % BS. Nothing is gathered in memory: a tile of BN token rows
reads each row at its own block's address (int64 offsets).

``decode_split_kernel`` (seq-first, flash-decoding): one program per (split of the token
range, b * Hkv + kv head). The G = Hq / Hkv query heads that share the kv head are one [GP, D]
tile (GP: G padded to the dot's 16 rows), so each K/V row is read once per kv head. An online
softmax over the split's tokens (base-2 scores, as flash attention) gives o and the natural-log
lse of the split; with one split they are the result, else fp32 partials that
``decode_combine_kernel`` merges. With a schedule (schedule.py), ``decode_chunk_kernel``
(chunk-first) reads each shared block once per kv head against the query heads of every
sequence that shares it, as one [M, D] tile; the split kernel then starts each sequence after
its shared blocks and, with one split, starts its online softmax from the sequence's chunk
partials (else the combine merges both kinds of partial). ``merge_states_kernel`` merges
two attentions over disjoint key sets (merge_attention_states).

Merge of states (o_i, lse_i): lse = log sum_i exp(lse_i), o = sum_i exp(lse_i - lse) o_i; a
state with lse = -inf (no key) weighs 0; all empty: o = 0, lse = -inf. NaN in either gives NaN.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
# Chunk-first partials the split kernel loads at a time (_unit_state writes the four out).
MERGE_LOADS = tl.constexpr(4)


@triton.jit
def _kv_rows(CACHE, TABLE_ROW, stn, t, valid, hk, offs_d, dmask, sn, st, sh, sd, num_blocks, BS: tl.constexpr,
             ALIGN: tl.constexpr):
    """Token rows t [BN] of one kv head of a paged cache, [BN, BD] (0 where not valid). The
    block ids are clamped to [0, num_blocks): a bad table (checked on the host where the
    values are there) never reads outside the cache. Row strides are multiples of ALIGN (so
    a row's loads vectorise). One masked loop: whole tiles split off unmasked ran slower on an
    H100 (decode-sweep results)."""
    blk = tl.load(TABLE_ROW + (t // BS) * stn, mask=valid, other=0).to(tl.int64)
    blk = tl.minimum(tl.maximum(blk, 0), num_blocks - 1)
    rows = blk * aligned(sn, ALIGN) + (t % BS).to(tl.int64) * aligned(st, ALIGN)
    ptrs = CACHE + hk * aligned(sh, ALIGN) + rows[:, None] + offs_d[None, :] * sd
    return tl.load(ptrs, mask=valid[:, None] & dmask[None, :], other=0.0)


@triton.jit
def _attend(q, K, V, table_row, stn, start, end, hk, offs_d, dmask, qk_scale, num_blocks, skn, skt, skh, skd, svn, svt,
            svh, svd, m_i, l_i, acc, BN: tl.constexpr, BS: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """(o, lse) of the query rows q [M, BD] over tokens [start, end) of a block list (table_row,
    its stride stn) and a state (m_i, l_i, acc) of keys before them (_no_state: none): an online
    softmax in base 2; a row that sees no key gets o = 0 and lse = -inf (natural log)."""
    for t0 in range(start, end, BN):
        t = t0 + tl.arange(0, BN)
        valid = t < end
        k = _kv_rows(K, table_row, stn, t, valid, hk, offs_d, dmask, skn, skt, skh, skd, num_blocks, BS, ALIGN)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _kv_rows(V, table_row, stn, t, valid, hk, offs_d, dmask, svn, svt, svh, svd, num_blocks, BS, ALIGN)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    empty = l_i == 0.0
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    return o, tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)


@triton.jit
def _no_state(M: tl.constexpr, BD: tl.constexpr):
    """The online softmax's state (m, l, acc) of no key, for M rows."""
    return tl.full([M], float("-inf"), tl.float32), tl.zeros([M], tl.float32), tl.zeros([M, BD], tl.float32)


@triton.jit
def _unit_state(CO, CL, units_ptr, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D, BDEPTH: tl.constexpr):
    """The chunk-first partials of units units_ptr[:depth] (-1 past the last) for heads offs_g of
    a kv head (CO [.., U, G, D], CL [.., U, G] from unit_base = hk * U) as _attend's state (m, l,
    acc) in base 2: m the largest lse log2(e), weights w_u = 2^(lse_u log2(e) - m), l their sum,
    acc = sum w_u o_u (m = -inf, l = 0 where none), for the split kernel to start from.
    Four partials' loads are issued before the first is used (16 registers a thread each at G <= 16,
    D 128), their ids as scalar loads: picking an id out of the [BDEPTH] tile is a reduction across
    the program's warps, whose barriers kept each partial's load behind the last one's use."""
    offs_u = tl.arange(0, BDEPTH)
    units = tl.load(units_ptr + offs_u, mask=offs_u < depth, other=-1).to(tl.int64)
    umask = units >= 0
    lu = tl.load(CL + ((unit_base + units) * G)[None, :] + offs_g[:, None], mask=gmask[:, None] & umask[None, :],
                 other=float("-inf")) * LOG2E
    m = tl.max(lu, 1)
    wu = tl.math.exp2(lu - tl.where(m == float("-inf"), 0.0, m)[:, None])
    acc = tl.zeros([offs_g.shape[0], offs_d.shape[0]], tl.float32)
    tl.static_assert(MERGE_LOADS == 4, "_unit_state writes four loads out")
    for i0 in range(0, depth, MERGE_LOADS):  # four units' loads issued before the first is used
        o0 = _unit_rows(CO, units_ptr, i0, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D)
        o1 = _unit_rows(CO, units_ptr, i0 + 1, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D)
        o2 = _unit_rows(CO, units_ptr, i0 + 2, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D)
        o3 = _unit_rows(CO, units_ptr, i0 + 3, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D)
        acc += o0 * tl.sum(tl.where(offs_u[None, :] == i0, wu, 0.0), 1)[:, None]
        acc += o1 * tl.sum(tl.where(offs_u[None, :] == i0 + 1, wu, 0.0), 1)[:, None]
        acc += o2 * tl.sum(tl.where(offs_u[None, :] == i0 + 2, wu, 0.0), 1)[:, None]
        acc += o3 * tl.sum(tl.where(offs_u[None, :] == i0 + 3, wu, 0.0), 1)[:, None]
    return m, tl.sum(wu, 1), acc


@triton.jit
def _unit_rows(CO, units_ptr, i, depth, unit_base, G, offs_g, gmask, offs_d, dmask, D):
    """Unit units_ptr[i]'s partial rows offs_g (zeros from depth on), its id a scalar load."""
    u = tl.load(units_ptr + i, mask=i < depth, other=-1).to(tl.int64)
    return tl.load(CO + ((unit_base + u) * G + offs_g)[:, None] * D + offs_d[None, :],
                   mask=(gmask & (u >= 0))[:, None] & dmask[None, :], other=0.0)


@kernel(inputs=9, outputs=2)
def decode_split_kernel(
    Q, K, V, TABLE, LENS, STARTS, CO, CL, SEQ_UNITS,
    Hkv, G, D, num_blocks, max_len, split_len, qk_scale, U, depth,
    sqb, sqh, sqd, skn, skt, skh, skd, svn, svt, svh, svd, stb, stn,
    O, LSE,
    GP: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BS: tl.constexpr, PARTIAL: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, HAS_START: tl.constexpr, MERGE: tl.constexpr,
    BDEPTH: tl.constexpr,
):
    """Grid (splits, B*Hkv). The attention of the G query heads of kv head hk over tokens
    [split * split_len, +split_len) of sequence b (up to its length, clamped to the table's
    max_len); with HAS_START (a schedule's shared tokens come before) over its tokens from
    STARTS[b] on, in splits of equal whole tiles.
    PARTIAL: o fp32 into O [B, Hq, splits, D] and lse into LSE [B, Hq, splits]; else o in O's
    dtype into O [B, Hq, D] and lse into LSE [B, Hq]. MERGE (one split): the sequence's
    chunk-first partials (units SEQ_UNITS[b, :depth], -1 past the last, of CO [Hkv, U, G, D] and
    CL [Hkv, U, G]) are the state the online softmax starts from. qk_scale = softmax_scale *
    log2(e). D and the strides but the last are multiples of ALIGN."""
    split = tl.program_id(0)
    bk = tl.program_id(1)
    nsplit = tl.num_programs(0)
    b = (bk // Hkv).to(tl.int64)
    hk = (bk % Hkv).to(tl.int64)
    n = tl.minimum(tl.maximum(tl.load(LENS + b).to(tl.int32), 0), max_len)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, BD)
    D = aligned(D, ALIGN)
    gmask = offs_g < G
    dmask = offs_d < D
    hq = hk * G + offs_g
    q = tl.load(Q + b * aligned(sqb, ALIGN) + hq[:, None] * aligned(sqh, ALIGN) + offs_d[None, :] * sqd, mask=gmask[:, None] & dmask[None, :],
                other=0.0)
    table_row = TABLE + b * stb
    if HAS_START:  # the sequence's own tokens, from STARTS[b], in nsplit parts of whole tiles
        s0 = tl.load(STARTS + b).to(tl.int32)
        split_len = tl.cdiv(tl.cdiv(tl.maximum(n - s0, 0), nsplit), BN) * BN
        start = s0 + split * split_len
    else:
        start = split * split_len
    end = tl.minimum(start + split_len, n)
    if MERGE:
        m_i, l_i, acc = _unit_state(CO, CL, SEQ_UNITS + b * depth, depth, hk * U, G, offs_g, gmask, offs_d, dmask, D,
                                    BDEPTH)
    else:
        m_i, l_i, acc = _no_state(GP, BD)
    o, lse = _attend(q, K, V, table_row, stn, start, end, hk, offs_d, dmask, qk_scale, num_blocks, skn, skt, skh, skd,
                     svn, svt, svh, svd, m_i, l_i, acc, BN, BS, PRECISION, ALIGN)
    row = b * (Hkv * G) + hq  # b * Hq + hq
    if PARTIAL:
        idx = row * nsplit + split
        tl.store(O + idx[:, None] * D + offs_d[None, :], o, mask=gmask[:, None] & dmask[None, :])
        tl.store(LSE + idx, lse, mask=gmask)
    else:
        tl.store(O + row[:, None] * D + offs_d[None, :], o.to(O.dtype.element_ty), mask=gmask[:, None] & dmask[None, :])
        tl.store(LSE + row, lse, mask=gmask)


@triton.jit
def work_item(WORK, w):
    """Work item w of a schedule's WORK [W, 6] (schedule.py): (seq_off, nseq, blk_off, tok0,
    tok1, unit0), unit0 as int64. Both chunk-first kernels read their item through it."""
    row = WORK + w * 6
    return (tl.load(row), tl.load(row + 1), tl.load(row + 2), tl.load(row + 3), tl.load(row + 4),
            tl.load(row + 5).to(tl.int64))


@kernel(inputs=6, outputs=2)
def decode_chunk_kernel(
    Q, K, V, WORK, TASK_SEQS, TASK_BLOCKS,
    Hkv, G, D, num_blocks, U, qk_scale,
    sqb, sqh, sqd, skn, skt, skh, skd, svn, svt, svh, svd,
    CO, CL,
    M: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BS: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """Grid (work items, R, Hkv): chunk-first (a schedule's shared blocks, see schedule.py). Work
    item w = WORK[w] (seq_off, nseq, blk_off, tok0, tok1, unit0): tokens [tok0, tok1) of its
    task's blocks against the query heads of kv head hk of all nseq sequences: rows p * G + g
    (sequence p of the task, head g of the kv head), M rows a tile, tiles r, r + R, ... in
    program r, each block tile read once per row tile.
    Unit unit0 + p's partial for head hk * G + g: CO [Hkv, U, G, D] fp32 and CL [Hkv, U, G]."""
    w = tl.program_id(0).to(tl.int64)
    r_first = tl.program_id(1)
    R = tl.num_programs(1)
    hk = tl.program_id(2).to(tl.int64)
    seq_off, nseq, blk_off, tok0, tok1, unit0 = work_item(WORK, w)
    D = aligned(D, ALIGN)
    offs_d = tl.arange(0, BD)
    dmask = offs_d < D
    for r0 in range(r_first * M, nseq * G, R * M):
        r = r0 + tl.arange(0, M)
        rmask = r < nseq * G
        p = r // G
        g = r % G
        seq = tl.load(TASK_SEQS + seq_off + p, mask=rmask, other=0).to(tl.int64)
        qm = rmask[:, None] & dmask[None, :]
        q = tl.load(Q + seq[:, None] * aligned(sqb, ALIGN) + (hk * G + g)[:, None] * aligned(sqh, ALIGN)
                    + offs_d[None, :] * sqd, mask=qm, other=0.0)
        m_i, l_i, acc = _no_state(M, BD)
        o, lse = _attend(q, K, V, TASK_BLOCKS + blk_off, 1, tok0, tok1, hk, offs_d, dmask, qk_scale, num_blocks,
                         skn, skt, skh, skd, svn, svt, svh, svd, m_i, l_i, acc, BN, BS, PRECISION, ALIGN)
        idx = (hk * U + unit0 + p) * G + g
        tl.store(CO + idx[:, None] * D + offs_d[None, :], o, mask=qm)
        tl.store(CL + idx, lse, mask=rmask)


@triton.jit
def _weights(lse, AXIS: tl.constexpr):
    """exp(lse_i - max) of states along AXIS of lse, their sum, whether it is 0 (every state
    empty: weights 0) and the merged lse (-inf then)."""
    m = tl.max(lse, AXIS)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2((lse - tl.expand_dims(m_use, AXIS)) * LOG2E)
    total = tl.sum(w, AXIS)
    empty = total == 0.0
    return w, total, empty, tl.where(empty, float("-inf"), m_use + tl.log(tl.where(empty, 1.0, total)))


@kernel(inputs=5, outputs=2)
def decode_combine_kernel(
    OP, LP, CO, CL, SEQ_UNITS,
    S, D, G, Hq, U, depth,
    O, LSE,
    BSPLIT: tl.constexpr, BDEPTH: tl.constexpr, BD: tl.constexpr, HAS_CHUNK: tl.constexpr,
):
    """Grid (B*Hq). Merges the S split partials of one (b, hq) row, OP [rows, S, D] and LP
    [rows, S] fp32, and with HAS_CHUNK its chunk-first partials (units SEQ_UNITS[b, :depth], -1
    past the last, of CO [Hkv, U, G, D] and CL [Hkv, U, G]) into O [rows, D] (O's dtype) and
    LSE [rows]."""
    r = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BSPLIT)
    smask = offs_s < S
    lse = tl.load(LP + r * S + offs_s, mask=smask, other=float("-inf"))
    if HAS_CHUNK:
        b = r // Hq
        hq = r % Hq
        offs_u = tl.arange(0, BDEPTH)
        unit = tl.load(SEQ_UNITS + b * depth + offs_u, mask=offs_u < depth, other=-1).to(tl.int64)
        umask = unit >= 0
        cidx = ((hq // G) * U + unit) * G + hq % G
        lse_c = tl.load(CL + cidx, mask=umask, other=float("-inf"))
        m = tl.maximum(tl.max(lse, 0), tl.max(lse_c, 0))
        m_use = tl.where(m == float("-inf"), 0.0, m)
        w = tl.math.exp2((lse - m_use) * LOG2E)
        wc = tl.math.exp2((lse_c - m_use) * LOG2E)
        total = tl.sum(w, 0) + tl.sum(wc, 0)
        empty = total == 0.0
        lse_out = tl.where(empty, float("-inf"), m_use + tl.log(tl.where(empty, 1.0, total)))
        scale_c = wc / tl.where(empty, 1.0, total)
    else:
        w, total, empty, lse_out = _weights(lse, 0)
    scale = w / tl.where(empty, 1.0, total)
    for d0 in range(0, D, BD):
        offs_d = d0 + tl.arange(0, BD)
        dmask = offs_d < D
        parts = tl.load(OP + (r * S + offs_s[:, None]) * D + offs_d[None, :], mask=smask[:, None] & dmask[None, :],
                        other=0.0)
        o = tl.sum(parts * scale[:, None], 0)
        if HAS_CHUNK:
            cparts = tl.load(CO + cidx[:, None] * D + offs_d[None, :], mask=umask[:, None] & dmask[None, :], other=0.0)
            o += tl.sum(cparts * scale_c[:, None], 0)
        tl.store(O + r * D + offs_d, o.to(O.dtype.element_ty), mask=dmask)
    tl.store(LSE + r, lse_out)


@kernel(inputs=4, outputs=2)
def merge_states_kernel(
    OA, LA, OB, LB,
    rows, D,
    O, LSE,
    ROWS: tl.constexpr, BD: tl.constexpr, ALIGN: tl.constexpr = 1,
):
    """Grid (row blocks). (o, lse) of two states per row, row-major: OA, OB [rows, D], LA,
    LB [rows]; O [rows, D] in O's dtype, LSE [rows] fp32. ALIGN divides D."""
    D = aligned(D, ALIGN)
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = r < rows
    two = tl.arange(0, 2)
    la = tl.load(LA + r, mask=rmask, other=float("-inf")).to(tl.float32)
    lb = tl.load(LB + r, mask=rmask, other=float("-inf")).to(tl.float32)
    lse = tl.where(two[None, :] == 0, la[:, None], lb[:, None])
    w, total, empty, lse_out = _weights(lse, 1)
    inv = 1.0 / tl.where(empty, 1.0, total)
    wa = tl.sum(tl.where(two[None, :] == 0, w, 0.0), 1) * inv
    wb = tl.sum(tl.where(two[None, :] == 1, w, 0.0), 1) * inv
    for d0 in range(0, D, BD):
        offs_d = d0 + tl.arange(0, BD)
        m = rmask[:, None] & (offs_d < D)[None, :]
        off = r[:, None] * D + offs_d[None, :]
        oa = tl.load(OA + off, mask=m, other=0.0).to(tl.float32)
        ob = tl.load(OB + off, mask=m, other=0.0).to(tl.float32)
        tl.store(O + off, (wa[:, None] * oa + wb[:, None] * ob).to(O.dtype.element_ty), mask=m)
    tl.store(LSE + r, lse_out, mask=rmask)
