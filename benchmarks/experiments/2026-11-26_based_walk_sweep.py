"""Based attention's causal state walks (plans.WALK) against segments + scan, B8 H16 N4096
d16 Dv64 bf16 (and B2 H16 N16384), torch side, one process (not a test). Each argument is a
setting: "off" (segments and la_scan_kernel: plans.WALK_WAVES = inf) or the walks'
plans.WALK as features,chunk,warps,stages (WALK_WAVES = 0). Per setting: forward and
forward+backward do_bench medians, per-kernel device time of one forward+backward, and o,
dq, dk, dv and the final state compared bit for bit with the first setting's.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-26_based_walk_sweep.py off 64,64,4,1 32,64,4,1 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops import based
from ato_core.ops.based import plans

SHAPES = [(8, 16, 4096), (2, 16, 16384)]
d, Dv = 16, 64
print(f"GPU {torch.cuda.get_device_name()}; based_attention causal d{d} Dv{Dv} bf16, do_bench medians (us)")
for B, H, N in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    print(f"\nB{B} H{H} N{N}")
    first = None
    for setting in sys.argv[1:]:
        if setting == "off":
            plans.WALK_WAVES = float("inf")
        else:
            plans.WALK_WAVES = 0.0
            plans.WALK = plans.StateSettings(*map(int, setting.split(",")))
        for fn in (plans.forward_plan, plans.backward_plan):
            fn.cache_clear()
        based.BASED_ATTENTION.cached_forward.cache_clear()
        try:
            fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")

            def fb():
                return torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do)

            fwdbwd = do_bench(fb, warmup=10, rep=100, return_mode="median")
            o, (S, z) = ato_torch.based_attention(*leaves, output_final_state=True)
            got = [o, S, z, *torch.autograd.grad(o, leaves, do)]
            first = first or got
            same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, first))
            print(f"{setting:12s} | fwd {fwd * 1e3:8.1f} | fwd+bwd {fwdbwd * 1e3:8.1f} | o,S,z,dq,dk,dv bitwise vs "
                  f"the first: {same}", flush=True)
            per = device_kernels(fb, lambda out: torch.cuda.synchronize())
            print("    " + ", ".join(f"{name.replace('based_', '').replace('_kernel', '')[:24]} {us:.1f}"
                                     for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1])),
                  flush=True)
        except Exception as exc:
            print(f"{setting:12s} | {type(exc).__name__}: {str(exc)[:300]}", flush=True)
