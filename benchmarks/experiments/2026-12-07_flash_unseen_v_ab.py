"""A/B of the portable flash kernels' reads of unseen values: the tree before (argv[1]) against
this one (argv[2]), imported into one process and timed in alternating rounds
(benchmarks/tools/ab.py). The new forward reads as 0 the values of keys no query row of the
block sees (a reduction of the visibility over the block's rows, masked tiles only); the new
backward selects dS to 0 outside the visible pairs. The paths where every tile is masked (a bias
or a mask: the portable kernels at bf16 D128) pay it most; fp32 causal window (portable at every D)
pays it in the band's edge tiles. do_bench medians, us. Not measured yet: on an H200 (session 62) it
ran out of its 170 s in compilation, after the GPU tier in the same command; give it 300 s alone."""
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load  # noqa: E402

from ato_cli.bench import _torch_fwd_bwd  # noqa: E402

old, new = load(sys.argv[1]), load(sys.argv[2])
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
bf = [torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]
f32 = [torch.randn(1, 16, N, D, device="cuda", generator=g) for _ in range(4)]
variants = {
    "bias [H, N, N] bf16 causal": (bf, {"causal": True, "bias": torch.randn(H, N, N, device="cuda",
                                                                          dtype=torch.bfloat16, generator=g)}),
    "fp32 causal window (1024, 0) B1 H16": (f32, {"causal": True, "window_size": (1024, 0)}),
}


def fwd(mod, x, kw):
    return lambda: mod.flash_attention(x[0], x[1], x[2], **kw)


def fwd_bwd(mod, x, kw):
    return _torch_fwd_bwd(lambda a, b, c: mod.flash_attention(a, b, c, **kw), x[:3], x[3])


fns = {}
for name, (x, kw) in variants.items():
    for mode, make in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        for tag, mod in (("old", old), ("new", new)):
            fns[(name, mode, tag)] = make(mod, x, kw)
res = alternate(fns, 3, lambda f: do_bench(f, warmup=50, rep=200, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; D{D}, N{N}; do_bench medians (us), 3 alternating rounds")
for name in variants:
    for mode in ("fwd", "fwd+bwd"):
        o, n = (statistics.median(res[(name, mode, t)]) * 1e3 for t in ("old", "new"))
        print(f"{name:38s} {mode:8s} old {o:9.1f}  new {n:9.1f}  new/old {n / o:.3f}")
