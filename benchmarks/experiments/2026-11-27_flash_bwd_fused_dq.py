"""Issue 22: a Gluon backward with dQ in the dK / dV kernel (5 GEMMs a tile pair, FA3's count,
against the 7 of hopper.fa_bwd_dkdv_hopper_kernel + fa_bwd_dq_hopper_kernel), deterministic.

The dK / dV program of 128 keys (two consumer warpgroups of 64) also computes, for each query
tile of 64 rows it visits, dQ_w = dS_w^T K_w [64 rows, 128 D] for its warpgroup's keys (dS^T
through shared memory, an SS wgmma: A is dS^T as a transposed view) and adds it to an fp32 dQ
accumulator in global memory in a fixed order, so the sum's bits do not depend on scheduling:
tile i of head hq takes its contributions from key block J(i) down to 0 (warpgroup 0, then 1),
where J(i) is the last block that sees the tile. Each thread spins (ld.acquire) on a per-tile
counter until the 128 threads of every earlier contribution have released it (atom.add.release),
adds its elements (load, add, store), then releases. Causal: block j reaches tile i two tiles
after block j + 1, which adds first; no wait in steady state. Programs run j descending
(program 0 is the last block), so every contribution a program waits for comes from a
program launched before it. A last pass scales dQ and casts it.

The options of fa_bwd_dkdv_hopper_kernel: causal or not, GQA, any Nq, Nk, a window, q / kv
lengths, ALiBi.

    python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py --compile  # resources (CPU)
    python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py            # H100: errors, bits, time

ORDERED = False adds with fp32 atomics in any order instead (not deterministic): what the
ordering costs. Run it under a timeout on the GPU: a wrong turn count waits forever (the
counts against the visited tiles: ..._fused_dq_turns.py, 0 of 3096 configurations wrong).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,  # noqa: E402
                                                             warpgroup_mma, warpgroup_mma_wait)

from ato_core.launch import kernel  # noqa: E402
from ato_core.ops.flash_attention.hopper import (KEYS, ROWS, _alibi, _dkdv_producer, _held, _lengths,  # noqa: E402
                                                 _query_tiles, _ring, _slope2, _strides8, _visible)

# (ld.acquire spin: labels inside { } are local to the block, so the asm may be inlined often)
_WAIT = gl.constexpr("""{
.reg .pred p;
.reg .b32 v;
WAIT_LOOP:
ld.acquire.gpu.global.b32 v, [$1];
setp.lt.s32 p, v, $2;
@p bra WAIT_LOOP;
mov.b32 $0, v;
}""")


@gluon.jit
def _wait_turn(SEM, sem_off, target):
    """Every thread of the warpgroup waits until SEM[sem_off] >= target (acquire)."""
    flat: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ptrs = SEM + sem_off + gl.zeros([128], gl.int64, flat)
    return gl.inline_asm_elementwise(_WAIT, "=r,l,r", [ptrs, gl.full([128], target, gl.int32, flat)], gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _release(SEM, sem_off, seen):
    """Each thread adds 1 to SEM[sem_off] (release: its dQ stores are visible first); seen (the
    waited value) only orders this after the wait."""
    flat: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ptrs = SEM + sem_off + gl.zeros([128], gl.int64, flat)
    gl.atomic_add(ptrs, gl.full([128], 1, gl.int32, flat) + seen * 0, sem="release", scope="gpu")


@gluon.jit
def _fused_tile(k_smem, v_smem, q_bufs, do_bufs, ds_smem, ready, empty, c, i, dk, dv, zero_s, LSE2, DELTA,
                DQA, SEM, lse_off, dqa_off, sem_base, Nq, kv_len, lo_shift, hi_shift, qk_scale, keys, offs_q, offs_r,
                offs_d, zero_q, alibi, j, nbk, w, op_layout: gl.constexpr, s_layout: gl.constexpr,
                CAUSAL: gl.constexpr, WINDOW: gl.constexpr, KV_LENS: gl.constexpr, ALIBI: gl.constexpr,
                MASK: gl.constexpr, ORDERED: gl.constexpr, STAGES: gl.constexpr):
    """hopper._dkdv_tile, plus dQ_w = dS_w^T K_w added to DQA rows of tile i at its turn: after
    the warpgroups of blocks J(i) down to j + 1 and (w = 1) warpgroup 0 of block j, where J(i)
    is the last block that visits tile i (hopper._query_tiles' lo <= i; nbk: the blocks before
    kv_len). The turns against the visited tiles: ..._fused_dq_turns.py."""
    last = nbk - 1
    if CAUSAL or WINDOW:
        last = gl.minimum(gl.cdiv(ROWS * (i + 1) + hi_shift, 2 * KEYS), nbk) - 1
    target = 128 * (2 * (last - j) + w)
    slot = c % STAGES
    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
    fence_async_shared()
    q_s = q_bufs.index(slot)
    do_s = do_bufs.index(slot)
    st_tok = warpgroup_mma(k_smem, q_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dpt_tok = warpgroup_mma(v_smem, do_s.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    rows = i * ROWS + offs_q
    inside = rows < Nq
    lse2 = gl.load(LSE2 + lse_off + rows, mask=inside, other=float("inf"))
    delta = gl.load(DELTA + lse_off + rows, mask=inside, other=0.0)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok, ))
    if ALIBI:
        keys_f, shift, slope2 = alibi
        pt = gl.exp2(_alibi(st, qk_scale, (rows + shift).to(gl.float32)[None, :], keys_f[:, None], slope2)
                     - lse2[None, :])
    else:
        pt = gl.exp2(gl.fma(st, gl.full(st.shape, qk_scale, gl.float32, s_layout), -lse2[None, :]))
    if MASK:
        visible = _visible(keys[:, None], rows[None, :], kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, KV_LENS)
        pt = gl.where(visible, pt, 0.0)
    dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt_tok, ))
    dst = (pt * (dpt - delta[None, :])).to(q_bufs.dtype)
    ds_smem.store(dst)
    fence_async_shared()
    dv_tok = warpgroup_mma(gl.convert_layout(pt.to(q_bufs.dtype), op_layout), do_s, dv, is_async=True)
    dk_tok = warpgroup_mma(gl.convert_layout(dst, op_layout), q_s, dk, is_async=True)
    dv = warpgroup_mma_wait(num_outstanding=1, deps=(dv_tok, ))
    dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok, ))
    mbarrier.arrive(empty.index(slot), count=1)
    rows_a = i * ROWS + offs_r
    ptrs = DQA + dqa_off + rows_a.to(gl.int64)[:, None] * 128 + offs_d[None, :]
    keep = (rows_a < Nq)[:, None]
    if ORDERED:
        # at its turn: the sum so far is the dQ wgmma's accumulator (64 registers a thread live,
        # not 128 as a load beside a finished product would need), written back after
        seen = _wait_turn(SEM, sem_base + i, target)
        dq_tok = warpgroup_mma(ds_smem.permute((1, 0)), k_smem, gl.load(ptrs, mask=keep, other=0.0), is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
        gl.store(ptrs, dq, mask=keep)
        _release(SEM, sem_base + i, seen)
    else:  # fp32 atomics in any order (FA3's default): the bound on what the ordering costs
        dq_tok = warpgroup_mma(ds_smem.permute((1, 0)), k_smem, zero_q, use_acc=False, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
        gl.atomic_add(ptrs, dq, mask=keep, sem="relaxed")
    return dk, dv


@gluon.jit
def _fused_consumer(k_smem, v_smem, q_bufs, do_bufs, ds_smem, ready, empty, LSE2, DELTA, SLOPES, DQA, SEM, DK, DV,
                    dk_off, dv_off, sdkn, sdvn, s_ab, s_ah, Hq, G, hk, b, Nq, Nk, kv_len, lo_shift, hi_shift, shift,
                    qk_scale, sm_scale, k0, j, nbk, w, tiles, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
                    KV_LENS: gl.constexpr, ALIBI: gl.constexpr, ORDERED: gl.constexpr, D: gl.constexpr,
                    STAGES: gl.constexpr):
    """hopper._dkdv_consumer (warpgroup w of key block j; nbk blocks before kv_len), adding its
    dQ in turn."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 16])
    a_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=a_layout, k_width=2)
    keys = k0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
    offs_q = gl.arange(0, ROWS, layout=gl.SliceLayout(0, s_layout))
    offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, a_layout))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, a_layout))
    zero_s = gl.zeros([KEYS, ROWS], gl.float32, s_layout)
    zero_q = gl.zeros([ROWS, D], gl.float32, a_layout)
    dk = gl.zeros([KEYS, D], gl.float32, a_layout)
    dv = gl.zeros([KEYS, D], gl.float32, a_layout)
    lo, full_lo, full_hi, hi = tiles
    n_q = gl.cdiv(Nq, ROWS)
    c = 0
    for g in range(G):
        hq = hk * G + g
        lse_off = (b * Hq + hq).to(gl.int64) * Nq
        dqa_off = lse_off * D
        sem_base = (b * Hq + hq) * n_q
        alibi = (keys.to(gl.float32), shift, _slope2(SLOPES, b, hq, s_ab, s_ah, ALIBI))
        for i in range(lo, full_lo):
            dk, dv = _fused_tile(k_smem, v_smem, q_bufs, do_bufs, ds_smem, ready, empty, c, i, dk, dv, zero_s,
                                 LSE2, DELTA, DQA, SEM, lse_off, dqa_off, sem_base, Nq, kv_len, lo_shift, hi_shift,
                                 qk_scale, keys, offs_q, offs_r, offs_d, zero_q, alibi, j, nbk, w, op_layout, s_layout,
                                 CAUSAL, WINDOW, KV_LENS, ALIBI, True, ORDERED, STAGES)
            c += 1
        for i in range(full_lo, full_hi):
            dk, dv = _fused_tile(k_smem, v_smem, q_bufs, do_bufs, ds_smem, ready, empty, c, i, dk, dv, zero_s,
                                 LSE2, DELTA, DQA, SEM, lse_off, dqa_off, sem_base, Nq, kv_len, lo_shift, hi_shift,
                                 qk_scale, keys, offs_q, offs_r, offs_d, zero_q, alibi, j, nbk, w, op_layout, s_layout,
                                 CAUSAL, WINDOW, KV_LENS, ALIBI, False, ORDERED, STAGES)
            c += 1
        for i in range(full_hi, hi):  # the tiles past the window's lower edge, or of a block past kv_len
            dk, dv = _fused_tile(k_smem, v_smem, q_bufs, do_bufs, ds_smem, ready, empty, c, i, dk, dv, zero_s,
                                 LSE2, DELTA, DQA, SEM, lse_off, dqa_off, sem_base, Nq, kv_len, lo_shift, hi_shift,
                                 qk_scale, keys, offs_q, offs_r, offs_d, zero_q, alibi, j, nbk, w, op_layout, s_layout,
                                 CAUSAL, WINDOW, KV_LENS, ALIBI, True, ORDERED, STAGES)
            c += 1
    offs_k = k0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, a_layout))
    keep = (offs_k < Nk)[:, None]
    gl.store(DK + dk_off + offs_k.to(gl.int64)[:, None] * sdkn + offs_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=keep)
    gl.store(DV + dv_off + offs_k.to(gl.int64)[:, None] * sdvn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=keep)


