"""The flash forward on Hopper (sm_90), in Gluon: what the tl front end cannot express.

Triton's tl front end waits for every wgmma before the next instruction; this kernel keeps
the QK wgmma of key tile j in flight beside the PV wgmma of tile j - 1 and runs the softmax
of tile j under the PV (as FlashAttention 3's intra-warpgroup overlap). Warp-specialised:
a 4-warp producer fills a ring of STAGES K/V tiles by cp.async (pointers, no TMA
descriptors: jax-triton launches it as any kernel), synchronised by mbarriers; two consumer
warpgroups take 64 query rows each, at CONSUMER_REGS registers a thread (setmaxnreg).

The math is kernels.fa_fwd_kernel's with no option but a window and padding lengths: GQA
(kv head hq // G), causal aligned to the bottom right (query i sees key j iff j <= i + Nk -
Nq), a window (WINDOW: tiles below it never visited), q / kv lengths, any Nq, Nk >= 1, o and the natural-log lse
[B, Hq, Nq] (a query that sees no key: o = 0, lse = -inf). The row maximum is taken on the
raw scores and p = 2^(s * qk_scale - m * qk_scale) in one FMA a score; only key tiles that
cross the causal diagonal, a window edge or Nk are masked. fp16 / bf16, D = 128; b, h
and n strides multiples of 8 elements (16 bytes, cp.async's width), unit d strides (the
plan checks: plans._hopper_forward). Benchmarks: results README, "flash_attention on Hopper".
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier,
                                                             warpgroup_mma, warpgroup_mma_wait)

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned

LN2 = gl.constexpr(0.6931471805599453)
ROWS = gl.constexpr(64)  # query rows of a consumer warpgroup (two a program)


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, Nk, lo_shift, hi_shift, CAUSAL: gl.constexpr,
             WINDOW: gl.constexpr, MASK: gl.constexpr):
    """The online-softmax update of a raw score tile: (p, m, l, alpha). MASK: keys past Nk,
    past i + hi_shift (CAUSAL, WINDOW) or before i + lo_shift (WINDOW) score -inf, and a row
    with no visible key so far gets p = 0 and alpha = 0 rather than NaN (its m stays -inf)."""
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
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_s = gl.where(m_new == float("-inf"), 0.0, m_new * qk_scale)
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_s = m_new * qk_scale
    p = gl.exp2(gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), -m_s[:, None]))
    alpha = gl.exp2(m_i * qk_scale - m_s)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _step(q_smem, k_bufs, v_bufs, ready, empty, j, lo, p, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk,
          lo_shift, hi_shift, p_layout: gl.constexpr, o_layout: gl.constexpr, CAUSAL: gl.constexpr,
          WINDOW: gl.constexpr, MASK: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The program's j-th key tile (tile lo + j): QK_j in flight with PV_{j-1} (p of tile j - 1),
    softmax of tile j under PV_{j-1}; frees tile j - 1's slot."""
    slot = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    fence_async_shared()
    p_op = gl.convert_layout(p.to(v_bufs.dtype), p_layout)
    s_tok = warpgroup_mma(q_smem, k_bufs.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    o_tok = warpgroup_mma(p_op, v_bufs.index(prev), acc, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, (lo + j) * BLOCK_N, offs_sn, Nk, lo_shift, hi_shift,
                                  CAUSAL, WINDOW, MASK)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(empty.index(prev), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return p, m_i, l_i, acc


@gluon.jit
def _attend(q_smem, k_bufs, v_bufs, ready, empty, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, Nk, lo_shift,
            hi_shift, tiles, p_layout: gl.constexpr, o_layout: gl.constexpr, CAUSAL: gl.constexpr,
            WINDOW: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """(m, l, acc) over key tiles [lo, hi) (at least one): masked but for [full_lo, full_hi)
    (tiles = (lo, full_lo, full_hi, hi), _key_tiles)."""
    lo, full_lo, full_hi, hi = tiles
    mbarrier.wait(ready.index(0), 0)
    fence_async_shared()
    s_tok = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, lo * BLOCK_N, offs_sn, Nk, lo_shift, hi_shift, CAUSAL,
                                  WINDOW, True)
    if WINDOW:  # the tiles that cross the window's lower edge
        for j in range(1, full_lo - lo):
            p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, j, lo, p, m_i, l_i, acc, s_zero, qk_scale,
                                     offs_m, offs_sn, Nk, lo_shift, hi_shift, p_layout, o_layout, CAUSAL, WINDOW, True,
                                     BLOCK_N, STAGES)
    for j in range(gl.maximum(full_lo - lo, 1), full_hi - lo):
        p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, j, lo, p, m_i, l_i, acc, s_zero, qk_scale,
                                 offs_m, offs_sn, Nk, lo_shift, hi_shift, p_layout, o_layout, CAUSAL, WINDOW, False,
                                 BLOCK_N, STAGES)
    for j in range(gl.maximum(full_hi - lo, 1), hi - lo):
        p, m_i, l_i, acc = _step(q_smem, k_bufs, v_bufs, ready, empty, j, lo, p, m_i, l_i, acc, s_zero, qk_scale,
                                 offs_m, offs_sn, Nk, lo_shift, hi_shift, p_layout, o_layout, CAUSAL, WINDOW, True,
                                 BLOCK_N, STAGES)
    last = (hi - lo - 1) % STAGES
    o_tok = warpgroup_mma(gl.convert_layout(p.to(v_bufs.dtype), p_layout), v_bufs.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(empty.index(last), count=1)
    return m_i, l_i, acc


@gluon.jit
def _consumer(q_smem, k_bufs, v_bufs, ready, empty, O, LSE, o_off, lse_off, son, Nq, q_len, Nk, lo_shift, hi_shift,
              qk_scale, start_m, tiles, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, Q_LENS: gl.constexpr,
              BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr):
    """One warpgroup: query rows [start_m, start_m + ROWS); writes their o and lse (Q_LENS: rows
    from q_len on get o = 0, lse = -inf). Nk: the keys of this batch."""
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
    if tiles[3] > tiles[0]:
        m_i, l_i, acc = _attend(q_smem, k_bufs, v_bufs, ready, empty, m_i, l_i, acc, s_zero, qk_scale, offs_m,
                                offs_sn, Nk, lo_shift, hi_shift, tiles, p_layout, o_layout, CAUSAL, WINDOW, BLOCK_N,
                                STAGES)
    empty_row = l_i == 0.0
    if Q_LENS:
        empty_row = empty_row | (offs_m >= q_len)
    l_safe = gl.where(empty_row, 1.0, l_i)
    acc = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    if Q_LENS:
        acc = gl.where(gl.convert_layout(empty_row, gl.SliceLayout(1, o_layout))[:, None], 0.0, acc)
    offs_om = start_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    offs_od = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + o_off + offs_om.to(gl.int64)[:, None] * son + offs_od[None, :]
    gl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=(offs_om < Nq)[:, None])
    lse = gl.where(empty_row, float("-inf"), (m_i * qk_scale + gl.log2(l_safe)) * LN2)
    gl.store(LSE + lse_off + offs_m, lse, mask=offs_m < Nq)


