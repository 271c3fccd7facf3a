"""CAB attention's kernels: Max-L2 coarsening and its backward (first), block-sparse attention
(the lists, forward, dK/dV, dQ), the curvature block mask (scores, selection); each section
opens with its own notes.

Max-L2 coarsening.

x [B, H, N, D] (any strides; the row strides multiples of ALIGN); block m of a row (b, h) is
tokens [m * BLOCK, (m + 1) * BLOCK) (the last one partial). The block's representative is its
token of largest L2 norm, the first on ties; x_coarse [B, H, M, D] takes that token's row and
index [B, H, M] int32 its position n. One pass over x: each tile of ROWS tokens is loaded once
(evict_first: no other program reads it) and its squared norms summed in fp32; the winner's
row is read again at the end (from cache). On Hopper, hopper.max_l2_coarsen_hopper_kernel runs
the same per-tile math (_tile_winner, _beats) over a TMA ring.

No overflow or underflow, whatever the magnitude: a tile whose largest squared norm is infinite
or below SMALL is summed again scaled by 2^k, the power of two that brings its largest finite
|x| into [1, 2) (exact: the squares are those of x, shifted), so its squared norms lie in
[0, 4 D] and the winner's in [1, 4 D]; two tiles' winners compare as s_a 2^(-2 k_a) against
s_b 2^(-2 k_b) (k = 0 unscaled), the factor of the larger-k one a power of two <= 1. A
token with a NaN has a NaN norm, the largest (as argmax in torch, NumPy and JAX; the first such
token wins); one with an infinity (and no NaN) the next largest.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned


# Below this largest squared norm of a tile, its squares may have lost bits to underflow.
SMALL = tl.constexpr(2.0 ** -60)


@triton.jit
def _pow2(e):
    """2^e (fp32, exact) of integer tensors or scalars e in [-126, 127]."""
    return ((e + 127).to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _down(e):
    """2^-e for integer e >= 0 (0 past 2^-126: a tile that much smaller cannot win)."""
    return tl.where(e > 126, 0.0, _pow2(-tl.minimum(e, 126)))


@triton.jit
def _top_row(s, offs_r, LOW: tl.constexpr):
    """(i, s[i]) of the largest squared norm s [ROWS] (-1 for rows outside the block; the first
    NaN if any, as argmax), the first on ties: one max over (the norm's bits, LOW - row) as int64
    keys (the bits of norms >= 0 and of -1 order as the values; a NaN as 0x7FFFFFFF, above +inf)."""
    bits = tl.where(s != s, 0x7FFFFFFF, s.to(tl.int32, bitcast=True))
    key = tl.max((bits.to(tl.int64) << 32) | (LOW - offs_r).to(tl.int64), 0)
    return LOW - (key & 0xFFFFFFFF).to(tl.int32), (key >> 32).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _tile_winner(x, nmask, offs_r, ROWS: tl.constexpr, KEYS: tl.constexpr):
    """A tile's candidate: (i, s, k) of x [ROWS, BD] (fp32; rows outside the block masked off by
    nmask): its row i of the largest squared norm (the first on ties; the first NaN's, if any),
    that norm s, summed scaled by 2^k (0, or the rescale of the module notes). KEYS: by _top_row
    (the Gluon kernel), else by separate reductions (the maximum, the first NaN, the first row at
    the maximum), which take fewer registers: the keys cost the portable kernel a program an SM
    (results NVIDIA_H200-block_sparse-sweep.txt 44)."""
    s = tl.where(nmask, tl.sum(x * x, 1), -1.0)
    if KEYS:
        i, top = _top_row(s, offs_r, ROWS)
    else:
        top = tl.max(tl.where(s == s, s, -1.0), 0)
    k = tl.cast(0, tl.int32)
    if (top == float("inf")) | (top < SMALL):  # a square may have overflowed or underflowed: rescale
        a = tl.abs(x)
        scale = tl.max(tl.max(tl.where(a < float("inf"), a, 0.0), 1), 0)  # largest finite |x|
        k = tl.where(scale > 0.0, -tl.floor(tl.math.log2(tl.where(scale > 0.0, scale, 1.0))), 0.0).to(tl.int32)
        y = x * _pow2(k // 2) * _pow2(k - k // 2)
        s = tl.where(nmask, tl.sum(y * y, 1), -1.0)
        if KEYS:
            i, top = _top_row(s, offs_r, ROWS)
    if not KEYS:
        nan = s != s
        i = tl.where(tl.max(nan.to(tl.int32), 0) > 0, tl.argmax(nan.to(tl.int32), 0, tie_break_left=True),
                     tl.argmax(tl.where(nan, -1.0, s), 0, tie_break_left=True))
        top = tl.sum(tl.where(offs_r == i, s, 0.0), 0)
    return i, top, k


@triton.jit
def _beats(sc, k, best_s, best_k):
    """Whether a tile's candidate (sc, k: _tile_winner's) beats the best of the block's earlier
    tiles (best_s, best_k; best_s -1 for none), which wins ties."""
    kmin = tl.minimum(k, best_k)
    infinite = (sc == float("inf")) | (best_s == float("inf"))
    finer = sc * _down(2 * (k - kmin)) > best_s * _down(2 * (best_k - kmin))
    return (best_s == best_s) & ((sc != sc) | tl.where(infinite, sc > best_s, finer))


@kernel(inputs=1, outputs=2)
def max_l2_coarsen_kernel(
    X,
    H, N, D, M, sxb, sxh, sxn, sxd,
    XC, IDX,
    BLOCK: tl.constexpr, ROWS: tl.constexpr, BD: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H*M): block m of row (b, h). XC [B, H, M, D] (x's dtype), IDX [B, H, M] int32."""
    pid = tl.program_id(0)
    m = pid % M
    bh = (pid // M).to(tl.int64)
    b = bh // H
    h = bh % H
    D = aligned(D, ALIGN)
    offs_d = tl.arange(0, BD)
    offs_r = tl.arange(0, ROWS)
    dmask = offs_d < D
    base = X + b * aligned(sxb, ALIGN) + h * aligned(sxh, ALIGN)
    best_s = -1.0  # no token yet
    best_k = 0
    best_idx = m * BLOCK
    for r0 in tl.static_range(0, BLOCK, ROWS):
        n = m * BLOCK + r0 + offs_r
        nmask = n < N
        x = tl.load(base + n.to(tl.int64)[:, None] * aligned(sxn, ALIGN) + offs_d[None, :] * sxd,
                    mask=nmask[:, None] & dmask[None, :], other=0.0, eviction_policy="evict_first").to(tl.float32)
        i, sc, k = _tile_winner(x, nmask, offs_r, ROWS, False)
        better = _beats(sc, k, best_s, best_k)
        best_s = tl.where(better, sc, best_s)
        best_k = tl.where(better, k, best_k)
        best_idx = tl.where(better, m * BLOCK + r0 + i, best_idx)
    # the winner's row, read again (from cache: this program has just loaded it)
    row = tl.load(base + best_idx.to(tl.int64) * aligned(sxn, ALIGN) + offs_d * sxd, mask=dmask)
    out = bh * M + m
    tl.store(XC + out * D + offs_d, row, mask=dmask)
    tl.store(IDX + out, best_idx)


@kernel(inputs=2, outputs=1)
def max_l2_coarsen_bwd_kernel(
    DXC, IDX,
    N, D, M,
    DX,
    BLOCK: tl.constexpr, ROWS: tl.constexpr, BD: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H*M): dx of block m of row (b, h), DX [B, H, N, D] row-major: the cotangent
    DXC [B, H, M, D] (row-major) at the selected token IDX [B, H, M], zeros elsewhere."""
    pid = tl.program_id(0)
    m = pid % M
    bh = (pid // M).to(tl.int64)
    D = aligned(D, ALIGN)
    offs_d = tl.arange(0, BD)
    offs_r = tl.arange(0, ROWS)
    dmask = offs_d < D
    sel = tl.load(IDX + bh * M + m)
    g = tl.load(DXC + (bh * M + m) * D + offs_d, mask=dmask, other=0.0)
    for r0 in tl.static_range(0, BLOCK, ROWS):
        n = m * BLOCK + r0 + offs_r
        dx = tl.where((n == sel)[:, None], g[None, :], 0.0)
        tl.store(DX + (bh * N + n.to(tl.int64))[:, None] * D + offs_d[None, :], dx.to(DX.dtype.element_ty),
                 mask=(n < N)[:, None] & dmask[None, :])


# -- block-sparse attention -------------------------------------------------------------
#
# Flash attention (flash_attention/kernels.py, whose tiles, masks and online softmax these
# reuse) restricted to the kept (query block, key block) pairs of a block mask [B, Hq, Mq, Mk]
# over blocks of BS tokens. ``bs_lists_kernel`` turns the mask into lists: for each query
# block the kept key blocks in order (the forward and dq), for each key block the query blocks
# that keep it (dk, dv); a pair that the causal rule hides entirely is left out. Each program
# then walks the tiles of its list's blocks as one loop, masking as flash attention's boundary
# blocks do (keys past Nk, the causal diagonal).

from ato_core.ops.flash_attention.kernels import (  # noqa: E402
    _dq_tile, _head_base, _load_block, _load_rows, _load_where, _query_tile, _seen_keys, _store_dq, _tile_ptrs,
    LN2)


@kernel(inputs=1, outputs=2)
def bs_lists_kernel(
    MASK,
    Mq, Mk, Nq, Nk, BS, smb, smh, smi, smj, H,
    LIST, COUNT,
    CHUNK: tl.constexpr, COLUMNS: tl.constexpr, CAUSAL: tl.constexpr,
):
    """Grid (B*H*Mq) (COLUMNS: (B*H*Mk)). Row i of head (b, h): its kept key blocks j, in
    order, into LIST [B*H*Mq, Mk] and their number into COUNT [B*H*Mq]; with COLUMNS, column j:
    the query blocks i that keep it, into LIST [B*H*Mk, Mq], COUNT [B*H*Mk]. CAUSAL: a pair
    (i, j) whose every key comes after every query's diagonal (j * BS > last query of i +
    Nk - Nq) is not kept."""
    pid = tl.program_id(0).to(tl.int64)
    if COLUMNS:
        line = pid % Mk
        bh = pid // Mk
        length = Mq
    else:
        line = pid % Mq
        bh = pid // Mq
        length = Mk
    base = MASK + (bh // H) * smb + (bh % H) * smh
    count = tl.program_id(0) * 0
    for c0 in range(0, length, CHUNK):
        other = c0 + tl.arange(0, CHUNK)
        if COLUMNS:
            i, j = other, line
            ptrs = base + j * smj + other.to(tl.int64) * smi
        else:
            i, j = line, other
            ptrs = base + i * smi + other.to(tl.int64) * smj
        keep = (other < length) & (tl.load(ptrs, mask=other < length, other=0).to(tl.int32) != 0)
        if CAUSAL:
            keep = keep & (j * BS <= tl.minimum(i * BS + BS, Nq) - 1 + Nk - Nq)
        pos = count + tl.cumsum(keep.to(tl.int32), 0) - 1
        tl.store(LIST + pid * length + pos, other, mask=keep)
        count += tl.sum(keep.to(tl.int32), 0)
    tl.store(COUNT + pid, count)


@triton.jit
def _listed_rows(LIST, entry_base, e, offs, n, BS: tl.constexpr, TILE: tl.constexpr):
    """Tile e of a list of blocks, tile e % (BS / TILE) of block LIST[entry_base + e // (BS /
    TILE)]: its first row, its rows (first + offs) and which of them are < n."""
    per: tl.constexpr = BS // TILE
    first = tl.load(LIST + entry_base + e // per) * BS + (e % per) * TILE
    rows = first + offs
    return first, rows, rows < n


@triton.jit
def _rows_at(ptrs, first, in_range, dmask, sn, ALIGN: tl.constexpr):
    """The [rows, BD] tile of ptrs (a tile at row 0) moved to row first; 0 where not in_range
    or past D."""
    return tl.load(ptrs + first.to(tl.int64) * aligned(sn, ALIGN), mask=in_range[:, None] & dmask[None, :], other=0.0)


@triton.jit
def _visible(keys, in_range, offs_m, shift, CAUSAL: tl.constexpr):
    """[queries, keys]: the keys in range and (CAUSAL) at or before each query's diagonal."""
    visible = in_range[None, :]
    if CAUSAL:
        visible = visible & (keys[None, :] <= offs_m[:, None] + shift)
    return visible


