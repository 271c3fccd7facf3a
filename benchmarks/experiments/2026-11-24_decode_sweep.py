"""decode_attention's launch settings swept (bf16, Hq32 Hkv8 D128, 8192 tokens a sequence,
random block tables): each setting "TOKENS,PROGRAMS_PER_SM,WARPS,STAGES[,MAX_SPLITS]" of
plans.py, timed at B 64, 8 and 1 (block size 16).
Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_decode_sweep.py 64,4,4,2 128,4,8,3 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_core.ops.decode import plans

Hq, Hkv, D, N = 32, 8, 128, 8192
print(f"GPU {torch.cuda.get_device_name()}; decode_attention bf16 Hq{Hq} Hkv{Hkv} D{D} N{N}, do_bench medians (us)")
data = {}
for B, BS in ((64, 16), (8, 16), (1, 16)):
    g = torch.Generator(device="cuda").manual_seed(B)
    NB = B * N // BS
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    table = torch.randperm(NB, device="cuda", generator=g).reshape(B, N // BS).to(torch.int32)
    data[B] = (q, kc, vc, table, torch.full((B,), N, device="cuda", dtype=torch.int32))
for setting in sys.argv[1:]:
    vals = list(map(int, setting.split(",")))
    plans.TOKENS, plans.PROGRAMS_PER_SM, plans.WARPS, plans.STAGES = vals[:4]
    plans.MAX_SPLITS = vals[4] if len(vals) > 4 else 64
    plans.decode_plan.cache_clear()
    from ato_core.ops import OPS
    OPS["decode_attention"].cached_forward.cache_clear()
    cells = []
    for B, args in data.items():
        try:
            ms = do_bench(lambda: ato_torch.decode_attention(*args), warmup=10, rep=100, return_mode="median")
            gbs = 2 * B * N * Hkv * D * 2 / ms / 1e6
            cells.append(f"B{B} {ms * 1e3:7.1f} ({gbs:4.0f} GB/s)")
        except Exception as exc:
            cells.append(f"B{B} {type(exc).__name__}: {str(exc)[:80]}")
    print(f"{setting:14s} | " + " | ".join(cells), flush=True)
