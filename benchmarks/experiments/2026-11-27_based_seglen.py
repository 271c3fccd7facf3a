"""Based's block settings (plans.BLOCKS: rows, seg_len, features, warps, stages, maxnreg or 0)
swept at causal B8 H16 N4096 d16 Dv64 bf16 (and B2 H16 N16384), torch side, one process (not a
test): the segment length sets the block kernels' in-segment work (rows up to seg_len) against
the start states the walk writes and the output pass reads (one [Fp, Dv] state per segment).
Per setting: forward and forward+backward do_bench medians (us), per-kernel device time of one
forward+backward, o, dq, dk, dv compared bit for bit with the first setting's (the segment
length changes the sums). On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python3 benchmarks/experiments/2026-11-27_based_seglen.py 64,256,64,4,2,168 64,128,64,4,2,168 ...
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
        *ints, cap = map(int, setting.split(","))
        plans.BLOCKS = plans.BlockSettings(*ints, maxnreg=cap or None)
        for fn in (plans.forward_plan, plans.backward_plan):
            fn.cache_clear()
        based.BASED_ATTENTION.cached_forward.cache_clear()
        try:
            def fb():
                return torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do)

            fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
            fwdbwd = do_bench(fb, warmup=10, rep=100, return_mode="median")
            got = [ato_torch.based_attention(*leaves).detach(), *fb()]
            first = first or got
            same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, first))
            print(f"{setting:18s} | fwd {fwd * 1e3:8.1f} | fwd+bwd {fwdbwd * 1e3:8.1f} | o,dq,dk,dv bitwise vs the "
                  f"first: {same}", flush=True)
            per = device_kernels(fb, lambda out: torch.cuda.synchronize())
            print("    " + ", ".join(f"{name.replace('based_', '').replace('_kernel', '')[:24]} {us:.1f}"
                                     for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1])),
                  flush=True)
        except Exception as exc:
            print(f"{setting:18s} | {type(exc).__name__}: {str(exc)[:300]}", flush=True)