@kernel(inputs=11, outputs=2, gluon=True)
def fa_bwd_fused_hopper_kernel(Q, K, V, DO, LSE2, DELTA, QLEN, KVLEN, SLOPES, DQA, SEM, Hq, G, Nq, Nk, qk_scale,
                               sm_scale, left, right, s_ab, s_ah, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sdob,
                               sdoh, sdon, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, DK, DV, CAUSAL: gl.constexpr,
                               D: gl.constexpr, STAGES: gl.constexpr, CHUNK: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                               ORDERED: gl.constexpr = True, WINDOW: gl.constexpr = False, Q_LENS: gl.constexpr = False,
                               KV_LENS: gl.constexpr = False, ALIBI: gl.constexpr = False):
    """Grid (cdiv(Nk, 2 KEYS), B * Hkv): fa_bwd_dkdv_hopper_kernel's (its options too), key
    block j = the last first. DQA: [B, Hq, Nq, D] fp32, SEM: [B, Hq, cdiv(Nq, ROWS)] int32,
    both zeroed before."""
    sqb, sqh, sqn = _strides8(sqb, sqh, sqn)
    skb, skh, skn = _strides8(skb, skh, skn)
    svb, svh, svn = _strides8(svb, svh, svn)
    sdob, sdoh, sdon = _strides8(sdob, sdoh, sdon)
    sdkb, sdkh, sdkn = _strides8(sdkb, sdkh, sdkn)
    sdvb, sdvh, sdvn = _strides8(sdvb, sdvh, sdvn)
    dtype: gl.constexpr = Q.dtype.element_ty
    Hkv = Hq // G
    bh = gl.program_id(1)
    b = bh // Hkv
    hk = bh % Hkv
    nb = gl.num_programs(0)
    j = nb - 1 - gl.program_id(0)
    k0 = j * (2 * KEYS)
    q_len, kv_len, lo_shift, hi_shift = _lengths(QLEN, KVLEN, b, Nq, Nk, left, right, Q_LENS, KV_LENS)
    tiles = _query_tiles(k0, q_len, kv_len, lo_shift, hi_shift, CAUSAL, WINDOW, KV_LENS, 2 * KEYS)
    nbk = nb
    if KV_LENS:
        nbk = gl.cdiv(kv_len, 2 * KEYS)

    k_off = b.to(gl.int64) * skb + hk.to(gl.int64) * skh
    v_off = b.to(gl.int64) * svb + hk.to(gl.int64) * svh
    k0_s, k1_s, v0_s, v1_s = _held(K, V, k_off, v_off, skn, svn, k0, kv_len, KEYS, D)
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, ROWS], dtype)
    q_bufs = gl.allocate_shared_memory(dtype, [STAGES, ROWS, D], q_layout)
    do_bufs = gl.allocate_shared_memory(dtype, [STAGES, ROWS, D], q_layout)
    ds0 = gl.allocate_shared_memory(dtype, [KEYS, ROWS], ds_layout)
    ds1 = gl.allocate_shared_memory(dtype, [KEYS, ROWS], ds_layout)
    ready, empty = _ring(STAGES)

    dk_off = b.to(gl.int64) * sdkb + hk.to(gl.int64) * sdkh
    dv_off = b.to(gl.int64) * sdvb + hk.to(gl.int64) * sdvh
    gl.warp_specialize([
        (_dkdv_producer, (q_bufs, do_bufs, ready, empty, Q, DO, b.to(gl.int64) * sqb, b.to(gl.int64) * sdob, sqh,
                          sdoh, sqn, sdon, G, hk, q_len, tiles[0], tiles[3], D, STAGES, CHUNK)),
        (_fused_consumer, (k0_s, v0_s, q_bufs, do_bufs, ds0, ready, empty, LSE2, DELTA, SLOPES, DQA, SEM, DK, DV,
                           dk_off, dv_off, sdkn, sdvn, s_ab, s_ah, Hq, G, hk, b, Nq, Nk, kv_len, lo_shift, hi_shift,
                           kv_len - q_len, qk_scale, sm_scale, k0, j, nbk, 0, tiles, CAUSAL, WINDOW, KV_LENS, ALIBI,
                           ORDERED, D, STAGES)),
        (_fused_consumer, (k1_s, v1_s, q_bufs, do_bufs, ds1, ready, empty, LSE2, DELTA, SLOPES, DQA, SEM, DK, DV,
                           dk_off, dv_off, sdkn, sdvn, s_ab, s_ah, Hq, G, hk, b, Nq, Nk, kv_len, lo_shift, hi_shift,
                           kv_len - q_len, qk_scale, sm_scale, k0 + KEYS, j, nbk, 1, tiles, CAUSAL, WINDOW, KV_LENS,
                           ALIBI, ORDERED, D, STAGES)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


SETTINGS = {"STAGES": 2, "CHUNK": 32, "CONSUMER_REGS": 240}


def _launch(B, Hq, Hkv, Nq, Nk, causal, strides, scale, ordered=True):
    """The fused launch as a plan Launch (for compile_sm90): inputs q, k, v, do, lse2, delta, (no
    lengths, no slopes), dqa, sem; no window."""
    import math

    from ato_core.launch import Buffer, Launch

    qs, ks, vs, dos = strides
    far = Nq + Nk + 1
    return Launch(fa_bwd_fused_hopper_kernel, (math.ceil(Nk / 128), B * Hkv),
                  ("q", "k", "v", "do", "lse2", "delta", "q", "q", "q", "dqa", "sem"),
                  (Hq, Hq // Hkv, Nq, Nk, scale * 1.4426950408889634, scale, far, 0 if causal else far, 0, 0, *qs,
                   *ks, *vs, *dos, *ks, *vs),
                  (Buffer("dk", (B, Hkv, Nk, 128), "bfloat16"), Buffer("dv", (B, Hkv, Nk, 128), "bfloat16")),
                  {"CAUSAL": causal, "D": 128, **SETTINGS, "ORDERED": ordered}, num_warps=4)


def compile_only():
    import dataclasses

    import test_compile_sm90 as base
    from ato_core.launch import Plan
    from ato_core.testing import gpu_spec

    B, Hq, Hkv, Nq, Nk = 2, 8, 2, 1000, 700
    q, k = gpu_spec((B, Hq, Nq, 128)), gpu_spec((B, Hkv, Nk, 128))
    specs = {"q": q, "k": k, "v": k, "do": q, "lse2": gpu_spec((B, Hq, Nq), "float32"),
             "delta": gpu_spec((B, Hq, Nq), "float32"), "dqa": gpu_spec((B, Hq, Nq, 128), "float32"),
             "sem": gpu_spec((B, Hq, 16), "int32")}
    for ordered in (True, False):
        for causal in (False, True):
            launch = _launch(B, Hq, Hkv, Nq, Nk, causal, (q.strides[:3], k.strides[:3], k.strides[:3], q.strides[:3]),
                             128 ** -0.5, ordered)
            compiled = base.compile_sm90(launch, Plan((launch,), ("dk", "dv")), specs)
            print("ordered" if ordered else "atomic", "causal" if causal else "full",
                  base.cubin_resources(compiled.asm["cubin"]), "smem", compiled.metadata.shared, flush=True)
    # every option: a window (100, 20), q / kv lengths, [B, Hq] ALiBi slopes
    specs.update(q_lengths=gpu_spec((B,), "int32"), kv_lengths=gpu_spec((B,), "int64"),
                 alibi_slopes=gpu_spec((B, Hq), "float32"))
    launch = _launch(B, Hq, Hkv, Nq, Nk, False, (q.strides[:3], k.strides[:3], k.strides[:3], q.strides[:3]),
                     128 ** -0.5)
    launch = dataclasses.replace(launch, inputs=launch.inputs[:6] + ("q_lengths", "kv_lengths", "alibi_slopes") + launch.inputs[9:],
                             scalars=launch.scalars[:6] + (100, 20, Hq, 1) + launch.scalars[10:],
                             constexprs=dict(launch.constexprs, WINDOW=True, Q_LENS=True, KV_LENS=True, ALIBI=True))
    compiled = base.compile_sm90(launch, Plan((launch,), ("dk", "dv")), specs)
    print("ordered window (100, 20), lengths, ALiBi", base.cubin_resources(compiled.asm["cubin"]), "smem",
          compiled.metadata.shared, flush=True)


def main():
    import torch
    import triton

    import ato_torch
    from ato_core.ops.flash_attention import plans
    from ato_torch.launcher import run_plan, spec, target_for

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, Hq, Hkv, Nq, Nk, causal in [(2, 4, 2, 1000, 1000, True), (1, 4, 4, 300, 700, False),
                                       (1, 2, 2, 777, 300, True), (4, 32, 32, 4096, 4096, False),
                                       (4, 32, 32, 4096, 4096, True), (2, 32, 8, 8192, 8192, True)]:
        print(f"(B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} causal {causal}: starting)", flush=True)  # a hang shows here
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(o)
        target = target_for(q)
        plan = plans.backward_plan(*(spec(t) for t in (q, k, v, do)), causal=causal, softmax_scale=None,
                                   has_dlse=False, target=target)
        env = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse}
        ref = run_plan(plan, env, target)  # dq, dk, dv of the current Gluon backward
        delta_step = type(plan)((plan.launches[0],), ("delta", "lse2"))
        delta, lse2 = run_plan(delta_step, env, target)
        scale = 128 ** -0.5
        n_q = triton.cdiv(Nq, 64)

        def fused(ordered=True):
            dqa = torch.zeros(B, Hq, Nq, 128, device="cuda", dtype=torch.float32)
            sem = torch.zeros(B, Hq, n_q, device="cuda", dtype=torch.int32)
            dk, dv = torch.empty_like(k), torch.empty_like(v)
            far = Nq + Nk + 1
            fa_bwd_fused_hopper_kernel[(triton.cdiv(Nk, 128), B * Hkv)](
                q, k, v, do, lse2, delta, q, q, q, dqa, sem, Hq, Hq // Hkv, Nq, Nk, scale * 1.4426950408889634, scale,
                far, 0 if causal else far, 0, 0,
                *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dk.stride()[:3],
                *dv.stride()[:3], dk, dv, CAUSAL=causal, D=128, ORDERED=ordered, num_warps=4, **SETTINGS)
            return (dqa * scale).to(q.dtype), dk, dv

        t_ref = triton.testing.do_bench(lambda: run_plan(plan, env, target), warmup=25, rep=200) * 1e3
        line = f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} {'causal' if causal else 'full'}: Gluon backward (delta, dkdv, dq) " \
               f"{t_ref:8.1f} us"
        for ordered in (True, False):
            runs = [fused(ordered) for _ in range(3)]
            same = all(torch.equal(a, b) for r in runs[1:] for a, b in zip(r, runs[0]))
            errs = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(runs[0], ref)]
            t = triton.testing.do_bench(lambda: fused(ordered), warmup=25, rep=200) * 1e3
            line += (f" | {'ordered' if ordered else 'atomic'} (+ zeroing, cast; no delta) {t:8.1f} us, rel L2 dq "
                     f"{errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e}, bits equal over 3 runs: {same}")
        print(line, flush=True)


if __name__ == "__main__":
    compile_only() if "--compile" in sys.argv else main()
