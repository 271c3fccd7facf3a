"""Issue 22 probe: a Hopper flash forward in Gluon (Triton 3.6's explicit-layout front end), to
learn whether what plain Triton cannot express (an asynchronous QK wgmma in flight while the
softmax of the previous tile runs; the PV wgmma in flight under the next softmax) closes the gap
to cuDNN. K/V arrive by cp.async (pointers, no TMA descriptors: what jax-triton 0.3.1 can launch).

    python3 2026-11-27_flash_gluon.py --compile        # sm_90 PTX/SASS stats on a CPU machine
    python3 2026-11-27_flash_gluon.py                  # H100: bits vs SDPA, timings vs ato and cuDNN
"""
import sys

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from ato_core.triton_helpers import aligned
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier,
                                                             warpgroup_mma, warpgroup_mma_wait)


@gluon.jit
def _issue_kv(k_bufs, v_bufs, slot, K, V, kv_off, start_n, N, skn, svn, offs_n, offs_d, MASKED: gl.constexpr):
    rows = start_n + offs_n
    k_ptrs = K + kv_off + rows.to(gl.int64)[:, None] * skn + offs_d[None, :]
    v_ptrs = V + kv_off + rows.to(gl.int64)[:, None] * svn + offs_d[None, :]
    if MASKED:
        inside = (rows < N)[:, None]
        async_copy.async_copy_global_to_shared(k_bufs.index(slot), k_ptrs, mask=inside)
        async_copy.async_copy_global_to_shared(v_bufs.index(slot), v_ptrs, mask=inside)
    else:
        async_copy.async_copy_global_to_shared(k_bufs.index(slot), k_ptrs)
        async_copy.async_copy_global_to_shared(v_bufs.index(slot), v_ptrs)
    async_copy.commit_group()


