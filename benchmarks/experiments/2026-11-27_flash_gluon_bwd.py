"""Issue 22 probe: the flash backward's dK/dV kernel in Gluon, in the form of the Hopper forward
(ato_core/ops/flash_attention/hopper.py): a 4-warp producer streams Q and dO tiles of 64 query
rows into a ring by cp.async; two consumer warpgroups hold 64 keys each (K, V in shared memory,
dK, dV accumulators in registers) and per query tile run

    S^T = K Q^T, dP^T = V dO^T (two async wgmma), P^T = 2^(S^T qk_scale - lse2), dS^T = P^T (dP^T - delta),
    dV += P^T dO, dK += dS^T Q (async wgmma, P^T and dS^T from registers)

delta and lse2 (= lse log2 e, +inf where lse = -inf) are the portable delta kernel's. GQA: a
program's keys take the G query heads' tiles in turn. Causal: query tiles from the first that sees
the program's first key; those crossing the diagonal masked. dQ (gluon_dq): the forward's form,
two warpgroups of 64 query rows, K / V tiles of 64 keys streamed; dQ += dS K. D 128, fp16/bf16. Written on a CPU machine (session 35), compiled for sm_90 there; not yet run.

    python3 2026-11-27_flash_gluon_bwd.py --compile    # sm_90 registers, spills, shared memory (CPU)
    python3 2026-11-27_flash_gluon_bwd.py              # GPU: dk, dv against ato's backward; timings
"""
import sys

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier,
                                                             warpgroup_mma, warpgroup_mma_wait)

from ato_core.triton_helpers import aligned

KEYS = gl.constexpr(64)  # keys of a consumer warpgroup (two a program)
BLOCK_M = gl.constexpr(64)  # query rows of a tile


@gluon.jit
def _tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, i, dk, dv, zero_s, LSE2, DELTA, lse_off, Nq, qk_scale,
          offs_k, offs_q, shift, dk_op: gl.constexpr, dv_op: gl.constexpr, s_layout: gl.constexpr,
          CAUSAL: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr):
    """Query tile i of the current head (the ring's c-th): dK, dV updated; its slot freed."""
    slot = c % STAGES
    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
    fence_async_shared()
    q_s = q_bufs.index(slot)
    do_s = do_bufs.index(slot)
    st_tok = warpgroup_mma(k_smem, q_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dpt_tok = warpgroup_mma(v_smem, do_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    rows = i * BLOCK_M + offs_q
    inside = rows < Nq
    lse2 = gl.load(LSE2 + lse_off + rows, mask=inside, other=float("inf"))
    delta = gl.load(DELTA + lse_off + rows, mask=inside, other=0.0)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok, ))
    pt = gl.exp2(gl.fma(st, gl.full(st.shape, qk_scale, gl.float32, s_layout), -lse2[None, :]))
    if MASK:
        if CAUSAL:  # offs_k: the keys less shift (a row's), against the tile's query rows
            pt = gl.where(offs_k[:, None] <= rows[None, :], pt, 0.0)
    dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt_tok, ))
    dst = pt * (dpt - delta[None, :])
    dv_tok = warpgroup_mma(gl.convert_layout(pt.to(q_bufs.dtype), dv_op), do_s, dv, is_async=True)
    dk_tok = warpgroup_mma(gl.convert_layout(dst.to(q_bufs.dtype), dk_op), q_s, dk, is_async=True)
    dv = warpgroup_mma_wait(num_outstanding=1, deps=(dv_tok, ))
    dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok, ))
    mbarrier.arrive(empty.index(slot), count=1)
    return dk, dv


