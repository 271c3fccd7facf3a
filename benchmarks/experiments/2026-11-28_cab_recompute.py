"""curvature_block_mask on the bench shape (B1 H32 N32768 D128 bf16, blocks of 64, keep 0.1, causal)
with A recomputed instead of stored (cab_scores_kernel keeps only its min and max, cab_split_kernel
computes A's tiles again), for several score tiles (plans.CAB_TILES["gpu"] = BM,BN,WARPS): the mask's
time, each kernel's device time, the mask against the first setting's and the float64 reference's.
Run (block_sparse-sweep.txt 40b) on the form not kept, whose F took An from its bf16 parts; the
kept form's An @ An kernel recomputes A on the score tiles, so only its own (64,64,4) passes the
plan's check. Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_cab_recompute.py 64,64,4 128,64,4 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops import OPS
from ato_core.ops.block_sparse import plans, reference

B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
ref = reference.curvature_block_mask(q.double(), k.double(), block_size=bs, keep=0.1)
print(f"GPU {torch.cuda.get_device_name()}", flush=True)
first = None
for setting in sys.argv[1:]:
    plans.CAB_TILES["gpu"] = tuple(map(int, setting.split(",")))
    for f in (plans.curvature_plan, plans.cab_forward_plan):
        f.cache_clear()
    for name in ("curvature_block_mask", "cab_attention"):
        OPS[name].cached_forward.cache_clear()
    try:
        mask = ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1)
        same = "" if first is None else f" == first's: {bool(torch.equal(mask, first))}"
        first = mask if first is None else first
        ms = do_bench(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1), return_mode="median")
        total = do_bench(lambda: ato_torch.cab_attention(q, k, v, block_size=bs, keep=0.1), return_mode="median")
        print(f"{setting:10s} mask {ms * 1e3:7.1f} us  cab fwd {total * 1e3:7.1f} us  share {ms / total:.3f}  "
              f"blocks differing from float64 {int((mask != ref).sum())} of {mask.numel()}{same}", flush=True)
        per = device_kernels(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1),
                             lambda out: torch.cuda.synchronize(), calls=20)
        print("    " + ", ".join(f"{name.replace('_kernel', '')} {us:.1f}"
                                 for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1])), flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"{setting:10s} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