@gluon.jit
def _producer(k_bufs, v_bufs, ready, empty, K, V, k_off, v_off, Nk, skn, svn, lo, hi, BLOCK_N: gl.constexpr,
              D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr):
    """K/V tiles by cp.async into the ring (rows past Nk zero-filled); each of the partition's
    128 threads arrives on ready[slot] (noinc) when its copies land; waits on empty[slot]
    (both consumers) before reusing a slot."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for j in range(hi - lo):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        for c in gl.static_range(BLOCK_N // CHUNK):
            rows = (lo + j) * BLOCK_N + c * CHUNK + offs_r
            inside = (rows < Nk)[:, None]
            k_ptrs = K + k_off + rows.to(gl.int64)[:, None] * skn + offs_d[None, :]
            v_ptrs = V + v_off + rows.to(gl.int64)[:, None] * svn + offs_d[None, :]
            async_copy.async_copy_global_to_shared(k_bufs.index(slot).slice(c * CHUNK, CHUNK), k_ptrs, mask=inside)
            async_copy.async_copy_global_to_shared(v_bufs.index(slot).slice(c * CHUNK, CHUNK), v_ptrs, mask=inside)
        async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)


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


@kernel(inputs=5, outputs=3, gluon=True)
def fa_fwd_hopper_kernel(Q, K, V, QLEN, KVLEN, Hq, G, Nq, Nk, qk_scale, left, right, sqb, sqh, sqn, skb, skh, skn,
                         svb, svh, svn, sob, soh, son, O, LSE, LSE2, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                         STAGES: gl.constexpr, CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, WINDOW: gl.constexpr = False, Q_LENS: gl.constexpr = False,
                         KV_LENS: gl.constexpr = False):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (the default partition: the first consumer; 12
    in all). qk_scale = softmax_scale * log2(e). WINDOW: query i sees key j only if
    i + shift - left <= j <= i + shift + right (kernels.fa_fwd_kernel's window; causal is
    right = 0). Q_LENS, KV_LENS: batch b has QLEN[b] queries and KVLEN[b] keys (clamped to
    [0, Nq], [0, Nk]; shift = kv_len - q_len), as kernels._options. LSE2: never written (the
    portable kernel's base-2 lse, an option's). Causal: the last query blocks (the most keys)
    run first."""
    sqb, sqh, sqn = aligned(sqb, 8), aligned(sqh, 8), aligned(sqn, 8)
    skb, skh, skn = aligned(skb, 8), aligned(skh, 8), aligned(skn, 8)
    svb, svh, svn = aligned(svb, 8), aligned(svh, 8), aligned(svn, 8)
    sob, soh, son = aligned(sob, 8), aligned(soh, 8), aligned(son, 8)
    BLOCK_M: gl.constexpr = 2 * ROWS
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // G
    start_m = pid_m * BLOCK_M
    q_len = Nq
    kv_len = Nk
    if Q_LENS:
        q_len = gl.minimum(gl.maximum(gl.load(QLEN + b).to(gl.int32), 0), Nq)
    if KV_LENS:
        kv_len = gl.minimum(gl.maximum(gl.load(KVLEN + b).to(gl.int32), 0), Nk)
    lo_shift = kv_len - q_len - left
    hi_shift = kv_len - q_len + right
    q_off = b.to(gl.int64) * sqb + h.to(gl.int64) * sqh
    k_off = b.to(gl.int64) * skb + hk.to(gl.int64) * skh
    v_off = b.to(gl.int64) * svb + hk.to(gl.int64) * svh
    o_off = b.to(gl.int64) * sob + h.to(gl.int64) * soh
    lse_off = bh.to(gl.int64) * Nq

    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], dtype)
    q0 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    q1 = gl.allocate_shared_memory(dtype, [ROWS, D], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], kv_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=128)  # the producer's threads
        mbarrier.init(empty.index(i), count=2)  # the consumers

    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    rows = start_m + offs_r
    q0.store(gl.load(Q + q_off + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :], mask=(rows < Nq)[:, None],
                     other=0.0))
    rows = rows + ROWS
    q1.store(gl.load(Q + q_off + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :], mask=(rows < Nq)[:, None],
                     other=0.0))
    fence_async_shared()
    gl.thread_barrier()

    tiles = _key_tiles(start_m, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    gl.warp_specialize([
        (_consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, o_off, lse_off, son, Nq, q_len, kv_len, lo_shift,
                     hi_shift, qk_scale, start_m, tiles, CAUSAL, WINDOW, Q_LENS, BLOCK_N, D, STAGES)),
        (_consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, o_off, lse_off, son, Nq, q_len, kv_len, lo_shift,
                     hi_shift, qk_scale, start_m + ROWS, tiles, CAUSAL, WINDOW, Q_LENS, BLOCK_N, D, STAGES)),
        (_producer, (k_bufs, v_bufs, ready, empty, K, V, k_off, v_off, kv_len, skn, svn, tiles[0], tiles[3], BLOCK_N,
                     D, STAGES, CHUNK)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
