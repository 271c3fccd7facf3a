"""max_l2_coarsen B1 H32 N32768 D128 bf16, blocks of 64: the elements a program loads at once
and its warps (plans.TILE_ELEMENTS, plans.WARPS), settings "TILE_ELEMENTS,WARPS", against the
copy rate. (Session 17 also swept a loop of several blocks a program, since removed: slower.) Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_coarsen_sweep.py 8192,4 4096,4 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_core.ops import OPS
from ato_core.ops.block_sparse import plans

x = torch.randn(1, 32, 32768, 128, device="cuda", dtype=torch.bfloat16)
src = torch.empty(2 ** 29, device="cuda", dtype=torch.int16)
dst = torch.empty_like(src)
copy = 2 * src.numel() * 2 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6
nbytes = x.numel() * 2 * (1 + 1 / 64)
print(f"GPU {torch.cuda.get_device_name()}; copy {copy:.0f} GB/s")
for setting in sys.argv[1:]:
    plans.TILE_ELEMENTS, plans.WARPS = map(int, setting.split(","))
    plans.coarsen_plan.cache_clear()
    OPS["max_l2_coarsen"].cached_forward.cache_clear()
    ms = do_bench(lambda: ato_torch.max_l2_coarsen(x, 64), return_mode="median")
    print(f"{setting:12s} {ms * 1e3:7.1f} us  {nbytes / ms / 1e6:6.0f} GB/s  {nbytes / ms / 1e6 / copy:.2f} of copy",
          flush=True)
