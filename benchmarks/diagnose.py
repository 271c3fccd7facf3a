"""GPU diagnostics for the linear-attention family (not a test; prints findings). On the GPU
machine: bash benchmarks/diagnose_run.sh COMMAND [ARGS] (installs, then runs this).

  bisect B H N Dk Dv dtype [stages=S] [min_tile=T] [bf16dot=0]
      causal ELU+1 forward and backward launch by launch: each half-precision launch against
      the same launch on fp32 copies of its inputs (a few 1e-3 apart when right, O(1) when not)
  launches      each launch of the bench shape, timed from torch (do_bench) and from JAX
  bitwise       torch vs JAX bits, per shape and dtype
  sweep WAVES,.. WARPS,.. CHUNK,.. OUT_CHUNKS,..   torch causal/bidirectional times
  sweep_bidir   the bidirectional forward kernels alone, over warps, stages and tiling
  ptx DIR       the PTX and TTGIR torch and jax-triton compile for la_fwd_kernel
                (set JAX_TRITON_DUMP_DIR)
  profile DIR   CUDA kernels of back-to-back causal calls from both frameworks (CUPTI)
"""

import dataclasses
import os
import sys

import torch

from ato_core import linear_attention as core
from ato_torch import launcher as tlaunch
from ato_torch.launcher import spec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(B, H, N, Dk, Dv, dtype, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k = (torch.randn(B, H, N, Dk, device=DEVICE, generator=g).to(dtype) for _ in range(2))
    v, do = (torch.randn(B, H, N, Dv, device=DEVICE, generator=g).to(dtype) for _ in range(2))
    S0 = torch.rand(B, H, Dk, Dv, device=DEVICE, generator=g) * 4
    z0 = torch.rand(B, H, Dk, device=DEVICE, generator=g) * 4
    return q, k, v, do, S0, z0


def _plans(q, k, v, do, causal, target, state=None):
    """Forward and backward plans; with ``state`` (S, z): an initial state and a final-state
    cotangent of those shapes."""
    init = (spec(state[0]), spec(state[1])) if state is not None else None
    fplan, _ = core.forward_plan(spec(q), spec(k), spec(v), causal=causal, feature_map="elu", eps=1e-6,
                                 initial_state=init, target=target)
    bplan = core.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, feature_map="elu", eps=1e-6,
                               has_dfinal=state is not None, target=target)
    return fplan, bplan


def _launch_env(plan_f, plan_b, env):
    """Yields (launch, env before it) for every launch of forward then backward."""
    for plan in (plan_f, plan_b):
        if plan is plan_b:  # the backward's residuals: the forward's results
            env["S_res"], env["z_res"] = (env[n] for n in plan_f.results[4:6])
        for launch in plan.launches:
            yield launch, dict(env)
            sub = dataclasses.replace(plan, launches=(launch,), results=tuple(b.name for b in launch.outputs))
            outs = tlaunch.run_plan(sub, env, tlaunch.target_for(env["q"]))
            env.update(zip(sub.results, outs))


def bisect(B, H, N, Dk, Dv, dtype, **variant):
    """Each launch of the half-precision plan against the same launch on fp32 copies of its
    inputs (DOT_BF16 off, IEEE dots): a few 1e-3 apart when right, O(1) when wrong.
    variant: stages=S (every launch), min_tile=T (core.MIN_TILE), bf16dot=0."""
    if "min_tile" in variant:
        core.MIN_TILE = int(variant["min_tile"])
    q, k, v, do, S0, z0 = _inputs(B, H, N, Dk, Dv, getattr(torch, dtype))
    target = tlaunch.target_for(q)
    fplan, bplan = _plans(q, k, v, do, True, target, (S0, z0))
    env = {"q": q, "k": k, "v": v, "do": do, "init_S": S0, "init_z": z0, "dfinal_S": S0 * 0.1, "dfinal_z": z0 * 0.1}
    print("variant", variant, flush=True)
    for launch, before in _launch_env(fplan, bplan, env):
        if "stages" in variant:
            launch = dataclasses.replace(launch, num_stages=int(variant["stages"]))
        if variant.get("bf16dot") == "0" and "DOT_BF16" in launch.constexprs:
            launch = dataclasses.replace(launch, constexprs={**launch.constexprs, "DOT_BF16": False})
        got = tlaunch.run_plan(Plan1(launch), before, target)
        ref_launch = dataclasses.replace(launch, constexprs={**launch.constexprs, "DOT_BF16": False, "PRECISION": "ieee"}) \
            if "DOT_BF16" in launch.constexprs else launch
        want = tlaunch.run_plan(Plan1(ref_launch), {n: t.float() for n, t in before.items()}, target)
        for b, a, c in zip(launch.outputs, got, want):
            a, c = a.double(), c.double()
            err = float((a - c).norm() / max(float(c.norm()), 1e-30))
            print(f"{launch.name:22s} {b.name:10s} rel diff vs fp32 run {err:.3e}", flush=True)


