"""Would TMA loads speed up the Gluon flash forward? fa_fwd_hopper_kernel's consumers as they are,
its K/V producer replaced by one that issues TMA copies (descriptors built in the kernel over the
program's [Nk, D] head, rows past Nk zero-filled; one mbarrier arrival with the tile's bytes
expected), in 4 warps or 1. Plain causal / full only. Timed (do_bench medians, alternating) against
ato_torch.flash_attention (cp.async producer) in one process, o and lse compared with ato's and
with a float32 reference. Then the same kernel from jax-triton 0.3.1, which passes Triton's global
scratch (where the kernel builds its descriptors) as a null pointer: the kernel's last output,
SCRATCH, is read instead (the PTX patched, ato_jax's Gluon compile path), o and lse against
torch's bit for bit. Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_tma.py
"""
import numpy as np
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.testing import do_bench

import ato_torch
from ato_core.ops.flash_attention import hopper as H
from ato_core.ops.flash_attention import plans


@gluon.jit
def _tma_producer(k_bufs, v_bufs, ready, empty, k_desc, v_desc, lo, hi, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    for j in range(hi - lo):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(slot), 2 * k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [(lo + j) * BLOCK_N, 0], ready.index(slot), k_bufs.index(slot))
        tma.async_copy_global_to_shared(v_desc, [(lo + j) * BLOCK_N, 0], ready.index(slot), v_bufs.index(slot))


@gluon.jit
def fa_fwd_tma_kernel(Q, K, V, Hq, G, Nq, Nk, qk_scale, sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sob, soh, son,
                      O, LSE, SCRATCH, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                      PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    sqb, sqh, sqn = H._strides8(sqb, sqh, sqn)
    skb, skh, skn = H._strides8(skb, skh, skn)
    svb, svh, svn = H._strides8(svb, svh, svn)
    sob, soh, son = H._strides8(sob, soh, son)
    BLOCK_M: gl.constexpr = 2 * H.ROWS
    pid_m, b, h, hk = H._query_program(Hq, G, CAUSAL)
    bh = gl.program_id(1)
    start_m = pid_m * BLOCK_M
    q_off = H._head(b, h, 0, sqb, sqh, sqn, False)
    k_off = H._head(b, hk, 0, skb, skh, skn, False)
    v_off = H._head(b, hk, 0, svb, svh, svn, False)
    o_off = H._head(b, h, 0, sob, soh, son, False)
    lse_off = bh.to(gl.int64) * Nq
    dtype: gl.constexpr = Q.dtype.element_ty
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], dtype)
    k_desc = tma.make_tensor_descriptor(K + k_off, [Nk, D], [skn, 1], [BLOCK_N, D], layout)
    v_desc = tma.make_tensor_descriptor(V + v_off, [Nk, D], [svn, 1], [BLOCK_N, D], layout)
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([H.ROWS, D], dtype)
    q0 = gl.allocate_shared_memory(dtype, [H.ROWS, D], q_layout)
    q1 = gl.allocate_shared_memory(dtype, [H.ROWS, D], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    H._load_rows(q0, Q, q_off, sqn, start_m, Nq, D)
    H._load_rows(q1, Q, q_off, sqn, start_m + H.ROWS, Nq, D)
    fence_async_shared()
    gl.thread_barrier()
    shift = Nk - Nq
    tiles = H._key_tiles(start_m, Nk, 0, shift, CAUSAL, False, BLOCK_M, BLOCK_N)
    seg = (Q, 0, Q, 0)
    gl.warp_specialize([
        (H._consumer, (q0, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, 0, shift,
                       qk_scale, 0.0, (0.0, 0.0), seg, shift, start_m, tiles, None, CAUSAL, False, False, False,
                       False, False, BLOCK_N, D, STAGES)),
        (H._consumer, (q1, k_bufs, v_bufs, ready, empty, O, LSE, LSE, o_off, lse_off, son, Nq, Nq, Nk, 0, shift,
                       qk_scale, 0.0, (0.0, 0.0), seg, shift, start_m + H.ROWS, tiles, None, CAUSAL, False, False,
                       False, False, False, BLOCK_N, D, STAGES)),
        (_tma_producer, (k_bufs, v_bufs, ready, empty, k_desc, v_desc, tiles[0], tiles[3], BLOCK_N, STAGES)),
    ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


def tma_forward(q, k, v, causal, producer_warps, stages=plans.HOPPER["STAGES"], consumer_regs=240):
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(B, Hq, Nq, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(Nq, 128), B * Hq)
    scratch = torch.empty(16, device=q.device, dtype=torch.int8)  # unused here: Triton's launcher passes its own
    fa_fwd_tma_kernel[grid](q, k, v, Hq, Hq // Hkv, Nq, Nk, D ** -0.5 * 1.4426950408889634, *q.stride()[:3],
                            *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], o, lse, scratch, CAUSAL=causal, BLOCK_N=128, D=D,
                            STAGES=stages, PRODUCER_WARPS=producer_warps, PRODUCER_REGS=24,
                            CONSUMER_REGS=consumer_regs, num_warps=4)
    return o, lse


def jax_tma_forward(q, k, v, causal, producer_warps, stages):
    """tma_forward from JAX: jax-triton's triton_call through ato_jax's Gluon compile path."""
    import jax
    import numpy as np

    from ato_jax import launcher
    jt = launcher.import_jax_triton()
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    grid = (triton.cdiv(Nq, 128), B * Hq)

    def strides(shape):
        return (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3])

    out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, Hq, Nq), np.float32),
                 jax.ShapeDtypeStruct((grid[0] * grid[1] * 256 + 128,), np.int8)]
    o, lse, _ = jt.triton_call(q, k, v, Hq, Hq // Hkv, Nq, Nk, np.float32(D ** -0.5 * 1.4426950408889634),
                               *strides(q.shape), *strides(k.shape), *strides(v.shape), *strides(q.shape),
                               kernel=fa_fwd_tma_kernel, out_shape=out_shape, grid=grid, num_warps=4, num_stages=3,
                               CAUSAL=causal, BLOCK_N=128, D=D, STAGES=stages, PRODUCER_WARPS=producer_warps,
                               PRODUCER_REGS=24, CONSUMER_REGS=240)
    return o, lse