@gluon.jit
def _init_state(start_m, M: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, s_layout: gl.constexpr,
                o_layout: gl.constexpr):
    """Query rows and key offsets of a tile, the online softmax's (m, l), o's accumulator, and
    the zero accumulator the QK wgmma ignores (use_acc=False)."""
    offs_m = start_m + gl.arange(0, M, layout=gl.SliceLayout(1, s_layout))
    offs_sn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    m_i = gl.full([M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([M], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    return offs_m, offs_sn, m_i, l_i, gl.zeros([M, D], gl.float32, o_layout), gl.zeros([M, BLOCK_N], gl.float32,
                                                                                          s_layout)


@gluon.jit
def _n_tiles(start_m, N, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """Key tiles a program of query rows [start_m, start_m + BLOCK_M) visits."""
    if CAUSAL:
        hi = gl.minimum(start_m + BLOCK_M, N)
    else:
        hi = N
    return gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, N, CAUSAL: gl.constexpr):
    s = s * qk_scale
    if CAUSAL:
        s = gl.where(offs_m[:, None] >= (start_n + offs_sn)[None, :], s, float("-inf"))
    else:
        s = gl.where((start_n + offs_sn < N)[None, :], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    p = gl.exp2(s - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _softmax_fma(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, N, CAUSAL: gl.constexpr, MASK: gl.constexpr):
    """Row max on the raw scores; p = 2^(s * scale - m * scale) in one FMA a score."""
    if MASK:
        if CAUSAL:
            s = gl.where(offs_m[:, None] >= (start_n + offs_sn)[None, :], s, float("-inf"))
        else:
            s = gl.where((start_n + offs_sn < N)[None, :], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    m_s = m_new * qk_scale
    p = gl.exp2(s * qk_scale - m_s[:, None])
    alpha = gl.exp2(m_i * qk_scale - m_s)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _update(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, N, CAUSAL: gl.constexpr, MASK: gl.constexpr,
            FMA: gl.constexpr):
    """The softmax update of a score tile: _softmax_fma (masked only with MASK), or _softmax
    (scaled first, every tile masked: section 2's form)."""
    if FMA:
        return _softmax_fma(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, N, CAUSAL, MASK)
    else:
        return _softmax(s, m_i, l_i, qk_scale, offs_m, start_n, offs_sn, N, CAUSAL)


@gluon.jit
def _ws_step(q_smem, k_bufs, v_bufs, ready, empty, j, p, m_i, l_i, acc, s_zero, qk_scale, offs_m, offs_sn, N,
             turn_me, turn_other, p_layout: gl.constexpr, o_layout: gl.constexpr, CAUSAL: gl.constexpr,
             MASK: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
             FMA: gl.constexpr):
    slot = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    fence_async_shared()
    p_op = gl.convert_layout(p.to(v_bufs.dtype), p_layout)
    if PINGPONG:  # this warpgroup's GEMMs of round j go after the other's of round j - 1 (or j)
        mbarrier.wait(turn_me, j & 1)
    s_tok = warpgroup_mma(q_smem, k_bufs.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    o_tok = warpgroup_mma(p_op, v_bufs.index(prev), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn_other, count=1)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p, m_i, l_i, alpha = _update(s, m_i, l_i, qk_scale, offs_m, j * BLOCK_N, offs_sn, N, CAUSAL, MASK, FMA)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(empty.index(prev), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return p, m_i, l_i, acc


@gluon.jit
def gluon_fwd(Q, K, V, O, LSE, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son, H, N, qk_scale,
              CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
              STAGES: gl.constexpr, num_warps: gl.constexpr):
    gl.static_assert(num_warps == 8)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    ld_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [8, 1], [1, 0])
    smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.bfloat16)
    q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, D], gl.bfloat16)
    dtype: gl.constexpr = Q.dtype.element_ty

    pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    q_off = b.to(gl.int64) * sqb + h.to(gl.int64) * sqh
    kv_off = b.to(gl.int64) * skb + h.to(gl.int64) * skh
    start_m = pid_m * BLOCK_M

    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld_layout))
    offs_ln = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld_layout))
    offs_lm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld_layout))

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_smem_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], smem_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], smem_layout)

    q_rows = start_m + offs_lm
    q_ptrs = Q + q_off + q_rows.to(gl.int64)[:, None] * sqn + offs_d[None, :]
    async_copy.async_copy_global_to_shared(q_smem, q_ptrs, mask=(q_rows < N)[:, None])
    async_copy.commit_group()

    n_tiles = _n_tiles(start_m, N, CAUSAL, BLOCK_M, BLOCK_N)
    for t in gl.static_range(STAGES - 1):
        if t < n_tiles:
            _issue_kv(k_bufs, v_bufs, t, K, V, kv_off, t * BLOCK_N, N, skn, svn, offs_ln, offs_d, True)
        else:
            async_copy.commit_group()

    offs_m, offs_sn, m_i, l_i, acc, s_zero = _init_state(start_m, BLOCK_M, BLOCK_N, D, s_layout, o_layout)

    # tile 0: its scores alone
    async_copy.wait_group(STAGES - 2)
    fence_async_shared()
    gl.thread_barrier()
    s_tok = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, 0, offs_sn, N, CAUSAL)
    if STAGES - 1 < n_tiles:
        _issue_kv(k_bufs, v_bufs, STAGES - 1, K, V, kv_off, (STAGES - 1) * BLOCK_N, N, skn, svn, offs_ln, offs_d,
                  True)
    else:
        async_copy.commit_group()

    for j in range(1, n_tiles):
        slot = j % STAGES
        prev = (j - 1) % STAGES
        async_copy.wait_group(STAGES - 2)
        fence_async_shared()
        gl.thread_barrier()
        s_tok = warpgroup_mma(q_smem, k_bufs.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        o_tok = warpgroup_mma(p_op, v_bufs.index(prev), acc, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
        p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, offs_m, j * BLOCK_N, offs_sn, N, CAUSAL)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        gl.thread_barrier()
        nxt = j + STAGES - 1
        if nxt < n_tiles:
            _issue_kv(k_bufs, v_bufs, prev, K, V, kv_off, nxt * BLOCK_N, N, skn, svn, offs_ln, offs_d, True)
        else:
            async_copy.commit_group()

    last = (n_tiles - 1) % STAGES
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    o_tok = warpgroup_mma(p_op, v_bufs.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    async_copy.wait_group(0)

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    acc = acc / l_o[:, None]
    offs_om = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    offs_od = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + b.to(gl.int64) * sob + h.to(gl.int64) * soh + offs_om.to(gl.int64)[:, None] * son + offs_od[None, :]
    gl.store(o_ptrs, acc.to(dtype), mask=(offs_om < N)[:, None])
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
    gl.store(LSE + bh.to(gl.int64) * N + offs_m, lse, mask=offs_m < N)



@gluon.jit
def _ws_producer(k_bufs, v_bufs, ready, empty, K, V, kv_off, N, skn, svn, n_tiles, BLOCK_N: gl.constexpr,
                 D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr):
    """K/V tiles by cp.async into the ring; each of the partition's threads arrives on ready[slot]
    (noinc) when its copies land; waits on empty[slot] (both consumer warpgroups) before reuse."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        for c in gl.static_range(BLOCK_N // CHUNK):
            rows = j * BLOCK_N + c * CHUNK + offs_r
            inside = (rows < N)[:, None]
            k_ptrs = K + kv_off + rows.to(gl.int64)[:, None] * skn + offs_d[None, :]
            v_ptrs = V + kv_off + rows.to(gl.int64)[:, None] * svn + offs_d[None, :]
            async_copy.async_copy_global_to_shared(k_bufs.index(slot).slice(c * CHUNK, CHUNK), k_ptrs, mask=inside)
            async_copy.async_copy_global_to_shared(v_bufs.index(slot).slice(c * CHUNK, CHUNK), v_ptrs, mask=inside)
        async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)


@gluon.jit
def _ws_consumer(q_smem, k_bufs, v_bufs, ready, empty, O, LSE, o_off, bh, son, N, qk_scale, start_m, n_tiles,
                 turn_me, turn_other, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                 STAGES: gl.constexpr, FMA: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: 64 query rows. QK of tile j in flight with PV of tile j - 1; softmax of
    tile j under PV j - 1."""
    M: gl.constexpr = 64
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = O.dtype.element_ty
    offs_m, offs_sn, m_i, l_i, acc, s_zero = _init_state(start_m, M, BLOCK_N, D, s_layout, o_layout)

    mbarrier.wait(ready.index(0), 0)
    fence_async_shared()
    if PINGPONG:
        mbarrier.wait(turn_me, 0)
    s_tok = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn_other, count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    p, m_i, l_i, alpha = _update(s, m_i, l_i, qk_scale, offs_m, 0, offs_sn, N, CAUSAL, True, FMA)
    for j in range(1, n_tiles - 1):  # the last tile apart: only it needs the mask (FMA)
        p, m_i, l_i, acc = _ws_step(q_smem, k_bufs, v_bufs, ready, empty, j, p, m_i, l_i, acc, s_zero, qk_scale,
                                    offs_m, offs_sn, N, turn_me, turn_other, p_layout, o_layout, CAUSAL, False,
                                    BLOCK_N, STAGES, PINGPONG, FMA)
    if n_tiles > 1:
        p, m_i, l_i, acc = _ws_step(q_smem, k_bufs, v_bufs, ready, empty, n_tiles - 1, p, m_i, l_i, acc, s_zero,
                                    qk_scale, offs_m, offs_sn, N, turn_me, turn_other, p_layout, o_layout, CAUSAL,
                                    True, BLOCK_N, STAGES, PINGPONG, FMA)
    last = (n_tiles - 1) % STAGES
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    if PINGPONG:
        mbarrier.wait(turn_me, n_tiles & 1)
    o_tok = warpgroup_mma(p_op, v_bufs.index(last), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn_other, count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(empty.index(last), count=1)

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    acc = acc / l_o[:, None]
    offs_om = start_m + gl.arange(0, M, layout=gl.SliceLayout(1, o_layout))
    offs_od = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + o_off + offs_om.to(gl.int64)[:, None] * son + offs_od[None, :]
    gl.store(o_ptrs, acc.to(dtype), mask=(offs_om < N)[:, None])
    if FMA:
        lse = (m_i * qk_scale + gl.log2(l_i)) * 0.6931471805599453
    else:
        lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
    gl.store(LSE + bh.to(gl.int64) * N + offs_m, lse, mask=offs_m < N)


@gluon.jit
def gluon_fwd_ws(Q, K, V, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son, H, N, qk_scale, O, LSE,
                 CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                 CHUNK: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                 FMA: gl.constexpr, PINGPONG: gl.constexpr):
    """Warp-specialised: a 4-warp producer (cp.async ring of STAGES K/V tiles) and two consumer
    warpgroups of 64 query rows each (the default partition is one of them; launch with 4 warps)."""
    # strides declared multiples of 8 elements (16 bytes: cp.async; jax-triton passes no hints)
    sqb, sqh, sqn = aligned(sqb, 8), aligned(sqh, 8), aligned(sqn, 8)
    skb, skh, skn = aligned(skb, 8), aligned(skh, 8), aligned(skn, 8)
    svb, svh, svn = aligned(svb, 8), aligned(svh, 8), aligned(svn, 8)
    sob, soh, son = aligned(sob, 8), aligned(soh, 8), aligned(son, 8)
    BLOCK_M: gl.constexpr = 128
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m = gl.program_id(0)
    if CAUSAL:  # the longest rows first
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    q_off = b.to(gl.int64) * sqb + h.to(gl.int64) * sqh
    kv_off = b.to(gl.int64) * skb + h.to(gl.int64) * skh
    o_off = b.to(gl.int64) * sob + h.to(gl.int64) * soh
    start_m = pid_m * BLOCK_M
    smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], gl.bfloat16)
    q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, D], gl.bfloat16)
    q0 = gl.allocate_shared_memory(dtype, [64, D], q_smem_layout)
    q1 = gl.allocate_shared_memory(dtype, [64, D], q_smem_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], smem_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], smem_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=128)
        mbarrier.init(empty.index(i), count=2)
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turns.index(0), count=1)
    mbarrier.init(turns.index(1), count=1)
    if PINGPONG:
        mbarrier.arrive(turns.index(0), count=1)  # warpgroup 0 issues first

    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    offs_r = gl.arange(0, 64, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    for half in gl.static_range(2):
        rows = start_m + half * 64 + offs_r
        qt = gl.load(Q + q_off + rows.to(gl.int64)[:, None] * sqn + offs_d[None, :], mask=(rows < N)[:, None],
                     other=0.0)
        if half == 0:
            q0.store(qt)
        else:
            q1.store(qt)
    fence_async_shared()
    gl.thread_barrier()

    n_tiles = _n_tiles(start_m, N, CAUSAL, BLOCK_M, BLOCK_N)
    gl.warp_specialize([
        (_ws_consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, o_off, bh, son, N, qk_scale, start_m, n_tiles,
                        turns.index(0), turns.index(1), CAUSAL, BLOCK_N, D, STAGES, FMA, PINGPONG)),
        (_ws_consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, o_off, bh, son, N, qk_scale, start_m + 64,
                        n_tiles, turns.index(1), turns.index(0), CAUSAL, BLOCK_N, D, STAGES, FMA, PINGPONG)),
        (_ws_producer, (k_bufs, v_bufs, ready, empty, K, V, kv_off, N, skn, svn, n_tiles, BLOCK_N, D, STAGES,
                        CHUNK)),
    ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])


