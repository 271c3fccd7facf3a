"""linear_attention with ELU+1 that keeps NaN (issue 27: min.NaN in the feature map) against
the version before it, both imported into ONE process in alternating rounds (not a test).
Causal, ELU+1, B8 H16 N4096 D64 bf16 as `ato bench`: forward, forward+backward.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-23_la_nan_elu.py OLD_DIR [ROUNDS]
"""
import os, statistics, sys
import torch
from triton.testing import do_bench

from benchmarks.tools.ab import alternate, load



B, H, N, D = 8, 16, 4096, 64
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
versions = {"old": load(os.path.abspath(sys.argv[1])), "new": load(os.getcwd())}
fns = {}
for name, ato in versions.items():
    call = lambda ato=ato: ato.linear_attention(q, k, v, causal=True, feature_map="elu")
    fns[(name, "fwd")] = call
    fns[(name, "fwd+bwd")] = lambda call=call: torch.autograd.grad(call(), (q, k, v), do)
for fn in fns.values():
    fn()
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
res = alternate(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; linear_attention causal ELU+1 B{B} H{H} N{N} D{D} bf16, "
      f"do_bench medians (us), {rounds} alternating rounds, old = {sys.argv[1]}: median of rounds (min)")
for mode in ("fwd", "fwd+bwd"):
    o, n = res[("old", mode)], res[("new", mode)]
    print(f"{mode:8s} | old {statistics.median(o) * 1e3:.1f} ({min(o) * 1e3:.1f}) | new {statistics.median(n) * 1e3:.1f} "
          f"({min(n) * 1e3:.1f}) | new/old {statistics.median(n) / statistics.median(o):.3f}")
