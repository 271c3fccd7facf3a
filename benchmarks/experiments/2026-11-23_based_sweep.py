"""Based attention's launch settings (plans.STATE_TILE_ELEMS -> the Dv tile, CHUNK,
NUM_WARPS) swept at B8 H16 N4096 d16 Dv64 bf16, causal: forward and forward+backward,
torch side, one process (not a test). Each setting: "tile,chunk,warps".

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
for setting in sys.argv[1:]:
    tile, chunk, warps = map(int, setting.split(","))
    plans.STATE_TILE_ELEMS, plans.CHUNK, plans.NUM_WARPS = tile, chunk, warps
    for fn in (plans.forward_plan, plans.backward_plan):
        fn.cache_clear()
    based.BASED_ATTENTION.cached_forward.cache_clear()
    try:
        fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
        fb = do_bench(lambda: torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do), warmup=10,
                      rep=100, return_mode="median")
        print(f"tile {tile:6d} chunk {chunk:3d} warps {warps} | fwd {fwd * 1e3:8.1f} | fwd+bwd {fb * 1e3:8.1f}",
              flush=True)
    except Exception as exc:
        print(f"tile {tile:6d} chunk {chunk:3d} warps {warps} | {type(exc).__name__}: {str(exc)[:100]}", flush=True)
