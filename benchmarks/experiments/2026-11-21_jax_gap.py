"""Where ato_jax's forwards lose time against ato_torch's (not a test). Both run the same
Triton binary, yet `ato bench` times ato_jax 3-7 us slower per call (rms_norm 102 vs 95 us
on an H100). For each forward of the bench table this prints:

- the device kernels one call launches and their device time, from torch.profiler (CUPTI
  sees the kernels XLA launches too): ato_torch, ato_jax under jax.jit, and the XLA peer;
- the wall time per call of back-to-back calls synchronised once (ato bench's JAX method)
  for all three, so the two timing methods can be told apart from the kernels;
- the ops of ato_jax's compiled HLO entry (custom calls, fusions, copies).

The last case is cross_entropy's loss and gradient (T8192 V128256), jax.grad against
torch.autograd.grad. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
python benchmarks/experiments/2026-11-21_jax_gap.py [--only NAME] (NAME: a case's name or its start)
"""

import collections
import re
import statistics
import sys
import time

import jax
import torch

import ato_jax
import ato_torch
from ato_cli import bench

CALLS = 20


def wall_us(fn, sync, calls=50, reps=7):
    sync(fn())
    sync(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            out = fn()
        sync(out)
        times.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(times)


def hlo_ops(fn, args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    entry = text[text.index("ENTRY"):]
    entry = entry[: entry.index("\n}")]
    ops = re.findall(r"= \S+ (custom-call|fusion|copy|bitcast|tuple|get-tuple-element|parameter|[a-z\-]+)\(", entry)
    return collections.Counter(ops)


def main():
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device=dev, dtype=bf, generator=g)  # noqa: E731
    to_j = bench.to_jax_bf16
    tsync = lambda out: torch.cuda.synchronize()  # noqa: E731
    jsync = jax.block_until_ready
    print(f"GPU {torch.cuda.get_device_name()}; jax {jax.__version__}, torch {torch.__version__}")

    M, N = 16384, 4096
    x, w, b = rnd(M, N), rnd(N), rnd(N)
    xj, wj, bj = to_j(x), to_j(w), to_j(b)
    Ms, Ns = 16384, 7168
    ga, up = rnd(Ms, Ns), rnd(Ms, Ns)
    gj, uj = to_j(ga), to_j(up)
    B, Nr, Hq, Hkv, D = 8, 4096, 32, 8, 128
    q, k = rnd(B, Hq, Nr, D), rnd(B, Hkv, Nr, D)
    cos, sin = rnd(Nr, D // 2), rnd(Nr, D // 2)
    qj, kj, cj, sj = to_j(q), to_j(k), to_j(cos), to_j(sin)

    T, V = 8192, 128256
    lg = rnd(T, V).requires_grad_()
    tgt = torch.randint(0, V, (T,), device=dev, generator=g)
    lj, tj = to_j(lg.detach()), jax.numpy.asarray(tgt.cpu().numpy())

    cases = [
        ("layer_norm", lambda: ato_torch.layer_norm(x, w, b), ato_jax.layer_norm, bench.xla_layer_norm, (xj, wj, bj)),
        ("rms_norm", lambda: ato_torch.rms_norm(x, w), ato_jax.rms_norm, bench.xla_rms_norm, (xj, wj)),
        ("softmax", lambda: ato_torch.softmax(x), ato_jax.softmax, bench.xla_softmax, (xj,)),
        ("swiglu", lambda: ato_torch.swiglu(ga, up), ato_jax.swiglu, bench.xla_swiglu, (gj, uj)),
        ("rope", lambda: ato_torch.rope(q, k, cos, sin), ato_jax.rope, bench.xla_rope, (qj, kj, cj, sj)),
        ("cross_entropy loss+grad", lambda: torch.autograd.grad(ato_torch.cross_entropy(lg, tgt), lg),
         jax.grad(ato_jax.cross_entropy), jax.grad(bench.xla_cross_entropy), (lj, tj)),
    ]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    for name, t_fn, j_op, x_fn, args in cases:
        if only and not name.startswith(only):
            continue
        j_jit, x_jit = jax.jit(j_op), jax.jit(x_fn)
        runs = (("ato_torch", t_fn, tsync), ("ato_jax", lambda: j_jit(*args), jsync),
                ("jax jit (XLA)", lambda: x_jit(*args), jsync))
        print(f"\n== {name}" + ("" if " " in name else " forward"))
        for label, fn, sync in runs:
            ks = bench.device_kernels(fn, sync, CALLS)
            total = sum(t for _, t in ks.values())
            print(f"  {label:14s} wall {wall_us(fn, sync):7.1f} us/call; device {total:7.1f} us/call in "
                  f"{sum(c for c, _ in ks.values()):.0f} kernels")
            for kname, (c, t) in sorted(ks.items(), key=lambda kv: -kv[1][1]):
                print(f"      {c:4.1f} x {kname[:70]:70s} {t:7.1f} us")
        print(f"  ato_jax HLO entry ops: {dict(hlo_ops(j_op, args))}")


if __name__ == "__main__":
    main()
