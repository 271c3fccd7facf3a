"""Based's causal state walks, A/B in one process: OLD (one chunk loop per segment, the
products' form chosen inside it) against NEW (_walk_chunks: the segment's finiteness flag
picks one of two loops, so the selector products keep the dot's register layout). Forced to
walk (WALK_WAVES 0) at causal d16 Dv64 bf16, H16 N4096 for B 2-16 and B2 N16384: per-kernel
device time of one forward+backward (walks, finiteness), forward and forward+backward
do_bench medians (us) in 2 alternating rounds, o, dq, dk, dv and the final state bit for bit
against OLD's. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-27_based_walk_layout_ab.py .ab_old .
(.ab_old: a copy of the tree before, git archive 5783cf8.)
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402
from ato_cli.bench import device_kernels  # noqa: E402

forms = {}
for name, path in (("old", sys.argv[1]), ("new", sys.argv[2])):
    forms[name] = ab.load(path)
    plans = sys.modules["ato_core.ops.based.plans"]
    plans.WALK_WAVES = plans.Waves(0.0, 0.0)

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
            ato = forms[name]

            def fb():
                return torch.autograd.grad(ato.based_attention(*leaves), leaves, do)

            fwd = do_bench(lambda: ato.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
            times[name].append((fwd * 1e3, do_bench(fb, warmup=10, rep=100, return_mode="median") * 1e3))
            if r == 0:
                o, (S, z) = ato.based_attention(*leaves, output_final_state=True)
                got = [o, S, z, *torch.autograd.grad(o, leaves, do)]
                ref = ref or got
                same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, ref))
                per = device_kernels(fb, lambda out: torch.cuda.synchronize())
                walks = ", ".join(f"{n.replace('based_', '').replace('_kernel', '')} {us:.1f}"
                                  for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])
                                  if "walk" in n or "finite" in n)
                print(f"  {name} o,S,z,dq,dk,dv bitwise vs old: {same} | {walks}", flush=True)
    for name, ts in times.items():
        print(f"  {name} fwd " + " / ".join(f"{a:7.1f}" for a, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
