"""Block-sparse attention on Hopper (sm_90), in Gluon: flash_attention's Hopper kernels
(flash_attention/hopper.py) walking bs_lists_kernel's lists of kept blocks instead of ranges of
tiles. The forward: a TMA producer warpgroup fills a ring of K/V tiles, two consumer
warpgroups of 64 query rows run the QK wgmma of tile j beside the PV wgmma of tile j - 1; the
backward (after the portable delta kernel): dQ in the forward's form on the same row lists, dK /
dV holding 128 keys and streaming the Q / dO tiles of each query head's column list.

Blocks of 128 and 256 only: a program's 128 query rows (or keys) lie in one block, so its two
consumers share the list and the ring, and each kept block is BS // 128 key tiles of the
forward (BS // 64 of the backward's). (Blocks of 64 would give each consumer its own list and
64-key tiles; no such forward was faster than the portable kernel on an H100: results
block_sparse-sweep.txt 38.) The blocks that cross the causal diagonal or Nk
(kernels._masked_tail; flash's _listed_query_tiles for dK / dV) are masked. The math is the
portable kernels': causal aligned to the bottom right, GQA, o = 0 and lse = -inf for a query
that sees no key. fp16 / bf16, D 128; b, h and n strides multiples of 8 elements, unit d
strides (the plans check).

Max-L2 coarsening (max_l2_coarsen_hopper_kernel): kernels.max_l2_coarsen_kernel's math on
persistent programs, each streaming its blocks' tiles through a TMA ring (fp16 / bf16, D a power
of two from 16 to 256; plans._coarsen_launches decides).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from ato_core.launch import kernel
from ..flash_attention.hopper import (KEYS, ROWS, _consumer, _descriptor, _dkdv_consumer, _dkdv_producer,
                                      _dq_consumer, _forward_smem, _head, _head_descriptor, _heads_descriptor, _held,
                                      _key_program, _query_program, _strides8, _tile_layout, _tile_ring,
                                      _tma_producer)
from .kernels import _beats, _kept_keys_end, _masked_tail, _tile_winner


@kernel(inputs=5, outputs=3, gluon=True)
def bs_fwd_hopper_kernel(Q, K, V, LIST, COUNT, Hq, G, Nq, Nk, Mq, Mk, qk_scale, sqb, sqh, sqn, skb, skh, skn, svb, svh,
                         svn, sob, soh, son, O, LSE, SCRATCH, CAUSAL: gl.constexpr, BS: gl.constexpr,
                         BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (the first consumer; 12 in all). o and lse of query
    rows [128 i, 128 i + 128) over the kept key blocks of their query block (LIST [B * Hq * Mq,
    Mk], COUNT [B * Hq * Mq]: bs_lists_kernel's rows). qk_scale = softmax_scale * log2(e).
    Causal: the last query blocks (the most keys) run first. K / V by TMA (flash's _tma_producer;
    SCRATCH: Triton's global scratch, the descriptors')."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sob, soh, son = _strides8(sob, soh, son)
    per: gl.constexpr = BS // BLOCK_N
    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)
    start_m = pid_m * (2 * ROWS)
    row = gl.program_id(1).to(gl.int64) * Mq + start_m // BS
    count = gl.load(COUNT + row)
    shift = Nk - Nq
    # the masked blocks of the first row's (a superset of the later rows')
    whole = count - _masked_tail(LIST, row * Mk, count, start_m, Nk, shift, BS, CAUSAL)
    tiles = (0, 0, whole * per, count * per)  # as _key_tiles': the masked ones last
    listed = LIST + row * Mk
    q_off = _head(b, h, 0, sqb, sqh, sqn, False)
    k_off = _head(b, hk, 0, skb, skh, skn, False)
    v_off = _head(b, hk, 0, svb, svh, svn, False)
    o_off = _head(b, h, 0, sob, soh, son, False)
    lse_off = gl.program_id(1).to(gl.int64) * Nq

    k_desc = _descriptor(K, k_off, skn, Nk, BLOCK_N, D)
    v_desc = _descriptor(V, v_off, svn, Nk, BLOCK_N, D)
    q0, q1, k_bufs, v_bufs, ready, empty = _forward_smem(Q, q_off, sqn, start_m, Nq, BLOCK_N, D, STAGES, 1)
    gl.warp_specialize([
        (_consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, shift, shift,
                     qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), shift, start_m, tiles, listed, CAUSAL, False, False,
                     False, False, False, BLOCK_N, D, STAGES, BS)),
        (_consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, shift, shift,
                     qk_scale, 0.0, (0.0, 0.0), (Q, 0, Q, 0), shift, start_m + ROWS, tiles, listed, CAUSAL, False,
                     False, False, False, False, BLOCK_N, D, STAGES, BS)),
        (_tma_producer, (k_bufs, v_bufs, ready, empty, k_desc, v_desc, 0, count * per, BLOCK_N, STAGES, listed, BS)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


# ---- the backward (after the portable delta kernel): flash's Hopper dK / dV and dQ kernels on the lists.
# dQ walks a query block's row list as the forward; dK / dV a key block's column list of each query
# head (bs_lists_kernel's columns; per head, as the mask is). LSE2, DELTA: [B, Hq, Nq] fp32.


@kernel(inputs=8, outputs=2, gluon=True)
def bs_bwd_dq_hopper_kernel(Q, K, V, DO, LSE2, DELTA, LIST, COUNT, Hq, G, Nq, Nk, Mq, Mk, qk_scale, sm_scale, sqb, sqh,
                            sqn, skb, skh, skn, svb, svh, svn, sdob, sdoh, sdon, sdqb, sdqh, sdqn, DQ, SCRATCH,
                            CAUSAL: gl.constexpr, BS: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                            PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (12 in all): dQ of query rows [128 i, 128 i + 128)
    over the key tiles (KEYS rows) of their query block's kept blocks (LIST, COUNT: the rows).
    K / V by TMA (SCRATCH: Triton's global scratch, the descriptors')."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdqb, sdqh, sdqn = _strides8(sdqb, sdqh, sdqn)
    dtype: gl.constexpr = Q.dtype.element_ty
    per: gl.constexpr = BS // KEYS
    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)
    m0 = pid_m * (2 * ROWS)
    row = gl.program_id(1).to(gl.int64) * Mq + m0 // BS
    count = gl.load(COUNT + row)
    shift = Nk - Nq
    whole = count - _masked_tail(LIST, row * Mk, count, m0, Nk, shift, BS, CAUSAL)
    tiles = (0, 0, whole * per, count * per)
    listed = LIST + row * Mk
    q_off = _head(b, h, 0, sqb, sqh, sqn, False)
    do_off = _head(b, h, 0, sdob, sdoh, sdon, False)
    q0_s, q1_s, do0_s, do1_s = _held(Q, DO, q_off, do_off, sqn, sdon, m0, Nq, ROWS, D)
    k_bufs, v_bufs, ready, empty = _tile_ring(dtype, KEYS, D, STAGES, 1)
    dq_off = _head(b, h, 0, sdqb, sdqh, sdqn, False)
    k_off = _head(b, hk, 0, skb, skh, skn, False)
    v_off = _head(b, hk, 0, svb, svh, svn, False)
    lse_off = gl.program_id(1).to(gl.int64) * Nq
    k_desc = _descriptor(K, k_off, skn, Nk, KEYS, D)
    v_desc = _descriptor(V, v_off, svn, Nk, KEYS, D)
    gl.warp_specialize([
        (_dq_consumer, (q0_s, do0_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, Nk,
                        shift, shift, shift, qk_scale, sm_scale, 0.0, (0.0, 0.0), m0, tiles, listed, CAUSAL, False,
                        False, False, D, STAGES, BS)),
        (_dq_consumer, (q1_s, do1_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, Nk,
                        shift, shift, shift, qk_scale, sm_scale, 0.0, (0.0, 0.0), m0 + ROWS, tiles, listed, CAUSAL,
                        False, False, False, D, STAGES, BS)),
        (_tma_producer, (k_bufs, v_bufs, ready, empty, k_desc, v_desc, 0, count * per, KEYS, STAGES, listed, BS)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


@kernel(inputs=8, outputs=3, gluon=True)
def bs_bwd_dkdv_hopper_kernel(Q, K, V, DO, LSE2, DELTA, LIST, COUNT, Hq, G, Nq, Nk, Mq, Mk, qk_scale, sm_scale, sqb,
                              sqh, sqn, skb, skh, skn, svb, svh, svn, sdob, sdoh, sdon, sdkb, sdkh, sdkn, sdvb, sdvh,
                              sdvn, DK, DV, SCRATCH, CAUSAL: gl.constexpr, BS: gl.constexpr, D: gl.constexpr,
                              STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nk, 2 KEYS), B * Hkv), 4 warps (12 in all): dK and dV of keys [128 i, 128 i +
    128) (within one key block) over the query tiles (ROWS rows) of the blocks that keep it, for
    each of the G query heads of kv head hk (LIST, COUNT: the columns, [B * Hq * Mk, Mq]). The
    producer is the default partition, as in flash's; Q / dO by TMA (SCRATCH: the descriptors')."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdkb, sdkh, sdkn = _strides8(sdkb, sdkh, sdkn)
    sdvb, sdvh, sdvn = _strides8(sdvb, sdvh, sdvn)
    dtype: gl.constexpr = Q.dtype.element_ty
    _, b, hk, k0 = _key_program(Hq, G)
    # the columns of key block k0 // BS for query heads hk G + g: (b Hq + hk G + g) Mk + k0 // BS
    lists = (LIST, COUNT, (b.to(gl.int64) * Hq + hk * G) * Mk + k0 // BS, Mk, Mq)
    k_off = _head(b, hk, 0, skb, skh, skn, False)
    v_off = _head(b, hk, 0, svb, svh, svn, False)
    shift = Nk - Nq
    v_hi = Nk
    if CAUSAL:  # no query sees the values from there on (dS = 0 times a NaN value's dP is NaN)
        v_hi = gl.minimum(_kept_keys_end(LIST, COUNT, lists[2], Mk, Mq, G, BS, Nq, shift), Nk)
    k0_s, k1_s, v0_s, v1_s = _held(K, V, k_off, v_off, skn, svn, k0, Nk, KEYS, D, 0, v_hi)
    q_bufs, do_bufs, ready, empty = _tile_ring(dtype, ROWS, D, STAGES, 1)
    dk_off = _head(b, hk, 0, sdkb, sdkh, sdkn, False)
    dv_off = _head(b, hk, 0, sdvb, sdvh, sdvn, False)
    zero = k0 * 0
    tiles = (zero, zero, zero, zero)  # (each head's: _listed_query_tiles)
    heads = (hk * G).to(gl.int64)
    q_desc = _head_descriptor(Q, b.to(gl.int64) * sqb + heads * sqh, sqh, sqn, G, Nq, ROWS, D)
    do_desc = _head_descriptor(DO, b.to(gl.int64) * sdob + heads * sdoh, sdoh, sdon, G, Nq, ROWS, D)
    gl.warp_specialize([
        (_dkdv_producer, (q_bufs, do_bufs, ready, empty, q_desc, do_desc, G, zero, zero, lists, STAGES, BS)),
        (_dkdv_consumer, (k0_s, v0_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, Q, DK, DV, dk_off, dv_off, sdkn, sdvn,
                          0, 0, b * Hq, Nq, 0, G, hk, b, 0, Nq, Nk, Nk, shift, shift, shift, qk_scale, sm_scale,
                          (0.0, 0.0), k0, tiles, lists, CAUSAL, False, False, False, False, False, D, STAGES, BS)),
        (_dkdv_consumer, (k1_s, v1_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, Q, DK, DV, dk_off, dv_off, sdkn, sdvn,
                          0, 0, b * Hq, Nq, 0, G, hk, b, 0, Nq, Nk, Nk, shift, shift, shift, qk_scale, sm_scale,
                          (0.0, 0.0), k0 + KEYS, tiles, lists, CAUSAL, False, False, False, False, False, D, STAGES,
                          BS)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


# -- Max-L2 coarsening ---------------------------------------------------------------------


@gluon.jit
def _coarsen_tile(descs, heads, ring, ready, j, pid, programs, M, BLOCK: gl.constexpr, ROWS_C: gl.constexpr,
                  D: gl.constexpr, STAGES: gl.constexpr):
    """The program's j-th tile (rows (j % T) ROWS_C on of its block pid + (j // T) programs: of x
    below B HX M, else of y) by TMA into ring slot j % STAGES, announced on ready[slot]."""
    T: gl.constexpr = BLOCK // ROWS_C
    slot = j % STAGES
    item = pid + (j // T) * programs
    n0 = (item % M) * BLOCK + (j % T) * ROWS_C
    bar = ready.index(slot)
    buf = ring.index(slot).reshape([1, 1, ROWS_C, D])
    mbarrier.expect(bar, descs[0].block_type.nbytes)
    if item < heads[2]:
        bh = item // M
        tma.async_copy_global_to_shared(descs[0], [bh // heads[0], bh % heads[0], n0, 0], bar, buf)
    else:
        bh = (item - heads[2]) // M
        tma.async_copy_global_to_shared(descs[1], [bh // heads[1], bh % heads[1], n0, 0], bar, buf)


@kernel(inputs=2, outputs=5, gluon=True)
def max_l2_coarsen_hopper_kernel(X, Y, B, HX, HY, N, M, sxb, sxh, sxn, syb, syh, syn, XC, XI, YC, YI, SCRATCH,
                                 BLOCK: gl.constexpr, ROWS_C: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr):
    """Grid (programs), 4 warps: blocks pid, pid + programs, ... of x [B, HX, N, D], then of y
    [B, HY, N, D] (HY 0: none; curvature_block_mask's q and k in one launch), each as
    kernels.max_l2_coarsen_kernel's (the same candidates and comparisons), in BLOCK // ROWS_C
    tiles [ROWS_C, D] by TMA (rows past N land as zeros, masked off) into a ring of STAGES, the
    next STAGES - 1 tiles in flight while one is reduced; each tile's candidate row is read out
    of the ring (no second read of x). XC [B, HX, M, D] (x's dtype), XI [B, HX, M] int32, YC, YI
    y's; SCRATCH: the descriptors'."""
    sxb, sxh, sxn = _strides8(sxb, sxh, sxn)
    syb, syh, syn = _strides8(syb, syh, syn)
    T: gl.constexpr = BLOCK // ROWS_C
    dtype: gl.constexpr = X.dtype.element_ty
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    x_items = B * HX * M
    tiles = gl.cdiv(x_items + B * HY * M - pid, programs) * T
    # unswizzled tiles (a row contiguous: the winner's is read out of the ring); H at least 1, as TMA needs
    descs = (_heads_descriptor(X, B, gl.maximum(HX, 1), N, sxb, sxh, sxn, ROWS_C, D, False),
             _heads_descriptor(Y, B, gl.maximum(HY, 1), N, syb, syh, syn, ROWS_C, D, False))
    heads = (HX, HY, x_items)
    ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS_C, D], _tile_layout([ROWS_C, D], dtype, False))
    rows = ring._reinterpret(dtype, [STAGES * ROWS_C, 1, D], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()
    for j in gl.static_range(STAGES - 1):
        if j < tiles:
            _coarsen_tile(descs, heads, ring, ready, j, pid, programs, M, BLOCK, ROWS_C, D, STAGES)
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    row_ld: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0])
    offs_r = gl.arange(0, ROWS_C, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, row_ld))[None, :]
    best_s = gl.to_tensor(-1.0)
    best_k = gl.to_tensor(0)
    best_idx = gl.to_tensor(0)
    best_row = gl.zeros([1, D], dtype, row_ld)
    for j in range(tiles):
        # the slot tile j + STAGES - 1 takes was read at tile j - 1 by every warp
        gl.thread_barrier()
        if j + STAGES - 1 < tiles:
            _coarsen_tile(descs, heads, ring, ready, j + STAGES - 1, pid, programs, M, BLOCK, ROWS_C, D, STAGES)
        slot = j % STAGES
        t = j % T
        item = pid + (j // T) * programs
        first = (item % M) * BLOCK + t * ROWS_C
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        x = ring.index(slot).load(ld).to(gl.float32)
        i, sc, k = _tile_winner(x, first + offs_r < N, offs_r, ROWS_C, True)
        fresh = t == 0  # a block's first tile: nothing to beat
        best_s = gl.where(fresh, -1.0, best_s)
        best_k = gl.where(fresh, 0, best_k)
        better = _beats(sc, k, best_s, best_k)
        best_s = gl.where(better, sc, best_s)
        best_k = gl.where(better, k, best_k)
        best_idx = gl.where(better, first + i, best_idx)
        best_row = gl.where(better, rows.index(slot * ROWS_C + i).load(row_ld), best_row)
        if t == T - 1:  # (evict_last: x's stream would push the coarse rows out of L2 before the mask reads them)
            if item < x_items:
                gl.store(XC + item.to(gl.int64) * D + offs_d, best_row, eviction_policy="evict_last")
                gl.store(XI + item, best_idx, eviction_policy="evict_last")
            else:
                gl.store(YC + (item - x_items).to(gl.int64) * D + offs_d, best_row, eviction_policy="evict_last")
                gl.store(YI + (item - x_items), best_idx, eviction_policy="evict_last")
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
