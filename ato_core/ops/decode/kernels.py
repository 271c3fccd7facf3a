"""Decode attention kernels over a paged KV cache, and the merge of partial attentions.

The cache: k_cache, v_cache [num_blocks, BS, Hkv, D]; sequence b's token t lives in physical
block table[b, t // BS], row t % BS. Nothing is gathered in memory: a tile of BN token rows
reads each row at its own block's address (int64 offsets).

``decode_split_kernel`` (seq-first, flash-decoding): one program per (split of the token
range, b * Hkv + kv head). The G = Hq / Hkv query heads that share the kv head are one [GP, D]
tile (GP: G padded to the dot's 16 rows), so each K/V row is read once per kv head. An online
softmax over the split's tokens (base-2 scores, as flash attention) gives o and the natural-log
lse of the split; with one split they are the result, else fp32 partials that
``decode_combine_kernel`` merges. ``merge_states_kernel`` merges two attentions over disjoint
key sets (merge_attention_states).

Merge of states (o_i, lse_i): lse = log sum_i exp(lse_i), o = sum_i exp(lse_i - lse) o_i; a
state with lse = -inf (no key) weighs 0; all empty: o = 0, lse = -inf. NaN in either gives NaN.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _kv_rows(CACHE, TABLE_ROW, stn, t, valid, hk, offs_d, dmask, sn, st, sh, sd, num_blocks, BS: tl.constexpr,
             ALIGN: tl.constexpr):
    """Token rows t [BN] of one kv head of a paged cache, [BN, BD] (0 where not valid). The
    block ids are clamped to [0, num_blocks): a bad table (checked on the host where the
    values are there) never reads outside the cache. Row strides are multiples of ALIGN (so
    a row's loads vectorise)."""
    blk = tl.load(TABLE_ROW + (t // BS) * stn, mask=valid, other=0).to(tl.int64)
    blk = tl.minimum(tl.maximum(blk, 0), num_blocks - 1)
    rows = blk * aligned(sn, ALIGN) + (t % BS).to(tl.int64) * aligned(st, ALIGN)
    ptrs = CACHE + hk * aligned(sh, ALIGN) + rows[:, None] + offs_d[None, :] * sd
    return tl.load(ptrs, mask=valid[:, None] & dmask[None, :], other=0.0)


@kernel(inputs=5, outputs=2)
def decode_split_kernel(
    Q, K, V, TABLE, LENS,
    Hkv, G, D, num_blocks, max_len, split_len, qk_scale,
    sqb, sqh, sqd, skn, skt, skh, skd, svn, svt, svh, svd, stb, stn,
    O, LSE,
    GP: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BS: tl.constexpr, PARTIAL: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (splits, B*Hkv). The attention of the G query heads of kv head hk over tokens
    [split * split_len, +split_len) of sequence b (up to its length, clamped to the table's
    max_len). PARTIAL: o fp32 into O [B, Hq, splits, D] and lse into LSE [B, Hq, splits];
    else o in O's dtype into O [B, Hq, D] and lse into LSE [B, Hq]. qk_scale = softmax_scale
    * log2(e). D and the strides but the last are multiples of ALIGN."""
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
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, BD], tl.float32)
    start = split * split_len
    end = tl.minimum(start + split_len, n)
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
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    row = b * (Hkv * G) + hq  # b * Hq + hq
    if PARTIAL:
        idx = row * nsplit + split
        tl.store(O + idx[:, None] * D + offs_d[None, :], o, mask=gmask[:, None] & dmask[None, :])
        tl.store(LSE + idx, lse, mask=gmask)
    else:
        tl.store(O + row[:, None] * D + offs_d[None, :], o.to(O.dtype.element_ty), mask=gmask[:, None] & dmask[None, :])
        tl.store(LSE + row, lse, mask=gmask)


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


@kernel(inputs=2, outputs=2)
def decode_combine_kernel(
    OP, LP,
    S, D,
    O, LSE,
    BSPLIT: tl.constexpr, BD: tl.constexpr,
):
    """Grid (B*Hq). Merges the S split partials of one (b, hq) row: OP [rows, S, D], LP
    [rows, S] fp32 into O [rows, D] (O's dtype) and LSE [rows]."""
    r = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BSPLIT)
    smask = offs_s < S
    lse = tl.load(LP + r * S + offs_s, mask=smask, other=float("-inf"))
    w, total, empty, lse_out = _weights(lse, 0)
    scale = w / tl.where(empty, 1.0, total)
    for d0 in range(0, D, BD):
        offs_d = d0 + tl.arange(0, BD)
        dmask = offs_d < D
        parts = tl.load(OP + (r * S + offs_s[:, None]) * D + offs_d[None, :], mask=smask[:, None] & dmask[None, :],
                        other=0.0)
        tl.store(O + r * D + offs_d, tl.sum(parts * scale[:, None], 0).to(O.dtype.element_ty), mask=dmask)
    tl.store(LSE + r, lse_out)


@kernel(inputs=4, outputs=2)
def merge_states_kernel(
    OA, LA, OB, LB,
    rows, D,
    O, LSE,
    ROWS: tl.constexpr, BD: tl.constexpr,
):
    """Grid (row blocks). (o, lse) of two states per row, row-major: OA, OB [rows, D], LA,
    LB [rows]; O [rows, D] in O's dtype, LSE [rows] fp32."""
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