def compile_only(causal=True, stages=3, ws=False, regs=(240, 24), chunk=32, d=128):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    sig = {n: "*bf16" for n in "QKVO"}
    sig["LSE"] = "*fp32"
    for n in ("sqb", "sqh", "sqn", "skb", "skh", "skn", "svb", "svh", "svn", "sob", "soh", "son", "H", "N"):
        sig[n] = "i32"
    sig["qk_scale"] = "fp32"
    if ws:
        consts = {"CAUSAL": causal, "BLOCK_N": 128, "D": d, "STAGES": stages, "CHUNK": chunk,
                  "PRODUCER_REGS": regs[1], "CONSUMER_REGS": regs[0], "FMA": True, "PINGPONG": False}
    else:
        consts = {"CAUSAL": causal, "BLOCK_M": 128, "BLOCK_N": 128, "D": 128, "STAGES": stages, "num_warps": 8}
    for n in consts:
        sig[n] = "constexpr"
    attrs = {(i, ): [["tt.divisibility", 16]] for i in range(5)}
    for i in range(5, 17):  # strides multiples of 16 elements, as Triton's launcher specialises them
        attrs[(i, )] = [["tt.divisibility", 16]]
    if ws:  # outputs last (jax-triton's order)
        sig = {n: sig[n] for n in ["Q", "K", "V"] + list(sig)[5:] if n not in consts} | {"O": "*bf16", "LSE": "*fp32"}
        sig |= {n: "constexpr" for n in consts}
        attrs = {(i, ): [["tt.divisibility", 16]] for i in [0, 1, 2, 18, 19]}  # as jax-triton: no scalar hints
    src = GluonASTSource(fn=gluon_fwd_ws if ws else gluon_fwd, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4 if ws else 8})