def _to_jax(t):
    """A torch tensor as a JAX array of the same dtype (through fp32 on the host)."""
    import jax.numpy as jnp

    return jnp.asarray(t.float().cpu().numpy()).astype(str(t.dtype).removeprefix("torch."))


def Plan1(launch):
    from ato_core.launch import Plan

    return Plan((launch,), tuple(b.name for b in launch.outputs))


def _median_jax(fn, args, reps=30):
    """(us per call waited for every time, us per call back to back): ato bench's timer."""
    from ato_cli.bench import _median_jax as per_call_ms

    return per_call_ms(fn, *args, reps=reps, calls=1) * 1e3, per_call_ms(fn, *args, reps=3, calls=reps) * 1e3


def launches():
    import jax
    import jax.numpy as jnp
    from triton.testing import do_bench

    from ato_jax import launcher as jlaunch

    B, H, N, D = 8, 16, 4096, 64
    q, k, v, do, _, _ = _inputs(B, H, N, D, D, torch.bfloat16)
    target = tlaunch.target_for(q)
    for causal in (True, False):
        fplan, bplan = _plans(q, k, v, do, causal, target)
        env = {"q": q, "k": k, "v": v, "do": do}
        for launch, before in _launch_env(fplan, bplan, env):
            sub = Plan1(launch)
            used = {n: before[n] for n in launch.inputs}
            t_ms = do_bench(lambda: tlaunch.run_plan(sub, used, target), warmup=10, rep=50, return_mode="median")
            names = tuple(used)
            jarrs = [_to_jax(used[n]) for n in names]
            f = jax.jit(lambda *a: jlaunch._run_compiled(sub, dict(zip(names, a))))
            blocked, pipelined = _median_jax(f, jarrs)
            print(f"{'causal' if causal else 'bidir':6s} {launch.name:22s} grid {str(launch.grid):16s} torch {t_ms * 1e3:8.1f} us"
                  f"  jax blocked {blocked:8.1f} us  jax pipelined {pipelined:8.1f} us", flush=True)
            if not causal and launch.kernel is core.kern.la_fwd_kernel:
                break
    # a pure bandwidth kernel
    import ato_jax
    import ato_torch

    x = torch.randn(64 << 20, device=DEVICE, dtype=torch.bfloat16)
    t_ms = do_bench(lambda: ato_torch.elu_plus_one(x), warmup=10, rep=50, return_mode="median")
    xj = jnp.ones((64 << 20,), jnp.bfloat16)
    blocked, pipelined = _median_jax(jax.jit(ato_jax.elu_plus_one), [xj])
    print(f"elu_plus_one 64M bf16 torch {t_ms * 1e3:.1f} us jax blocked {blocked:.1f} us pipelined {pipelined:.1f} us")
    blocked, pipelined = _median_jax(jax.jit(lambda a: a + 1), [xj])
    print(f"XLA x+1 64M bf16 jax blocked {blocked:.1f} us pipelined {pipelined:.1f} us")


def sweep():
    """Causal fwd, fwd+bwd and bidirectional fwd (torch, bench shape) over the segment
    split (WAVES), warps and chunk length."""
    from triton.testing import do_bench

    import ato_torch

    B, H, N, D = 8, 16, 4096, 64
    q, k, v, do, _, _ = _inputs(B, H, N, D, D, torch.bfloat16)
    config = core.config

    def fb(causal):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def run():
            for t in leaves:
                t.grad = None
            ato_torch.linear_attention(*leaves, causal=causal, feature_map="elu").backward(do)
        return run

    for waves in map(int, sys.argv[2].split(",")):
        for warps in map(int, sys.argv[3].split(",")):
            for chunk in map(int, sys.argv[4].split(",")):
                for out_chunks in map(int, sys.argv[5].split(",")):
                    core.WAVES, core.OUT_CHUNKS = waves, out_chunks
                    core.forward_plan.cache_clear()
                    core.backward_plan.cache_clear()
                    core.config = lambda *a, warps=warps, chunk=chunk, **kw: _cfg(config, a, kw, warps, chunk)
                    t = [do_bench(f, warmup=10, rep=60, return_mode="median") * 1e3 for f in (
                        lambda: ato_torch.linear_attention(q, k, v, causal=True, feature_map="elu"), fb(True),
                        lambda: ato_torch.linear_attention(q, k, v, causal=False, feature_map="elu"))]
                    print(f"waves {waves} warps {warps} chunk {chunk} out_chunks {out_chunks}: causal fwd {t[0]:.1f} us,"
                          f" fwd+bwd {t[1]:.1f} us; bidir fwd {t[2]:.1f} us", flush=True)
    core.config = config