def check_jax():
    import jax
    import jax.numpy as jnp
    for B, Hq, Hkv, N, causal in [(2, 8, 2, 1000, True), (1, 4, 4, 2048, False)]:
        g = torch.Generator(device="cuda").manual_seed(N)
        q = torch.randn(B, Hq, N, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, N, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        o, lse = tma_forward(q, k, v, causal, 1, 3)
        jq, jk, jv = (jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) for t in (q, k, v))
        try:
            jo, jlse = jax.jit(lambda a, b, c: jax_tma_forward(a, b, c, causal, 1, 3))(jq, jk, jv)
            jo = torch.from_numpy(np.asarray(jo.astype(jnp.float32))).cuda()
            jlse = torch.from_numpy(np.asarray(jlse)).cuda()
            print(f"JAX B{B} Hq{Hq} Hkv{Hkv} N{N} {'causal' if causal else 'full'}: o == torch's {torch.equal(jo, o.float())}"
                  f", lse {torch.equal(jlse, lse)}; max |o diff| {float((jo - o.float()).abs().max()):.3g}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"JAX B{B} Hq{Hq} Hkv{Hkv} N{N}: failed: {type(exc).__name__}: {str(exc)[:600]}", flush=True)


def errors(o, lse, q, k, v, causal):
    """max |o - reference| and max |lse - reference| against float32 math (small shapes)."""
    G = q.shape[1] // k.shape[1]
    kf, vf = (t.float().repeat_interleave(G, 1) for t in (k, v))
    s = q.float() @ kf.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(m - n + 1), float("-inf"))
    return float((torch.softmax(s, -1) @ vf - o.float()).abs().max()), float((torch.logsumexp(s, -1) - lse).abs().max())


def main():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    print(f"GPU {torch.cuda.get_device_name()}", flush=True)
    check_jax()
    for B, Hq, Hkv, N, causal in [(1, 4, 4, 1000, True), (2, 8, 2, 3000, False), (4, 32, 32, 4096, False),
                                  (4, 32, 32, 4096, True), (1, 32, 32, 16384, True), (2, 32, 8, 8192, True)]:
        g = torch.Generator(device="cuda").manual_seed(N)
        q = torch.randn(B, Hq, N, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, N, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        o_ref, lse_ref = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        runs = {"ato (cp.async)": lambda: ato_torch.flash_attention(q, k, v, causal=causal)}
        line = f"B{B} Hq{Hq} Hkv{Hkv} N{N} D128 bf16 {'causal' if causal else 'full'}:"
        if N <= 4096 and B * Hq <= 32:
            line += " ato's error against fp32 (o, lse) %.3g %.3g;" % errors(o_ref, lse_ref, q, k, v, causal)
        for w, st in ((4, 3), (1, 3)):
            try:
                o, lse = tma_forward(q, k, v, causal, w, st)
                line += (f" TMA {w} warps {st} stages: o bits equal {torch.equal(o, o_ref)}, lse {torch.equal(lse, lse_ref)}"
                         f", max |o diff| {float((o.float() - o_ref.float()).abs().max()):.3g}"
                         f", |lse diff| {float((lse - lse_ref).abs().max()):.3g}")
                if N <= 4096 and B * Hq <= 32:
                    line += ", error against fp32 %.3g %.3g" % errors(o, lse, q, k, v, causal)
                line += ";"
                runs[f"TMA {w}w {st}st"] = (lambda w=w, st=st: tma_forward(q, k, v, causal, w, st))
            except Exception as exc:  # noqa: BLE001
                line += f" TMA {w}w {st}st failed: {type(exc).__name__}: {str(exc)[:300]};"
        print(line, flush=True)
        flops = 4 * B * Hq * N * N * 128 * (0.5 if causal else 1.0)
        times = {name: [] for name in runs}
        for _ in range(3):
            for name, fn in runs.items():
                times[name].append(do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3)
        base = min(times["ato (cp.async)"])
        for name, ts in times.items():
            print(f"    {name:16s} " + " ".join(f"{t:8.1f}" for t in ts) + f" us  best {min(ts) / base:.3f}x ato, "
                  f"{flops / min(ts) / 1e6:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