@gluon.jit
def _consumer(k_smem, v_smem, q_bufs, do_bufs, ready, empty, LSE2, DELTA, DK, DV, dk_off, dv_off, sdkn, sdvn, Hq, G,
              hk, b, Nq, Nk, shift, qk_scale, sm_scale, k0, q_lo, q_full, n_q, CAUSAL: gl.constexpr,
              D: gl.constexpr, STAGES: gl.constexpr):
    """One warpgroup: keys [k0, k0 + KEYS); writes their dK, dV."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    offs_k = k0 - shift + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
    offs_q = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout)
    dk = gl.zeros([KEYS, D], gl.float32, a_layout)
    dv = gl.zeros([KEYS, D], gl.float32, a_layout)
    c = 0
    for g in range(G):
        lse_off = (b * Hq + hk * G + g).to(gl.int64) * Nq
        for i in range(q_lo, q_full):  # tiles crossing the diagonal
            dk, dv = _tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, i, dk, dv, zero_s, LSE2, DELTA, lse_off,
                           Nq, qk_scale, offs_k, offs_q, shift, op_layout, op_layout, s_layout, CAUSAL, True, STAGES)
            c += 1
        for i in range(q_full, n_q):
            dk, dv = _tile(k_smem, v_smem, q_bufs, do_bufs, ready, empty, c, i, dk, dv, zero_s, LSE2, DELTA, lse_off,
                           Nq, qk_scale, offs_k, offs_q, shift, op_layout, op_layout, s_layout, CAUSAL, False, STAGES)
            c += 1
    offs_r = k0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, a_layout))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, a_layout))
    keep = (offs_r < Nk)[:, None]
    gl.store(DK + dk_off + offs_r.to(gl.int64)[:, None] * sdkn + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty),
             mask=keep)
    gl.store(DV + dv_off + offs_r.to(gl.int64)[:, None] * sdvn + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=keep)


@gluon.jit
def _producer(q_bufs, do_bufs, ready, empty, Q, DO, q_base, do_base, sqh, sdoh, sqn, sdon, G, hk, Nq, q_lo, n_q,
              D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr):
    """Q and dO tiles, head by head (the G query heads of kv head hk), tiles [q_lo, n_q) of each."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    c = 0
    for g in range(G):
        hq = (hk * G + g).to(gl.int64)
        q_head = Q + q_base + hq * sqh
        do_head = DO + do_base + hq * sdoh
        for i in range(q_lo, n_q):
            slot = c % STAGES
            mbarrier.wait(empty.index(slot), ((c // STAGES) & 1) ^ 1)
            for r in gl.static_range(BLOCK_M // CHUNK):
                rows = i * BLOCK_M + r * CHUNK + offs_r
                inside = (rows < Nq)[:, None]
                q_ptrs = q_head + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :]
                do_ptrs = do_head + rows.to(gl.int64)[:, None] * sdon + offs_d[None, :]
                async_copy.async_copy_global_to_shared(q_bufs.index(slot).slice(r * CHUNK, CHUNK), q_ptrs, mask=inside)
                async_copy.async_copy_global_to_shared(do_bufs.index(slot).slice(r * CHUNK, CHUNK), do_ptrs,
                                                       mask=inside)
            async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)
            c += 1


@gluon.jit
def gluon_dkdv(Q, K, V, DO, LSE2, DELTA, Hq, G, Nq, Nk, qk_scale, sm_scale, sqb, sqh, sqn, skb, skh, skn, svb, svh,
               svn, sdob, sdoh, sdon, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, DK, DV, CAUSAL: gl.constexpr,
               D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr,
               CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nk, 128), B * Hkv), 4 warps (12 in all). lse2, delta: [B, Hq, Nq] fp32."""
    sqb, sqh, sqn = aligned(sqb, 8), aligned(sqh, 8), aligned(sqn, 8)
    skb, skh, skn = aligned(skb, 8), aligned(skh, 8), aligned(skn, 8)
    svb, svh, svn = aligned(svb, 8), aligned(svh, 8), aligned(svn, 8)
    sdob, sdoh, sdon = aligned(sdob, 8), aligned(sdoh, 8), aligned(sdon, 8)
    sdkb, sdkh, sdkn = aligned(sdkb, 8), aligned(sdkh, 8), aligned(sdkn, 8)
    sdvb, sdvh, sdvn = aligned(sdvb, 8), aligned(sdvh, 8), aligned(sdvn, 8)
    dtype: gl.constexpr = Q.dtype.element_ty
    Hkv = Hq // G
    pid_n = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // Hkv
    hk = bh % Hkv
    k0 = pid_n * (2 * KEYS)
    shift = Nk - Nq
    n_q = gl.cdiv(Nq, BLOCK_M)
    if CAUSAL:  # queries i see key j iff i >= j - shift
        q_lo = gl.minimum(gl.maximum(k0 - shift, 0) // BLOCK_M, n_q)
        q_full = gl.minimum(gl.maximum(gl.cdiv(gl.maximum(k0 + 2 * KEYS - 1 - shift, 0), BLOCK_M), q_lo), n_q)
    else:
        q_lo = 0
        q_full = 0

    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, D], dtype)
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D], dtype)
    k0_s = gl.allocate_shared_memory(dtype, [KEYS, D], kv_layout)
    k1_s = gl.allocate_shared_memory(dtype, [KEYS, D], kv_layout)
    v0_s = gl.allocate_shared_memory(dtype, [KEYS, D], kv_layout)
    v1_s = gl.allocate_shared_memory(dtype, [KEYS, D], kv_layout)
    q_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], q_layout)
    do_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], q_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=128)
        mbarrier.init(empty.index(s), count=2)

    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, KEYS, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    k_head = K + b.to(gl.int64) * skb + hk.to(gl.int64) * skh
    v_head = V + b.to(gl.int64) * svb + hk.to(gl.int64) * svh
    rows = k0 + offs_r
    inside = (rows < Nk)[:, None]
    k0_s.store(gl.load(k_head + rows.to(gl.int64)[:, None] * skn + offs_d[None, :], mask=inside, other=0.0))
    v0_s.store(gl.load(v_head + rows.to(gl.int64)[:, None] * svn + offs_d[None, :], mask=inside, other=0.0))
    rows = rows + KEYS
    inside = (rows < Nk)[:, None]
    k1_s.store(gl.load(k_head + rows.to(gl.int64)[:, None] * skn + offs_d[None, :], mask=inside, other=0.0))
    v1_s.store(gl.load(v_head + rows.to(gl.int64)[:, None] * svn + offs_d[None, :], mask=inside, other=0.0))
    fence_async_shared()
    gl.thread_barrier()

    dk_off = b.to(gl.int64) * sdkb + hk.to(gl.int64) * sdkh
    dv_off = b.to(gl.int64) * sdvb + hk.to(gl.int64) * sdvh
    gl.warp_specialize([
        (_consumer, (k0_s, v0_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, DK, DV, dk_off, dv_off, sdkn, sdvn, Hq, G,
                     hk, b, Nq, Nk, shift, qk_scale, sm_scale, k0, q_lo, q_full, n_q, CAUSAL, D, STAGES)),
        (_consumer, (k1_s, v1_s, q_bufs, do_bufs, ready, empty, LSE2, DELTA, DK, DV, dk_off, dv_off, sdkn, sdvn, Hq, G,
                     hk, b, Nq, Nk, shift, qk_scale, sm_scale, k0 + KEYS, q_lo, q_full, n_q, CAUSAL, D, STAGES)),
        (_producer, (q_bufs, do_bufs, ready, empty, Q, DO, b.to(gl.int64) * sqb, b.to(gl.int64) * sdob, sqh, sdoh, sqn,
                     sdon, G, hk, Nq, q_lo, n_q, D, STAGES, CHUNK)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


# ---- dQ: two consumer warpgroups of 64 query rows, K / V tiles of 64 keys streamed (the forward's form)

@gluon.jit
def _dq_tile(q_smem, do_smem, k_bufs, v_bufs, ready, empty, c, j, dq, zero_s, lse2, delta, qk_scale, rows_k,
             offs_n, Nk, dq_op: gl.constexpr, CAUSAL: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr):
    """Key tile j (the ring's c-th): dQ updated; its slot freed. rows_k: the rows' last visible
    key (row + shift)."""
    slot = c % STAGES
    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
    fence_async_shared()
    k_s = k_bufs.index(slot)
    s_tok = warpgroup_mma(q_smem, k_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(do_smem, v_bufs.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p = gl.exp2(gl.fma(s, gl.full(s.shape, qk_scale, gl.float32, s.type.layout), -lse2[:, None]))
    if MASK:
        keys = j * KEYS + offs_n
        if CAUSAL:
            p = gl.where((keys[None, :] <= rows_k[:, None]) & (keys < Nk)[None, :], p, 0.0)
        else:
            p = gl.where((keys < Nk)[None, :], p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
    ds = p * (dp - delta[:, None])
    dq_tok = warpgroup_mma(gl.convert_layout(ds.to(k_bufs.dtype), dq_op), k_s, dq, is_async=True)
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
    mbarrier.arrive(empty.index(slot), count=1)
    return dq


@gluon.jit
def _dq_consumer(q_smem, do_smem, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, Nk, shift,
                 qk_scale, sm_scale, m0, n_full, n_tiles, CAUSAL: gl.constexpr, D: gl.constexpr,
                 STAGES: gl.constexpr):
    """One warpgroup: query rows [m0, m0 + BLOCK_M); writes their dQ. Key tiles [0, n_full)
    unmasked, [n_full, n_tiles) masked."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, KEYS, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    dq_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    inside = rows < Nq
    lse2 = gl.load(LSE2 + lse_off + rows, mask=inside, other=float("inf"))
    delta = gl.load(DELTA + lse_off + rows, mask=inside, other=0.0)
    rows_k = rows + shift
    offs_n = gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([BLOCK_M, KEYS], gl.float32, s_layout)
    dq = gl.zeros([BLOCK_M, D], gl.float32, a_layout)
    for j in range(0, n_full):
        dq = _dq_tile(q_smem, do_smem, k_bufs, v_bufs, ready, empty, j, j, dq, zero_s, lse2, delta, qk_scale, rows_k,
                      offs_n, Nk, dq_op, CAUSAL, False, STAGES)
    for j in range(n_full, n_tiles):
        dq = _dq_tile(q_smem, do_smem, k_bufs, v_bufs, ready, empty, j, j, dq, zero_s, lse2, delta, qk_scale, rows_k,
                      offs_n, Nk, dq_op, CAUSAL, True, STAGES)
    offs_r = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_layout))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, a_layout))
    gl.store(DQ + dq_off + offs_r.to(gl.int64)[:, None] * sdqn + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=(offs_r < Nq)[:, None])