def _cfg(config, a, kw, warps, chunk):
    """config() recomputed with another chunk length (segment lengths follow) and warps."""
    from ato_core.launch import cdiv

    c = config(*a, **kw)
    seg_len = cdiv(cdiv(c.N, c.nseg), chunk) * chunk
    nseg = cdiv(c.N, seg_len)
    out = (nseg, seg_len) if c.nseg_out == c.nseg and c.seg_len_out == c.seg_len else \
        (cdiv(c.N, chunk * core.OUT_CHUNKS), chunk * core.OUT_CHUNKS)
    return dataclasses.replace(c, num_warps=warps, chunk=chunk, nseg=nseg, seg_len=seg_len,
                               nseg_out=out[0], seg_len_out=out[1])


def ptx(out):
    """Writes the PTX and TTGIR that torch and jax-triton compile for the causal forward
    kernel of the bench shape to ``out`` (JAX_TRITON_DUMP_DIR must be set before the run)."""
    import glob
    import shutil

    import jax

    from ato_jax import launcher as jlaunch

    q, k, v, do, _, _ = _inputs(8, 16, 4096, 64, 64, torch.bfloat16)
    target = tlaunch.target_for(q)
    fplan, _ = _plans(q, k, v, do, True, target)
    env = {"q": q, "k": k, "v": v}
    for launch in fplan.launches:
        used = {n: env[n] for n in launch.inputs}
        outs = tlaunch.run_plan(Plan1(launch), used, target)
        env.update(zip((b.name for b in launch.outputs), outs))
        if launch.kernel is core.kern.la_fwd_kernel:
            for cache in launch.kernel.device_caches.values():
                for ck in cache[0].values():
                    for ir in ("ptx", "ttgir"):
                        with open(f"{out}/torch.{ir}", "w") as f:
                            f.write(ck.asm[ir])
            names = tuple(used)
            arrs = [_to_jax(used[n]) for n in names]
            jax.block_until_ready(jax.jit(lambda *a: jlaunch._run_compiled(Plan1(launch), dict(zip(names, a))))(*arrs))
            for ir in ("ptx", "ttgir"):
                for path in glob.glob(f"{os.environ['JAX_TRITON_DUMP_DIR']}/*/la_fwd_kernel.{ir}"):
                    shutil.copy(path, f"{out}/jax.{ir}")


def sweep_bidir():
    """The two bidirectional forward kernels alone (bench shape, torch), over warps, stages,
    the state kernel's chunk and the output kernel's rows per program (OUT_CHUNKS)."""
    from triton.testing import do_bench

    q, k, v, do, _, _ = _inputs(8, 16, 4096, 64, 64, torch.bfloat16)
    target = tlaunch.target_for(q)
    nbytes = 2 * q.numel() * q.element_size()
    for out_chunks in (1, 2, 4, 8):
        core.OUT_CHUNKS = out_chunks
        core.forward_plan.cache_clear()
        plan, _ = _plans(q, k, v, do, False, target)
        env = {"q": q, "k": k, "v": v}
        for launch in plan.launches:
            used = {n: env[n] for n in launch.inputs}
            base = launch
            variants = [(w, st, c) for w in (4, 8) for st in (1, 2, 3, 4) for c in (64, 128)]
            if launch.kernel is core.kern.la_scan_kernel or (launch.kernel is core.kern.la_fwd_state_kernel
                                                           and out_chunks != 4):
                variants = [(launch.num_warps, launch.num_stages, launch.constexprs.get("CHUNK"))]
            if launch.kernel is core.kern.la_fwd_kernel:
                variants = [(w, st, launch.constexprs["CHUNK"]) for w in (4, 8) for st in (1, 2, 3, 4)]
            for w, st, c in variants:
                ce = dict(launch.constexprs)
                if c is not None:
                    ce["CHUNK"] = c
                var = dataclasses.replace(base, num_warps=w, num_stages=st, constexprs=ce)
                try:
                    t = do_bench(lambda: tlaunch.run_plan(Plan1(var), used, target), warmup=10, rep=50,
                                 return_mode="median") * 1e3
                    print(f"out_chunks {out_chunks} {launch.name:20s} grid {str(launch.grid):14s} warps {w} stages {st}"
                          f" chunk {c}: {t:7.1f} us  {nbytes / t / 1e3:6.0f} GB/s", flush=True)
                except Exception as exc:  # a variant that does not compile (shared memory)
                    print(f"out_chunks {out_chunks} {launch.name} warps {w} stages {st} chunk {c}: {type(exc).__name__}")
            outs = tlaunch.run_plan(Plan1(launch), used, target)
            env.update(zip((b.name for b in launch.outputs), outs))


