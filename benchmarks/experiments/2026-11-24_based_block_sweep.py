"""Based attention's launch settings swept at B8 H16 N4096 d16 Dv64 bf16, causal: forward and
forward+backward, torch side, one process (not a test). Each setting: "BLOCKS/STATE", the
block kernels' plans.BLOCKS (rows,seg_len,features,warps,stages) and the state passes'
plans.STATE (features,chunk,warps,stages), either part empty for the default. The first (with
BREAKDOWN=all in the environment: every one) also gets a per-kernel breakdown, and every
other's o and dq are compared with the first's.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-24_based_block_sweep.py 64,512,64,4,2/128,64,8,2 ...
"""
import os
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_core.ops import based
from ato_core.ops.based import plans

B, H, N, d, Dv = 8, 16, 4096, 16, 64
g = torch.Generator(device="cuda").manual_seed(0)
q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
print(f"GPU {torch.cuda.get_device_name()}; based_attention causal B{B} H{H} N{N} d{d} Dv{Dv} bf16, "
      f"do_bench medians (us)")
first = None
for setting in sys.argv[1:]:
    blocks, _, state = setting.partition("/")
    plans.BLOCKS = plans.BlockSettings(*map(int, blocks.split(","))) if blocks else plans.BlockSettings()
    plans.STATE = plans.StateSettings(*map(int, state.split(","))) if state else plans.StateSettings()
    for fn in (plans.forward_plan, plans.backward_plan):
        fn.cache_clear()
    based.BASED_ATTENTION.cached_forward.cache_clear()
    try:
        fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
        fb = do_bench(lambda: torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do), warmup=10,
                      rep=100, return_mode="median")
        o = ato_torch.based_attention(*leaves)
        dq = torch.autograd.grad(o, leaves[0], do)[0].float()
        o = o.detach().float()
        first = first or (o, dq)
        eo = float((o - first[0]).norm() / first[0].norm())
        eq = float((dq - first[1]).norm() / first[1].norm())
        print(f"{setting:20s} | fwd {fwd * 1e3:8.1f} | fwd+bwd {fb * 1e3:8.1f} | vs the first: o {eo:.1e} dq {eq:.1e}",
              flush=True)
        if setting == sys.argv[1] or os.environ.get("BREAKDOWN") == "all":
            from ato_cli.bench import device_kernels
            per = device_kernels(lambda: torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do),
                                 lambda out: torch.cuda.synchronize())
            for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                print(f"    {name[:60]:60s} {calls:4.1f} launches {us:8.1f} us", flush=True)
    except Exception as exc:
        print(f"{setting:20s} | {type(exc).__name__}: {str(exc)[:300]}", flush=True)
