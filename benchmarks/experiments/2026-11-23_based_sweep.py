"""Based attention's launch settings (plans.STATE_TILE_ELEMS -> the Dv tile, CHUNK,
NUM_WARPS, NUM_STAGES) swept at B8 H16 N4096 d16 Dv64 bf16, causal: forward and forward+backward,
torch side, one process (not a test). Each setting: "tile,chunk,warps[,stages[,transposed]]" (plans.TRANSPOSED_FWD); the first
also gets a per-kernel breakdown, and every other's o is compared with the first's.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-23_based_sweep.py 16384,32,8 8192,32,4 ...
"""
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
o_first = None  # the first setting's o
for setting in sys.argv[1:]:
    tile, chunk, warps, stages, trans = (list(map(int, setting.split(","))) + [2, 1][len(setting.split(",")) - 3:])[:5]
    plans.STATE_TILE_ELEMS, plans.CHUNK, plans.NUM_WARPS, plans.NUM_STAGES = tile, chunk, warps, stages
    plans.TRANSPOSED_FWD = bool(trans)
    for fn in (plans.forward_plan, plans.backward_plan):
        fn.cache_clear()
    based.BASED_ATTENTION.cached_forward.cache_clear()
    try:
        fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
        fb = do_bench(lambda: torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do), warmup=10,
                      rep=100, return_mode="median")
        o = ato_torch.based_attention(q, k, v).float()
        o_first = o if o_first is None else o_first
        err = float((o - o_first).norm() / o_first.norm())
        print(f"tile {tile:6d} chunk {chunk:3d} warps {warps} stages {stages} transposed {trans} | fwd {fwd * 1e3:8.1f}"
              f" | fwd+bwd {fb * 1e3:8.1f} | o vs the first setting's {err:.1e}", flush=True)
        if setting == sys.argv[1]:  # the first setting: device time per kernel (torch.profiler)
            from ato_cli.bench import device_kernels
            per = device_kernels(lambda: torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do),
                                 torch.cuda.synchronize and (lambda out: torch.cuda.synchronize()))
            for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                print(f"    {name[:60]:60s} {calls:4.1f} launches {us:8.1f} us", flush=True)
    except Exception as exc:
        print(f"tile {tile:6d} chunk {chunk:3d} warps {warps} | {type(exc).__name__}: {str(exc)[:100]}", flush=True)