@triton.jit
def _needs_mask(j, first, Nk, shift, BS: tl.constexpr, CAUSAL: tl.constexpr):
    """Whether key block j holds a key past Nk or (CAUSAL) after the diagonal of query row first."""
    end = j * BS + BS
    needs = end > Nk
    if CAUSAL:
        needs = needs | (end - 1 > first + shift)
    return needs


@triton.jit
def _masked_tail(LIST, entry_base, count, first, Nk, shift, BS: tl.constexpr, CAUSAL: tl.constexpr):
    """How many of a row's count kept key blocks (LIST[entry_base:], in order) some query of a
    tile from row first (within one query block) must see masked. _needs_mask grows with j, so
    they are the last ones; at most two: the causal rule keeps no block past the query block's
    diagonal, and the last block (the one partial in Nk) comes last."""
    last = tl.load(LIST + entry_base + tl.maximum(count - 1, 0), mask=count >= 1, other=0)
    prev = tl.load(LIST + entry_base + tl.maximum(count - 2, 0), mask=count >= 2, other=0)
    tail = ((count >= 1) & _needs_mask(last, first, Nk, shift, BS, CAUSAL)).to(tl.int32)
    return tail + ((count >= 2) & _needs_mask(prev, first, Nk, shift, BS, CAUSAL)).to(tl.int32)


