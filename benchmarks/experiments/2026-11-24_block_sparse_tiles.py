"""block_sparse_attention forward+backward on the bench shape (B1 H32 N32768 D128 bf16, blocks of
64, 10% kept) for several tiles of the dK/dV and dQ kernels (plans._bs_tiles replaced), settings
"DKDV_M,DKDV_N,DKDV_WARPS,DKDV_STAGES/DQ_M,DQ_N,DQ_WARPS,DQ_STAGES", against dense
flash_attention times the kept fraction. Not a test. On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_block_sparse_tiles.py 64,64,4,3/64,64,4,3 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import _torch_fwd_bwd, random_block_mask
from ato_core.ops import OPS
from ato_core.ops.block_sparse import plans
from ato_core.ops.flash_attention.plans import Tiles

B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
mask = random_block_mask(B, H, N // bs, 0.1, "cuda")
kept = float(mask.float().mean())
dense = do_bench(_torch_fwd_bwd(lambda a, b, c: ato_torch.flash_attention(a, b, c), [q, k, v], do),
                 return_mode="median")
print(f"GPU {torch.cuda.get_device_name()}; dense fwd+bwd {dense * 1e3:.0f} us, kept {kept:.3f}", flush=True)
original = plans._bs_tiles
for setting in sys.argv[1:]:
    dkdv, dq = (Tiles(*map(int, part.split(","))) for part in setting.split("/"))
    plans._bs_tiles = lambda cfg, block_size, target, dkdv=dkdv, dq=dq: (original(cfg, block_size, target)[0], dkdv, dq)
    plans.block_sparse_backward_plan.cache_clear()
    plans.block_sparse_forward_plan.cache_clear()
    OPS["block_sparse_attention"].cached_forward.cache_clear()
    try:
        ms = do_bench(_torch_fwd_bwd(lambda a, b, c: ato_torch.block_sparse_attention(a, b, c, mask, block_size=bs),
                                     [q, k, v], do), return_mode="median")
        print(f"{setting:28s} fwd+bwd {ms * 1e3:8.0f} us  {ms / (dense * kept):.2f}x dense x kept", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"{setting:28s} failed: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
