"""Where the sliding window's forward time goes (issue 25: window 4096 over causal N 16384 runs at
1.22x causal x tiles, flash_options.txt, session 44). The Gluon forward, B1 H32 D128 bf16,
Nq = 16384 (4096 programs of 128 rows in every row below), against shapes of the same programs:
- causal Nk 16384 and the window (4096, 0): the bench's two rows;
- full Nk 4224 (33 tiles a program, none masked): the window's tile count without its two masked
  tiles (left edge, diagonal) or its uneven first programs;
- full Nk 128 (one tile a program) and Nk 256: a program's fixed cost and a tile's;
- the window (4224 - 1, 0) with causal: its edge tiles at other offsets.
do_bench medians (us), best of 3 alternating rounds. Not a
test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_window_cost.py
"""
import torch
from triton.testing import do_bench

import ato_torch

B, H, N, D = 1, 32, 16384, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
kv = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
runs = {
    "causal Nk 16384": (N, dict(causal=True)),
    "window (4096, 0) Nk 16384": (N, dict(causal=True, window_size=(4096, 0))),
    "window (4223, 0) Nk 16384": (N, dict(causal=True, window_size=(4223, 0))),
    "full Nk 4224 (33 tiles)": (4224, dict()),
    "full Nk 256 (2 tiles)": (256, dict()),
    "full Nk 128 (1 tile)": (128, dict()),
}
times = {name: [] for name in runs}
for _ in range(3):
    for name, (nk, kw) in runs.items():
        k = kv[:, :, :nk]
        times[name].append(do_bench(lambda: ato_torch.flash_attention(q, k, k, **kw), warmup=25, rep=200,
                                    return_mode="median") * 1e3)
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} Nq{N} D{D} bf16, the Gluon forward")
for name, ts in times.items():
    print(f"  {name:28s} " + " ".join(f"{t:8.1f}" for t in ts) + f" us  best {min(ts):8.1f}")