@triton.jit
def _fwd_tiles(acc, m_i, l_i, q, k_ptrs, v_ptrs, LIST, entry_base, e0, e1, offs_n, offs_m, seen_hi, Nk, shift, dmask,
               skn, svn, qk_scale, BS: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
               EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """The online-softmax update over tiles [e0, e1) of a row's list; MASK: keys past Nk and
    (CAUSAL) after a query's diagonal score -inf (without, every key is visible), and the values
    of keys below seen_hi alone read (no query row of the tile sees the others: flash_attention's
    _seen_keys)."""
    for e in range(e0, e1):
        start_n, keys, in_k = _listed_rows(LIST, entry_base, e, offs_n, Nk, BS, BLOCK_N)
        k = _load_rows(k_ptrs + start_n.to(tl.int64) * aligned(skn, ALIGN), keys, Nk, dmask, MASK, EVEN_D)
        v_tile = v_ptrs + start_n.to(tl.int64) * aligned(svn, ALIGN)
        if MASK:
            v = _load_where(v_tile, keys < seen_hi, dmask, EVEN_D)
        else:
            v = _load_rows(v_tile, keys, Nk, dmask, False, EVEN_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        if MASK:
            s = tl.where(_visible(keys, in_k, offs_m, shift, CAUSAL), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@kernel(inputs=5, outputs=2)
def bs_fwd_kernel(
    Q, K, V, LIST, COUNT,
    Hq, G, Nq, Nk, D, Mq, Mk, qk_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, LSE,
    BS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (query tiles, B*Hq). o and lse of BLOCK_M queries (within query block first // BS)
    over the kept key blocks of their row, as loops over their BLOCK_N-key tiles (so that the
    loads of one tile overlap the work on the last): the blocks every query sees whole
    unmasked, then the masked tail (_masked_tail). A query with no visible key: o = 0, lse =
    -inf."""
    bh, b, hq, hk, first, offs_r, offs_n, offs_d, dmask = _query_tile(Hq, G, D, BLOCK_M, BLOCK_N, BD, CAUSAL, ALIGN)
    offs_m = first + offs_r
    q = _load_block(Q, b, hq, sqb, sqh, sqn, sqd, first, offs_r, Nq, offs_d, dmask, EVEN_D, ALIGN)
    k_ptrs = _tile_ptrs(_head_base(K, b, hk, skb, skh, ALIGN), 0, offs_n, offs_d, skn, skd, ALIGN)
    v_ptrs = _tile_ptrs(_head_base(V, b, hk, svb, svh, ALIGN), 0, offs_n, offs_d, svn, svd, ALIGN)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BD], tl.float32)
    shift = Nk - Nq
    row = bh.to(tl.int64) * Mq + first // BS
    count = tl.load(COUNT + row)
    whole = (count - _masked_tail(LIST, row * Mk, count, first, Nk, shift, BS, CAUSAL)) * (BS // BLOCK_N)
    _, seen_hi = _seen_keys(first, BLOCK_M, Nq, Nk, shift, shift, CAUSAL, False)
    acc, m_i, l_i = _fwd_tiles(acc, m_i, l_i, q, k_ptrs, v_ptrs, LIST, row * Mk, 0, whole, offs_n, offs_m, seen_hi,
                               Nk, shift, dmask, skn, svn, qk_scale, BS, BLOCK_N, False, CAUSAL, EVEN_D, PRECISION,
                               ALIGN)
    acc, m_i, l_i = _fwd_tiles(acc, m_i, l_i, q, k_ptrs, v_ptrs, LIST, row * Mk, whole, count * (BS // BLOCK_N),
                               offs_n, offs_m, seen_hi, Nk, shift, dmask, skn, svn, qk_scale, BS, BLOCK_N, True, CAUSAL,
                               EVEN_D, PRECISION, ALIGN)
    empty = l_i == 0.0
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = _tile_ptrs(_head_base(O, b, hq, sob, soh, ALIGN), first, offs_r, offs_d, son, sod, ALIGN)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=(offs_m < Nq)[:, None] & dmask[None, :])
    tl.store(LSE + bh.to(tl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)


@triton.jit
def _kept_keys_end(LIST, COUNT, col0, Mk, Mq, G, BS: tl.constexpr, Nq, shift):
    """Causal: the key after the last one that some query of the blocks keeping a key block sees,
    over the G query heads whose dk a program sums (col0: head 0's column, the others Mk apart;
    the column lists are in order, so each head's last block's diagonal). No query sees the keys
    from there on, so the dK / dV kernels read their values as 0."""
    seen_hi = (col0 * 0).to(tl.int32)
    for g in range(0, G):
        col = col0 + g * Mk
        count = tl.load(COUNT + col)
        last = tl.load(LIST + col * Mq + tl.maximum(count - 1, 0))
        seen_hi = tl.maximum(seen_hi, tl.where(count > 0, tl.minimum((last + 1) * BS, Nq) + shift, 0))
    return seen_hi


@kernel(inputs=8, outputs=2)
def bs_bwd_dkdv_kernel(
    Q, K, V, DO, LSE2, DELTA, LIST, COUNT,
    Hkv, G, Nq, Nk, D, Mq, Mk, qk_scale, softmax_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd,
    DK, DV,
    BS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (key tiles, B*Hkv). dk, dv of BLOCK_N keys (within key block first // BS), summed
    over the G query heads of the kv head in order, each over the BLOCK_M-query tiles of the
    query blocks that keep the key block (LIST, COUNT: the column lists)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    D = aligned(D, ALIGN)
    b = (bh // Hkv).to(tl.int64)
    hk = (bh % Hkv).to(tl.int64)
    first = pid_n * BLOCK_N
    offs_c = tl.arange(0, BLOCK_N)
    offs_n = first + offs_c
    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BD)
    dmask = offs_d < D
    k = _load_block(K, b, hk, skb, skh, skn, skd, first, offs_c, Nk, offs_d, dmask, EVEN_D, ALIGN)
    v = _load_block(V, b, hk, svb, svh, svn, svd, first, offs_c, Nk, offs_d, dmask, EVEN_D, ALIGN)
    dk = tl.zeros([BLOCK_N, BD], tl.float32)
    dv = tl.zeros([BLOCK_N, BD], tl.float32)
    shift = Nk - Nq
    if CAUSAL:  # p = 0 times a NaN value's dp is NaN
        seen_hi = _kept_keys_end(LIST, COUNT, (b * Hkv * G + hk * G) * Mk + first // BS, Mk, Mq, G, BS, Nq, shift)
        v = tl.where((offs_n < seen_hi)[:, None], v, 0.0)
    for g in range(0, G):
        hq = hk * G + g
        q_ptrs = _tile_ptrs(_head_base(Q, b, hq, sqb, sqh, ALIGN), 0, offs_r, offs_d, sqn, sqd, ALIGN)
        do_ptrs = _tile_ptrs(_head_base(DO, b, hq, sdb, sdh, ALIGN), 0, offs_r, offs_d, sdn, sdd, ALIGN)
        rows_base = (b * Hkv * G + hq) * Nq
        col = (b * Hkv * G + hq) * Mk + first // BS
        for e in range(0, tl.load(COUNT + col) * (BS // BLOCK_M)):
            start_m, rows, in_q = _listed_rows(LIST, col * Mq, e, offs_r, Nq, BS, BLOCK_M)
            q = _rows_at(q_ptrs, start_m, in_q, dmask, sqn, ALIGN)
            lse2 = tl.load(LSE2 + rows_base + rows, mask=in_q, other=float("inf"))
            sT = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale
            pT = tl.math.exp2(sT - lse2[None, :])
            if CAUSAL:
                pT = tl.where(offs_n[:, None] <= rows[None, :] + shift, pT, 0.0)
            do = _rows_at(do_ptrs, start_m, in_q, dmask, sdn, ALIGN)
            dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=PRECISION)
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            delta = tl.load(DELTA + rows_base + rows, mask=in_q, other=0.0)
            dsT = pT * (dpT - delta[None, :])
            dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=PRECISION)
    smask = (offs_n < Nk)[:, None] & dmask[None, :]
    dk_ptrs = _tile_ptrs(_head_base(DK, b, hk, sgkb, sgkh, ALIGN), first, offs_c, offs_d, sgkn, sgkd, ALIGN)
    dv_ptrs = _tile_ptrs(_head_base(DV, b, hk, sgvb, sgvh, ALIGN), first, offs_c, offs_d, sgvn, sgvd, ALIGN)
    tl.store(dk_ptrs, (dk * softmax_scale).to(DK.dtype.element_ty), mask=smask)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=smask)


@triton.jit
def _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, LIST, entry_base, e0, e1, offs_n, offs_m, seen_hi, Nk, shift,
              dmask, skn, svn, qk_scale, BS: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
              CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr):
    """dq over tiles [e0, e1) of a row's list, masked as in _fwd_tiles."""
    for e in range(e0, e1):
        start_n, keys, in_k = _listed_rows(LIST, entry_base, e, offs_n, Nk, BS, BLOCK_N)
        k_tile = k_ptrs + start_n.to(tl.int64) * aligned(skn, ALIGN)
        v_tile = v_ptrs + start_n.to(tl.int64) * aligned(svn, ALIGN)
        if MASK:  # keys past seen_hi read as 0: ds = 0 times a NaN key is NaN
            k = _load_where(k_tile, keys < seen_hi, dmask, EVEN_D)
            v = _load_where(v_tile, keys < seen_hi, dmask, EVEN_D)
        else:
            k = _load_rows(k_tile, keys, Nk, dmask, False, EVEN_D)
            v = _load_rows(v_tile, keys, Nk, dmask, False, EVEN_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        p = tl.math.exp2(s - lse2[:, None])
        if MASK:
            p = tl.where(_visible(keys, in_k, offs_m, shift, CAUSAL), p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    return dq


@kernel(inputs=8, outputs=1)
def bs_bwd_dq_kernel(
    Q, K, V, DO, LSE2, DELTA, LIST, COUNT,
    Hq, G, Nq, Nk, D, Mq, Mk, qk_scale, softmax_scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    DQ,
    BS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (query tiles, B*Hq). dq of BLOCK_M queries over the key tiles of the kept key
    blocks of their row (unmasked, then the masked tail, as in bs_fwd_kernel)."""
    bh, b, hq, first, offs_r, offs_n, offs_d, dmask, offs_m, mmask, q, do, lse2, delta, k_ptrs, v_ptrs = _dq_tile(
        Q, K, V, DO, LSE2, DELTA, Hq, G, Nq, D, sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
        sdb, sdh, sdn, sdd, BLOCK_M, BLOCK_N, BD, CAUSAL, EVEN_D, ALIGN)
    dq = tl.zeros([BLOCK_M, BD], tl.float32)
    shift = Nk - Nq
    row = bh.to(tl.int64) * Mq + first // BS
    count = tl.load(COUNT + row)
    whole = (count - _masked_tail(LIST, row * Mk, count, first, Nk, shift, BS, CAUSAL)) * (BS // BLOCK_N)
    _, seen_hi = _seen_keys(first, BLOCK_M, Nq, Nk, shift, shift, CAUSAL, False)
    dq = _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, LIST, row * Mk, 0, whole, offs_n, offs_m, seen_hi, Nk, shift,
                   dmask, skn, svn, qk_scale, BS, BLOCK_N, False, CAUSAL, EVEN_D, PRECISION, ALIGN)
    dq = _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, LIST, row * Mk, whole, count * (BS // BLOCK_N), offs_n,
                   offs_m, seen_hi, Nk, shift, dmask, skn, svn, qk_scale, BS, BLOCK_N, True, CAUSAL, EVEN_D, PRECISION,
                   ALIGN)
    _store_dq(DQ, dq, b, hq, first, offs_r, offs_d, mmask, dmask, softmax_scale, sgb, sgh, sgn, sgd, ALIGN)


# -- curvature block mask (CAB) ---------------------------------------------------------


@triton.jit
def _head_range(LO, HI, bh, T, BT: tl.constexpr):
    """The min and max of A over a head from the row tiles' LO, HI [B*Hq, T], and max - min."""
    offs_t = tl.arange(0, BT)
    lo = tl.min(tl.load(LO + bh * T + offs_t, mask=offs_t < T, other=float("inf")))
    hi = tl.max(tl.load(HI + bh * T + offs_t, mask=offs_t < T, other=float("-inf")))
    return lo, hi - lo


@triton.jit
def _finite(a):
    return tl.abs(a) < float("inf")


@triton.jit
def _normalised(a, lo, spread):
    """(a - lo) / spread, 0 where spread is not positive or a is not finite (An @ An's terms)."""
    return tl.where((spread > 0.0) & _finite(a), (a - lo) / tl.where(spread > 0.0, spread, 1.0), 0.0)


@triton.jit
def _coarse_rows(X, base, r, M, D, BD: tl.constexpr):
    """Rows r ([R, BD], 0 past M and D) of a coarse [M, D] row-major head at X + base."""
    offs_d = tl.arange(0, BD)
    return tl.load(X + base + r[:, None] * D + offs_d[None, :], mask=(r < M)[:, None] & (offs_d < D)[None, :],
                   other=0.0)


@triton.jit
def _scores(qi, KC, kbase, j, M, D, scale, BD: tl.constexpr, PRECISION: tl.constexpr):
    """A's tile relu(qi kc_j^T * scale) (fp32; a score that is not finite, NaN or ±inf, kept
    as it is) of query rows qi against key rows j. Every kernel that needs A computes it here on
    the same tile shapes, so all see the same bits."""
    s = tl.dot(qi, tl.trans(_coarse_rows(KC, kbase, j, M, D, BD)), input_precision=PRECISION) * scale
    return tl.where((s <= 0.0) & (s > float("-inf")), 0.0, s)


@triton.jit
def _head_bases(bh, Hq, G, M, D):
    """The offsets of head bh's rows in QC [B, Hq, M, D] and of its kv head's in KC [B, Hq / G, M, D]."""
    b = bh // Hq
    return bh * M * D, (b * (Hq // G) + (bh % Hq) // G) * M * D


@kernel(inputs=2, outputs=2)
def cab_scores_kernel(
    QC, KC,
    Hq, G, M, D, scale,
    LO, HI,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (T = cdiv(M, BM), B*Hq): the min and max over rows [t BM, (t + 1) BM) of one head's
    coarse graph A = relu(qc kc^T * scale), its finite entries, into LO, HI [B*Hq, T] (+inf,
    -inf where none); A itself is not stored (the kernels after recompute their tiles).
    QC [B, Hq, M, D], KC [B, Hkv, M, D] (row-major, kv head hq // G). ALIGN divides M and D."""
    M = aligned(M, ALIGN)
    D = aligned(D, ALIGN)
    t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    qbase, kbase = _head_bases(bh, Hq, G, M, D)
    i = t * BM + tl.arange(0, BM)
    qi = _coarse_rows(QC, qbase, i, M, D, BD)
    lo = tl.full([], float("inf"), tl.float32)
    hi = tl.full([], float("-inf"), tl.float32)
    for j0 in range(0, M, BN):
        j = j0 + tl.arange(0, BN)
        a = _scores(qi, KC, kbase, j, M, D, scale, BD, PRECISION)
        finite = (i < M)[:, None] & (j < M)[None, :] & _finite(a)
        lo = tl.minimum(lo, tl.min(tl.where(finite, a, float("inf"))))
        hi = tl.maximum(hi, tl.max(tl.where(finite, a, float("-inf"))))
    tl.store(LO + bh * tl.num_programs(0) + t, lo)
    tl.store(HI + bh * tl.num_programs(0) + t, hi)


@kernel(inputs=4, outputs=2)
def cab_split_kernel(
    QC, KC, LO, HI,
    Hq, G, M, D, scale, T,
    AH, AL,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BT: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """Grid (T, B*Hq): An = (A - min) / (max - min) over the head's finite A (0 where they are
    equal, and where A is not finite; the min and max of LO, HI [B*Hq, T]), A's tiles
    recomputed as cab_scores_kernel's, split into bf16 AH + AL [B*Hq, M, M] (AH = An rounded,
    AL = the rest rounded: 17 bits of An) for cab_curvature_kernel's tensor-core dots. ALIGN
    divides M and D."""
    M = aligned(M, ALIGN)
    D = aligned(D, ALIGN)
    bh = tl.program_id(1).to(tl.int64)
    qbase, kbase = _head_bases(bh, Hq, G, M, D)
    lo, spread = _head_range(LO, HI, bh, T, BT)
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    qi = _coarse_rows(QC, qbase, i, M, D, BD)
    base = bh * M * M
    for j0 in range(0, M, BN):
        j = j0 + tl.arange(0, BN)
        valid = (i < M)[:, None] & (j < M)[None, :]
        at = base + i[:, None] * M + j[None, :]
        an = _normalised(_scores(qi, KC, kbase, j, M, D, scale, BD, PRECISION), lo, spread)
        ah = an.to(tl.bfloat16)
        tl.store(AH + at, ah, mask=valid)
        tl.store(AL + at, (an - ah.to(tl.float32)).to(tl.bfloat16), mask=valid)


@kernel(inputs=6, outputs=1)
def cab_curvature_kernel(
    QC, KC, LO, HI, AH, AL,
    Hq, G, M, D, scale, T, lam,
    F,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr, BT: tl.constexpr,
    PRECISION: tl.constexpr, CAUSAL: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (cdiv(M, BM), cdiv(M, BN), B*Hq): a tile of F = An - lam * (An @ An) / M (F [B*Hq,
    M, M] fp32; An's tile recomputed from A's as in cab_split_kernel, on its tile shapes: the
    same bits), NaN where A is not finite. An @ An as AH AH + AH AL + AL AH (bf16 tensor-core
    dots, fp32 sums): each product of An's within 2^-16 of its own size. CAUSAL: tiles wholly above the diagonal
    (never read) are skipped. ALIGN divides M and D."""
    M = aligned(M, ALIGN)
    D = aligned(D, ALIGN)
    bh = tl.program_id(2).to(tl.int64)
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    base = bh * M * M
    k_end = M
    if CAUSAL:
        k_end = tl.where(tl.program_id(1) * BN < (tl.program_id(0) + 1) * BM, M, 0)
    r = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, k_end, BK):
        kk = k0 + offs_k
        ik = base + i[:, None] * M + kk[None, :]
        kj = base + kk[:, None] * M + j[None, :]
        mik = (i < M)[:, None] & (kk < M)[None, :]
        mkj = (kk < M)[:, None] & (j < M)[None, :]
        h_ik = tl.load(AH + ik, mask=mik, other=0.0)
        h_kj = tl.load(AH + kj, mask=mkj, other=0.0)
        r = tl.dot(h_ik, h_kj, r)
        r = tl.dot(h_ik, tl.load(AL + kj, mask=mkj, other=0.0), r)
        r = tl.dot(tl.load(AL + ik, mask=mik, other=0.0), h_kj, r)
    if k_end > 0:
        qbase, kbase = _head_bases(bh, Hq, G, M, D)
        lo, spread = _head_range(LO, HI, bh, T, BT)
        a = _scores(_coarse_rows(QC, qbase, i, M, D, BD), KC, kbase, j, M, D, scale, BD, PRECISION)
        f = tl.where(_finite(a), _normalised(a, lo, spread) - lam * (r / M), float("nan"))
        valid = (i < M)[:, None] & (j < M)[None, :]
        tl.store(F + base + i[:, None] * M + j[None, :], f, mask=valid)


@triton.jit
def _select_rows(F, MASK, heads, M, I0, IN, r0, keep_bits, local_blocks, BR: tl.constexpr, BM: tl.constexpr,
                 CAUSAL: tl.constexpr):
    """cab_select_kernel's rows r0 .. r0 + BR of the query blocks [I0, I0 + IN) of every head
    (row r: head r // IN, block I0 + r % IN), over the first BM key blocks."""
    r = r0 + tl.arange(0, BR)
    valid = r < heads * IN
    row = (r // IN) * M + I0 + r % IN
    i = (I0 + r % IN)[:, None]
    j = tl.arange(0, BM)[None, :]
    inrow = valid[:, None] & (j < M)
    if CAUSAL:
        allowed = inrow & (j <= i)
        n_allowed = i + 1
    else:
        allowed = inrow
        n_allowed = i * 0 + M
    keep = keep_bits.to(tl.int64).to(tl.float64, bitcast=True)
    n_keep = tl.math.ceil(keep * n_allowed.to(tl.float64)).to(tl.int32)  # [BR, 1]
    n_keep = tl.where(valid[:, None], n_keep, 0)
    f = tl.load(F + row[:, None] * M + j, mask=allowed, other=0.0) + 0.0  # -0.0 -> +0.0
    # a NaN of either sign as 0x7FC00000, above +inf: NaN ranks highest (kept in any case below),
    # the same on every platform
    bits = tl.where(f != f, 0x7FC00000, f.to(tl.int32, bitcast=True))
    # F's order as int32 (its bits made monotonic); the n_keep-th largest, t, found bit by bit
    # from the top as if unsigned (u = mono + 2^31): t starts at u = 0 (mono -2^31), and
    # setting bit b of u flips bit b of mono. Done when every row has exactly n_keep values
    # >= t (count; rows keeping none count as done): later bits would not change that set.
    # A value not allowed is -2^31 (u = 0), below every candidate (each has a bit of u set), so
    # a pass counts without the mask (no allowed value maps there: those bits are a NaN's).
    mono = tl.where(allowed, tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF), -2147483648)
    t = tl.full([BR, 1], -2147483648, tl.int32)
    count = tl.where(n_keep > 0, tl.sum(allowed.to(tl.int32), 1, keep_dims=True), 0)
    b = 0
    while (b < 32) & (tl.max(tl.where(count != n_keep, 1, 0)) > 0):
        cand = t ^ (tl.full([BR, 1], 1, tl.int32) << (31 - b))
        above = tl.sum((mono >= cand).to(tl.int32), 1, keep_dims=True)
        take = (above >= n_keep) & (n_keep > 0)
        t = tl.where(take, cand, t)
        count = tl.where(take, above, count)
        b += 1
    above = allowed & (mono > t)
    need = n_keep - tl.sum(above.to(tl.int32), 1, keep_dims=True)
    at_cut = allowed & (mono == t)
    chosen = (n_keep > 0) & (above | (at_cut & (tl.cumsum(at_cut.to(tl.int32), 1) <= need)))
    chosen = chosen | (allowed & (f != f))  # every NaN kept, past n_keep too
    local = allowed & (j <= i) & (j > i - local_blocks)
    tl.store(MASK + row[:, None] * M + j, chosen | local | (j == 0), mask=inrow)
    for j0 in range(BM, M, BM):  # (causal rows kept within BM < M) the rest of the row
        tl.store(MASK + row[:, None] * M + j0 + j, False, mask=valid[:, None] & (j0 + j < M))


@kernel(inputs=1, outputs=1)
def cab_select_kernel(
    F,
    heads, M, HALF_PROGRAMS, keep_bits, local_blocks,
    MASK,
    BR: tl.constexpr, BM: tl.constexpr, CAUSAL: tl.constexpr, HALF: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (programs): BR query blocks a program (rows of F [heads * M, M], row = head * M +
    block i). Each keeps, of its allowed key blocks (CAUSAL: j <= i; else all), the ceil(keep *
    allowed) with the highest F (ties: the lower j) and every one whose F is NaN, the
    local_blocks blocks ending at i (i, i - 1, ...) and block 0, into MASK [heads * M, M]
    (bool). keep_bits: keep's float64 bits (so that ceil(keep * allowed) is Python's, exactly).
    The cut: a radix search over F's bits made monotonic (at most 32 counting passes), the ties
    at the cut taken by a running count.
    HALF (causal, BM = next_pow2(M)): the first HALF_PROGRAMS programs take the blocks i <
    BM / 2, which keep only blocks below BM / 2, 2 BR at a time on tiles BM / 2 wide; the
    rest the blocks from BM / 2 on. ALIGN divides M."""
    M = aligned(M, ALIGN)
    pid = tl.program_id(0).to(tl.int64)
    if HALF:
        if pid < HALF_PROGRAMS:
            _select_rows(F, MASK, heads, M, 0, BM // 2, pid * (2 * BR), keep_bits, local_blocks, 2 * BR, BM // 2,
                         CAUSAL)
        else:
            _select_rows(F, MASK, heads, M, BM // 2, M - BM // 2, (pid - HALF_PROGRAMS) * BR, keep_bits,
                         local_blocks, BR, BM, CAUSAL)
    else:
        _select_rows(F, MASK, heads, M, 0, M, pid * BR, keep_bits, local_blocks, BR, BM, CAUSAL)
