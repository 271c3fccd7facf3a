"""Device time of linear_attention and based_attention in two versions of ato_torch imported
into ONE process, in alternating rounds (not a test): what a change to the shared scan (or to
Based's passes) does to both families, free of the lease-to-lease drift.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-24_scan_ab.py OLD_DIR [ROUNDS]
"""
import os
import statistics
import sys

import torch
from triton.testing import do_bench

from benchmarks.tools.ab import alternate, load

B, H, N = 8, 16, 4096
g = torch.Generator(device="cuda").manual_seed(0)
bf = dict(device="cuda", dtype=torch.bfloat16)
q64, k64, v64, do64 = (torch.randn(B, H, N, 64, generator=g, **bf) for _ in range(4))
q16, k16 = (torch.randn(B, H, N, 16, generator=g, **bf) for _ in range(2))
leaves = {name: [t.clone().requires_grad_() for t in ts] for name, ts in
          (("la", (q64, k64, v64)), ("based", (q16, k16, v64)))}


def cases(ato):
    la = lambda q, k, v, causal: ato.linear_attention(q, k, v, causal=causal, feature_map="elu")  # noqa: E731
    based = lambda q, k, v, causal: ato.based_attention(q, k, v, causal=causal)  # noqa: E731
    out = {}
    for name, fn, args in (("linear_attention", la, (q64, k64, v64)), ("based_attention", based, (q16, k16, v64))):
        lv = leaves["la" if name == "linear_attention" else "based"]
        for causal in (True, False):
            out[(name, causal, "fwd")] = lambda fn=fn, a=args, c=causal: fn(*a, c)
            out[(name, causal, "fwd+bwd")] = (
                lambda fn=fn, lv=lv, c=causal: torch.autograd.grad(fn(*lv, c), lv, do64))
    return out


versions = {"old": load(os.path.abspath(sys.argv[1])), "new": load(os.getcwd())}
fns = {(v, *key): fn for v, ato in versions.items() for key, fn in cases(ato).items()}
for fn in fns.values():
    fn()
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
res = alternate(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} bf16 (linear_attention elu D64; based d16 Dv64); "
      f"do_bench medians (us), {rounds} alternating rounds, old = {sys.argv[1]}: median of rounds (min)")
for key in cases(versions["new"]):
    o, n = (statistics.median(res[(v, *key)]) * 1e3 for v in ("old", "new"))
    mo, mn = (min(res[(v, *key)]) * 1e3 for v in ("old", "new"))
    print(f"{key[0]:16s} {'causal' if key[1] else 'bidir':6s} {key[2]:8s} | old {o:8.1f} ({mo:8.1f}) | "
          f"new {n:8.1f} ({mn:8.1f}) | new/old {n / o:.3f}")
