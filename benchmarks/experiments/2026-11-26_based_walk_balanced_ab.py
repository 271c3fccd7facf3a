"""Based's causal state walks, A/B in one process: OLD (a program per quadratic tile, one
for the 16-row rest, one for the constant and linear rows: 4 per b*h at d 16) against NEW
(the rest and the linear rows with the last two tile programs: 2 per b*h), both forced to
walk (WALK_WAVES 0), and NEW's segments + scan (WALK_WAVES inf). causal d16 Dv64 bf16 at
H16 N4096 for B 2-16 and B2 N16384: per-kernel device time of one forward+backward (the
walks), forward and forward+backward do_bench medians (us) in 2 alternating rounds, and o,
dq, dk, dv of each form against OLD's (relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_based_walk_balanced_ab.py .ab_old .
(.ab_old: a copy of the tree before, e.g. git archive b63c505.)
Run with OLD = b63c505 and NEW = it plus 2026-11-26_based_walk_balanced.diff (plans.WALK_WAVES a
float in both; a Waves pair since).
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402
from ato_cli.bench import device_kernels  # noqa: E402

forms = {}
for name, path, waves in (("old walk", sys.argv[1], 0.0), ("new walk", sys.argv[2], 0.0),
                          ("segments", sys.argv[2], float("inf"))):
    ato = ab.load(path)
    sys.modules["ato_core.ops.based.plans"].WALK_WAVES = waves
    forms[name] = ato
    if name == "new walk":  # the same modules serve both of NEW's forms: each call sets its own
        plans_new = sys.modules["ato_core.ops.based.plans"]
        cache_new = sys.modules["ato_core.ops.based"].BASED_ATTENTION.cached_forward


def use(name):
    if name != "old walk":
        plans_new.WALK_WAVES = 0.0 if name == "new walk" else float("inf")
        for fn in (plans_new.forward_plan, plans_new.backward_plan):
            fn.cache_clear()
        cache_new.cache_clear()
    return forms[name]


d, Dv = 16, 64
print(f"GPU {torch.cuda.get_device_name()}; based_attention causal d{d} Dv{Dv} bf16; us")
for B, H, N in ((2, 16, 4096), (4, 16, 4096), (8, 16, 4096), (16, 16, 4096), (2, 16, 16384)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    print(f"\nB{B} H{H} N{N}")
    ref = None
    times = {name: [] for name in forms}
    for r in range(2):
        for name in (list(forms) if r == 0 else list(reversed(list(forms)))):
            ato = use(name)

            def fb():
                return torch.autograd.grad(ato.based_attention(*leaves), leaves, do)

            fwd = do_bench(lambda: ato.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
            times[name].append((fwd * 1e3, do_bench(fb, warmup=10, rep=100, return_mode="median") * 1e3))
            if r == 0:
                got = [ato.based_attention(*leaves), *fb()]
                ref = ref or got
                err = " ".join(f"{float((a.float() - b.float()).norm() / b.float().norm()):.1e}"
                               for a, b in zip(got, ref))
                per = device_kernels(fb, lambda out: torch.cuda.synchronize())
                walks = ", ".join(f"{n.replace('based_', '').replace('_kernel', '')} {us:.1f}"
                                  for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])
                                  if "state" in n or "scan" in n or "finite" in n)
                print(f"  {name:9s} o,dq,dk,dv vs old: {err} | {walks}", flush=True)
    for name, ts in times.items():
        print(f"  {name:9s} fwd " + " / ".join(f"{a:7.1f}" for a, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
