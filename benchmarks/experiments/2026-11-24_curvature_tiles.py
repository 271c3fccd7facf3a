"""curvature_block_mask on the bench shape (B1 H32 N32768 D128 bf16, blocks of 64, keep 0.1,
causal) for several tiles of its An @ An kernel (plans.CAB_DOT_TILES["gpu"] = BM,BN,BK,WARPS,STAGES) and,
after a slash, the elements a select program ranks (plans.CAB_SELECT_ELEMENTS["gpu"]), with the
device time of each kernel, against cab_attention's forward. Not a test. On the GPU machine,
after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_curvature_tiles.py 128,128,64,8,3/4096 64,64,64,4,3/2048 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops import OPS
from ato_core.ops.block_sparse import plans

B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
first = None
for setting in sys.argv[1:]:
    dot, _, select = setting.partition("/")
    plans.CAB_DOT_TILES["gpu"] = tuple(map(int, dot.split(",")))
    if select:
        plans.CAB_SELECT_ELEMENTS["gpu"] = int(select)
    for f in (plans.curvature_plan, plans.cab_forward_plan):
        f.cache_clear()
    for name in ("curvature_block_mask", "cab_attention"):
        OPS[name].cached_forward.cache_clear()
    try:
        mask = ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1)
        same = "" if first is None else f" mask == first setting's: {bool(torch.equal(mask, first))}"
        first = mask if first is None else first
        ms = do_bench(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1), return_mode="median")
        total = do_bench(lambda: ato_torch.cab_attention(q, k, v, block_size=bs, keep=0.1), return_mode="median")
        print(f"{setting:12s} mask {ms * 1e3:8.1f} us  cab_attention fwd {total * 1e3:8.1f} us  share {ms / total:.3f}"
              f"{same}", flush=True)
        per = device_kernels(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1),
                             lambda out: torch.cuda.synchronize(), calls=10)
        for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"    {name[:50]:50s} {calls:4.1f} launches {us:8.1f} us", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"{setting:12s} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