def launch(q, k, v, causal, stages=3, block_n=128, ws=None):
    import torch
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(N, 128), B * H)
    if ws is not None:
        gluon_fwd_ws[grid](q, k, v, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], H, N,
                           D**-0.5 * 1.4426950408889634, o, lse, CAUSAL=causal, BLOCK_N=block_n, D=D, STAGES=stages,
                           CHUNK=ws[2], CONSUMER_REGS=ws[0], PRODUCER_REGS=ws[1], FMA=ws[3],
                           PINGPONG=ws[4] if len(ws) > 4 else False, num_warps=4)
        return o, lse
    gluon_fwd[grid](q, k, v, o, lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], H, N,
                    D**-0.5 * 1.4426950408889634, CAUSAL=causal, BLOCK_M=128, BLOCK_N=block_n, D=D, STAGES=stages,
                    num_warps=8)
    return o, lse


VARIANTS = [(3, (240, 24, 32, True)), (3, (240, 24, 32, True, True)), (3, (240, 24, 32, False))]


def main():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import ato_torch
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    print("GPU", dev)
    shapes = ((2, 4, 1000, 128, True), (2, 4, 1000, 128, False), (4, 32, 4096, 128, False),
              (4, 32, 4096, 128, True), (1, 32, 16384, 128, True))
    if "--d64" in sys.argv:
        shapes = ((2, 4, 1000, 64, True), (16, 16, 1024, 64, False), (16, 16, 1024, 64, True))
    for B, H, N, D, causal in shapes:
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        sl = slice(0, 2)  # the float64 reference on two heads (memory)
        ref = F.scaled_dot_product_attention(q[:1, sl].double(), k[:1, sl].double(), v[:1, sl].double(),
                                             is_causal=causal).float()
        flops = 4 * B * H * N * N * D / (2 if causal else 1)
        row = f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}:"
        for stages, ws in VARIANTS:
            o, lse = launch(q, k, v, causal, stages, ws=ws)
            err = ((o[:1, sl].float() - ref).norm() / ref.norm()).item()
            ms = triton.testing.do_bench(lambda: launch(q, k, v, causal, stages, ws=ws), warmup=50, rep=300)
            row += f" gluon s{stages} {ws} {ms*1e3:8.1f} us ({flops/ms/1e9:5.0f} TF/s, err {err:.1e}) |"
        oa = ato_torch.flash_attention(q, k, v, causal=causal)
        erra = ((oa[:1, sl].float() - ref).norm() / ref.norm()).item()
        ms = triton.testing.do_bench(lambda: ato_torch.flash_attention(q, k, v, causal=causal), warmup=50, rep=300)
        row += f" ato {ms*1e3:8.1f} us ({flops/ms/1e9:5.0f}, err {erra:.1e}) |"
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ms = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup=50,
                                         rep=300)
        row += f" cuDNN {ms*1e3:8.1f} us ({flops/ms/1e9:5.0f})"
        print(row, flush=True)


if __name__ == "__main__":
    if "--compile" in sys.argv:
        sys.path.insert(0, "tests")
        from test_compile_sm90 import cubin_resources
        for causal, ws in ((False, False), (True, False), (False, True), (True, True)):
            k = compile_only(causal, ws=ws)
            print("ws", ws, end=" ")
            print("causal", causal, cubin_resources(k.asm["cubin"]), "smem", k.metadata.shared)
            ptx = k.asm["ptx"]
            print("  wgmma.mma_async", ptx.count("wgmma.mma_async"), "wait_group", ptx.count("wgmma.wait_group"),
                  "cp.async", ptx.count("cp.async.cg") + ptx.count("cp.async.ca"), "bar.sync", ptx.count("bar.sync"), "setmaxnreg", ptx.count("setmaxnreg"))
            open(f"/tmp/gluon_ws{int(ws)}_c{int(causal)}.ptx", "w").write(ptx)
    else:
        if "--d64" in sys.argv:
            VARIANTS[:] = [(3, (240, 24, 64, True))]
        main()