@gluon.jit
def _kv_producer(k_bufs, v_bufs, ready, empty, K, V, k_off, v_off, Nk, skn, svn, n_tiles, D: gl.constexpr,
                 STAGES: gl.constexpr, CHUNK: gl.constexpr):
    """K / V tiles of KEYS rows into the ring (rows past Nk zero-filled)."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        for r in gl.static_range(KEYS // CHUNK):
            rows = j * KEYS + r * CHUNK + offs_r
            inside = (rows < Nk)[:, None]
            async_copy.async_copy_global_to_shared(k_bufs.index(slot).slice(r * CHUNK, CHUNK),
                                                   K + k_off + rows.to(gl.int64)[:, None] * skn + offs_d[None, :],
                                                   mask=inside)
            async_copy.async_copy_global_to_shared(v_bufs.index(slot).slice(r * CHUNK, CHUNK),
                                                   V + v_off + rows.to(gl.int64)[:, None] * svn + offs_d[None, :],
                                                   mask=inside)
        async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)


@gluon.jit
def gluon_dq(Q, K, V, DO, LSE2, DELTA, Hq, G, Nq, Nk, qk_scale, sm_scale, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn,
             sdob, sdoh, sdon, sdqb, sdqh, sdqn, DQ, CAUSAL: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
             CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """Grid (cdiv(Nq, 128), B * Hq), 4 warps (12 in all). Causal: the last query blocks first."""
    sqb, sqh, sqn = aligned(sqb, 8), aligned(sqh, 8), aligned(sqn, 8)
    skb, skh, skn = aligned(skb, 8), aligned(skh, 8), aligned(skn, 8)
    svb, svh, svn = aligned(svb, 8), aligned(svh, 8), aligned(svn, 8)
    sdob, sdoh, sdon = aligned(sdob, 8), aligned(sdoh, 8), aligned(sdon, 8)
    sdqb, sdqh, sdqn = aligned(sdqb, 8), aligned(sdqh, 8), aligned(sdqn, 8)
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // G
    m0 = pid_m * (2 * BLOCK_M)
    shift = Nk - Nq
    if CAUSAL:  # the program's rows see keys <= m0 + 2 BLOCK_M - 1 + shift; all see those <= m0 + shift
        n_tiles = gl.cdiv(gl.minimum(gl.maximum(m0 + 2 * BLOCK_M + shift, 0), Nk), KEYS)
        n_full = gl.minimum(gl.maximum(m0 + shift + 1, 0) // KEYS, Nk // KEYS)
    else:
        n_tiles = gl.cdiv(Nk, KEYS)
        n_full = Nk // KEYS
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, D], dtype)
    q0_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_layout)
    q1_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_layout)
    do0_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_layout)
    do1_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, KEYS, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, KEYS, D], kv_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=128)
        mbarrier.init(empty.index(s), count=2)
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    q_head = Q + b.to(gl.int64) * sqb + h.to(gl.int64) * sqh
    do_head = DO + b.to(gl.int64) * sdob + h.to(gl.int64) * sdoh
    rows = m0 + offs_r
    inside = (rows < Nq)[:, None]
    q0_s.store(gl.load(q_head + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :], mask=inside, other=0.0))
    do0_s.store(gl.load(do_head + rows.to(gl.int64)[:, None] * sdon + offs_d[None, :], mask=inside, other=0.0))
    rows = rows + BLOCK_M
    inside = (rows < Nq)[:, None]
    q1_s.store(gl.load(q_head + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :], mask=inside, other=0.0))
    do1_s.store(gl.load(do_head + rows.to(gl.int64)[:, None] * sdon + offs_d[None, :], mask=inside, other=0.0))
    fence_async_shared()
    gl.thread_barrier()
    lse_off = bh.to(gl.int64) * Nq
    dq_off = b.to(gl.int64) * sdqb + h.to(gl.int64) * sdqh
    k_off = b.to(gl.int64) * skb + hk.to(gl.int64) * skh
    v_off = b.to(gl.int64) * svb + hk.to(gl.int64) * svh
    gl.warp_specialize([
        (_dq_consumer, (q0_s, do0_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, Nk,
                        shift, qk_scale, sm_scale, m0, n_full, n_tiles, CAUSAL, D, STAGES)),
        (_dq_consumer, (q1_s, do1_s, k_bufs, v_bufs, ready, empty, LSE2, DELTA, DQ, lse_off, dq_off, sdqn, Nq, Nk,
                        shift, qk_scale, sm_scale, m0 + BLOCK_M, n_full, n_tiles, CAUSAL, D, STAGES)),
        (_kv_producer, (k_bufs, v_bufs, ready, empty, K, V, k_off, v_off, Nk, skn, svn, n_tiles, D, STAGES, CHUNK)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


def compile_only(causal=True, stages=2, regs=(240, 24), chunk=32, d=128, dq=False):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    outs = ("dq",) if dq else ("dk", "dv")
    names = ["Q", "K", "V", "DO", "LSE2", "DELTA", "Hq", "G", "Nq", "Nk", "qk_scale", "sm_scale"]
    names += [f"s{x}{a}" for x in ("q", "k", "v", "do", *outs) for a in "bhn"]
    sig = {n: "*bf16" for n in ("Q", "K", "V", "DO")}
    sig |= {"LSE2": "*fp32", "DELTA": "*fp32"}
    sig |= {n: "i32" for n in names[6:10] + names[12:]}
    sig |= {"qk_scale": "fp32", "sm_scale": "fp32"}
    sig = {n: sig[n] for n in names} | {o.upper(): "*bf16" for o in outs}
    consts = {"CAUSAL": causal, "D": d, "STAGES": stages, "CHUNK": chunk, "PRODUCER_REGS": regs[1],
              "CONSUMER_REGS": regs[0]}
    sig |= {n: "constexpr" for n in consts}
    ptrs = [i for i, n in enumerate(sig) if sig[n].startswith("*")]
    attrs = {(i, ): [["tt.divisibility", 16]] for i in ptrs}
    src = GluonASTSource(fn=gluon_dq if dq else gluon_dkdv, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "enable_fp_fusion": False})


def launch(q, k, v, do, lse2, delta, causal, stages=2, regs=(240, 24), chunk=32):
    import torch
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    scale = D ** -0.5
    gluon_dkdv[(triton.cdiv(Nk, 128), B * Hkv)](
        q, k, v, do, lse2, delta, Hq, Hq // Hkv, Nq, Nk, scale * 1.4426950408889634, scale, *q.stride()[:3],
        *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], dk, dv,
        CAUSAL=causal, D=D, STAGES=stages, CHUNK=chunk, PRODUCER_REGS=regs[1], CONSUMER_REGS=regs[0], num_warps=4,
        enable_fp_fusion=False)
    return dk, dv


def launch_dq(q, k, v, do, lse2, delta, causal, stages=2, regs=(240, 24), chunk=32):
    import torch
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    dq = torch.empty_like(q)
    scale = D ** -0.5
    gluon_dq[(triton.cdiv(Nq, 128), B * Hq)](
        q, k, v, do, lse2, delta, Hq, Hq // Hkv, Nq, Nk, scale * 1.4426950408889634, scale, *q.stride()[:3],
        *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dq.stride()[:3], dq, CAUSAL=causal, D=D, STAGES=stages,
        CHUNK=chunk, PRODUCER_REGS=regs[1], CONSUMER_REGS=regs[0], num_warps=4, enable_fp_fusion=False)
    return dq


def main():
    import torch

    import ato_torch
    from ato_core.ops.flash_attention import plans
    from ato_core.launch import Plan
    from ato_torch.launcher import run_plan, spec, target_for
    print("GPU", torch.cuda.get_device_name())
    for B, Hq, Hkv, Nq, Nk, causal in ((2, 4, 2, 1000, 1000, True), (1, 4, 4, 300, 700, False), (1, 2, 2, 777, 300, True),
                                       (4, 32, 32, 4096, 4096, False), (4, 32, 32, 4096, 4096, True),
                                       (2, 32, 8, 8192, 8192, True)):
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                for _ in range(2))
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(o)
        dq_ref, dk_ref, dv_ref = torch.autograd.grad(o, (q, k, v), do)
        bwd = plans.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, softmax_scale=None,
                                  has_dlse=False, target=target_for(q))
        delta_step, dkdv_step, dq_step = (Plan((launch_,), tuple(b.name for b in launch_.outputs))
                                          for launch_ in bwd.launches)
        delta, lse2 = run_plan(delta_step, {"o": o.detach(), "do": do, "lse": lse}, target_for(q))
        args = (q.detach(), k.detach(), v.detach(), do, lse2, delta, causal)
        dk, dv = launch(*args)
        dq = launch_dq(*args)
        errs = [((a.float() - r.float()).norm() / r.float().norm()).item()
                for a, r in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref))]
        env = {"q": q.detach(), "k": k.detach(), "v": v.detach(), "do": do, "lse2": lse2, "delta": delta}
        times = [triton.testing.do_bench(fn, warmup=25, rep=200) * 1e3 for fn in (
            lambda: launch(*args), lambda: run_plan(dkdv_step, env, target_for(q)), lambda: launch_dq(*args),
            lambda: run_plan(dq_step, env, target_for(q)))]
        flops = 4 * B * Hq * Nq * Nk * 128 / (2 if causal else 1)  # one matmul's flops x 2
        print(f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} {'causal' if causal else 'full'}: dq/dk/dv rel err vs ato "
              f"{errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e} | dkdv gluon {times[0]:8.1f} us ({2 * flops / times[0] / 1e6:4.0f} "
              f"TF/s) portable {times[1]:8.1f} | dq gluon {times[2]:8.1f} ({1.5 * flops / times[2] / 1e6:4.0f}) portable "
              f"{times[3]:8.1f}", flush=True)


if __name__ == "__main__":
    if "--compile" in sys.argv:
        sys.path.insert(0, "tests")
        from test_compile_sm90 import cubin_resources
        for dq, causal, stages in ((dq, c, st) for dq in (False, True) for c in (False, True) for st in (2, 3)):
            k = compile_only(causal, stages, dq=dq)
            ptx = k.asm["ptx"]
            print("dq" if dq else "dkdv", "causal", causal, "stages", stages, cubin_resources(k.asm["cubin"]), "smem",
                  k.metadata.shared, "warps", k.metadata.num_warps, "wgmma", ptx.count("wgmma.mma_async"), "setmaxnreg",
                  ptx.count("setmaxnreg"), flush=True)
    else:
        main()
