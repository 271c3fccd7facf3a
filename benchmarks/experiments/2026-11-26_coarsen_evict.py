"""max_l2_coarsen at the bench shape (B1 H32 N32768 D128 bf16, blocks of 64) with x loaded
evict_first (VAR) against without (BASE), A/B in one process (us, do_bench medians, 5
alternating rounds), beside torch's copy and a read-only reduction (x.sum) of the same tensor for
the rates a read-mostly kernel can reach; index and rows equal. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_coarsen_evict.py BASE VAR
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch") for name, path in (("base", sys.argv[1]), ("var", sys.argv[2]))}
B, H, N, D, bs = 1, 32, 32768, 128, 64
x = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
nbytes = x.numel() * 2 * (1 + 1 / bs) + B * H * (N // bs) * 4
y = torch.empty(1 << 29, device="cuda", dtype=torch.float16)
z = torch.empty_like(y)
outs = {f: forms[f].max_l2_coarsen(x, bs) for f in forms}
print(f"GPU {torch.cuda.get_device_name()}; equal: "
      f"{all(torch.equal(a, b) for a, b in zip(outs['base'], outs['var']))}")
times = {}
for r in range(5):
    copy = do_bench(lambda: z.copy_(y), return_mode="median")
    read = do_bench(lambda: x.sum(dtype=torch.float32), return_mode="median")
    times.setdefault("copy 1 GiB GB/s", []).append(2 * y.numel() * 2 / copy / 1e6)
    times.setdefault("x.sum GB/s", []).append(x.numel() * 2 / read / 1e6)
    for f in (("base", "var") if r % 2 == 0 else ("var", "base")):
        ms = do_bench(lambda: forms[f].max_l2_coarsen(x, bs), return_mode="median")
        times.setdefault(f + " us", []).append(ms * 1e3)
        times.setdefault(f + " GB/s", []).append(nbytes / ms / 1e6)
for key, ts in times.items():
    print(f"  {key:16s} " + " ".join(f"{t:7.1f}" for t in ts))