def profile(out):
    """CUDA kernels (CUPTI, through torch.profiler, which sees JAX's launches too) of 10
    back-to-back causal forward calls from ato_jax and from ato_torch: per-kernel device
    time, and the span of the 10 calls against the sum of their kernels (the gaps)."""
    import jax
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    import ato_jax
    import ato_torch

    q, k, v, do, _, _ = _inputs(8, 16, 4096, 64, 64, torch.bfloat16)
    qj, kj, vj, doj = (_to_jax(t) for t in (q, k, v, do))
    jf = jax.jit(lambda a, b, c: ato_jax.linear_attention(a, b, c, causal=True, feature_map="elu"))

    def jfb(a, b, c, d):
        return jax.vjp(lambda x, y, z: ato_jax.linear_attention(x, y, z, causal=True, feature_map="elu"), a, b, c)[1](d)

    jfb = jax.jit(jfb)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    runs = {
        "jax fwd": lambda: jf(qj, kj, vj),
        "jax fwd+bwd": lambda: jfb(qj, kj, vj, doj),
        "torch fwd": lambda: ato_torch.linear_attention(q, k, v, causal=True, feature_map="elu"),
        "torch fwd+bwd": lambda: ato_torch.linear_attention(*leaves, causal=True, feature_map="elu").backward(do),
    }
    for name, fn in runs.items():
        for _ in range(3):
            r = fn()
        jax.block_until_ready(r) if name.startswith("jax") else torch.cuda.synchronize()
        with tprofile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                r = fn()
            jax.block_until_ready(r) if name.startswith("jax") else torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
        if not kernels:
            print(name, ": no CUDA events recorded")
            continue
        start = min(e.time_range.start for e in kernels)
        end = max(e.time_range.end for e in kernels)
        busy = sum(e.time_range.elapsed_us() for e in kernels)
        print(f"== {name}: span of 10 calls {(end - start) / 10:.1f} us/call, kernels busy {busy / 10:.1f} us/call,"
              f" {len(kernels) / 10:.1f} device ops/call")
        by = {}
        for e in kernels:
            by.setdefault(e.name[:60], []).append(e.time_range.elapsed_us())
        for n, ts in sorted(by.items(), key=lambda x: -sum(x[1])):
            print(f"   {n:60s} x{len(ts) / 10:4.1f}/call  {sum(ts) / len(ts):8.1f} us each")
        prof.export_chrome_trace(f"{out}/trace-{name.replace(' ', '_').replace('+', '')}.json")


def bitwise():
    from ato_cli import harness as h

    for dims in ((2, 4, 1024, 64, 64), (1, 4, 1000, 96, 48)):
        for dtype in ("float32", "float16", "bfloat16"):
            for causal in (True, False):
                case = h.la_case(*dims, dtype, causal=causal, state=causal, final=causal)
                x = h.make_inputs(case)
                t, j = h.run_torch(case, x, "cuda"), h.run_jax(case, x)
                verdict = "bitwise" if h.bitwise_equal(t, j) else f"differ {h.max_rel_err(j, t):.2e}"
                print(f"{dims} {dtype} causal={causal}: {verdict}", flush=True)
    for dtype in ("float32", "bfloat16"):
        for case in (h.step_case(8, 16, 64, 64, dtype), h.elu_case((4096, 4097), dtype)):
            x = h.make_inputs(case)
            t, j = h.run_torch(case, x, "cuda"), h.run_jax(case, x)
            print(case.op, dtype, "bitwise" if h.bitwise_equal(t, j) else f"differ {h.max_rel_err(j, t):.2e}")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "bisect":
        B, H, N, Dk, Dv = map(int, sys.argv[2:7])
        bisect(B, H, N, Dk, Dv, sys.argv[7], **dict(a.split("=") for a in sys.argv[8:]))
    elif what == "launches":
        launches()
    elif what == "profile":
        profile(sys.argv[2])
    elif what == "sweep_bidir":
        sweep_bidir()
    elif what == "ptx":
        ptx(sys.argv[2])
    elif what == "sweep":
        sweep()
    elif what == "bitwise":
        bitwise()
