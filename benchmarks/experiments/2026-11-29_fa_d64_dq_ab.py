"""Issue 22: ato_torch flash_attention fwd+bwd at B16 H16 N1024 D64 bf16 with D64's dQ tiles
as before (128 x 32, 8 warps) or as now (64 x 64, 4 warps), one form a process (the op caches
its plans): do_bench median us and the backward kernels' CUPTI device us.
Usage: python3 this.py old|new."""

import sys

import torch
from triton.testing import do_bench

from ato_cli.bench import device_kernels
from ato_core.ops.flash_attention import plans
from ato_core.ops.flash_attention.plans import Tiles

form = sys.argv[1]
if form == "old":
    fwd, dkdv, _ = plans._GPU_TILES[64]
    plans._GPU_TILES[64] = (fwd, dkdv, Tiles(128, 32, 8, 3))
import ato_torch  # noqa: E402

g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))
for causal in (False, True):
    def step():
        o = ato_torch.flash_attention(q, k, v, causal=causal)
        return torch.autograd.grad(o, (q, k, v), do)

    ms = do_bench(step, warmup=25, rep=200, return_mode="median")
    per = device_kernels(step, lambda out: torch.cuda.synchronize(), calls=50)
    kern = "  ".join(f"{n.split('(')[0][:22]} {us:.1f}" for n, (c, us) in sorted(per.items()))
    print(f"{form} causal={causal}: fwd+bwd {ms * 1e3:.1f} us; device {sum(u for _, u in per.values()):.1f} us: {kern}",
          flush=True)
