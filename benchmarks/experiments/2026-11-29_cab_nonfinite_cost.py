"""Device time of curvature_block_mask's kernels with and without the non-finite score rule
(F NaN where a coarse score is not finite; min, max and An @ An over the finite scores):
copies of block_sparse/kernels.py given as files, interleaved rounds at the bench's N, D, block (Hkv 8).
Measured (results/NVIDIA_H200-cab-nonfinite-cost.txt) with v0 = ``git show
cc71a69:ato_core/ops/block_sparse/kernels.py`` (before), v1 = the commit adding this file's,
v2 = v1 with cab_scores_kernel's min / max kept elementwise over its loop and reduced once (not
kept: no difference), v3 = the committed kernels (v1, and the select keeps every NaN F past
n_keep). Usage: python3 this.py CALLS v0.py v1.py [...]."""

import importlib.util
import pathlib
import sys

import torch

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops.block_sparse import plans

calls = int(sys.argv[1])
mods = {}
for path in sys.argv[2:]:
    name = pathlib.Path(path).stem
    spec = importlib.util.spec_from_file_location(f"cab_{name}", path)
    mods[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mods[name])
torch.manual_seed(0)
B, H, Hkv, N, D = 1, 32, 8, 32768, 128
q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16)
masks, times = {}, {n: [] for n in mods}
for rnd in range(3):
    for name, mod in mods.items():
        plans.kern = mod
        fn = lambda: ato_torch.curvature_block_mask(q, k, block_size=64, keep=0.1)  # noqa: E731
        masks[name] = fn()
        times[name].append(device_kernels(fn, lambda out: torch.cuda.synchronize(), calls=calls))
print(f"GPU {torch.cuda.get_device_name()}; B{B} Hq{H} Hkv{Hkv} N{N} D{D} block64 bf16 keep 0.1 causal; "
      f"{calls} calls a round, 3 rounds (us per call, each round)")
first = next(iter(masks))
print(f"masks equal {' == '.join(masks)}:", all(torch.equal(masks[first], m) for m in masks.values()))
kernels = sorted({k for t in times[first] for k in t})
for kern in kernels:
    short = kern.split("(")[0][:34]
    print(f"{short:36s}" + "  ".join(f"{n}: " + " ".join(f"{t[kern][1]:6.1f}" for t in times[n]) for n in mods))
for n in mods:
    print(f"total {n}: " + " ".join(f"{sum(u for _, u in t.values()):7.1f}" for t in times[n]))
