"""A/B of the portable flash and block-sparse kernels' reads of unseen values: the tree before
(argv[1]) against another (argv[2]), imported into one process and timed in alternating rounds
(benchmarks/tools/ab.py). The paths where every tile is masked (a bias or a mask: the portable
kernels at bf16 D128) pay most for reading the values of keys no query of a tile sees as 0;
fp32 causal window (portable at every D) pays in the band's edge tiles; block-sparse at
block_size 64 (portable) in the diagonal tiles. do_bench medians, us."""
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
rows = torch.arange(N, device="cuda")
band = (rows[None, :] <= rows[:, None]) & (rows[None, :] > rows[:, None] - 1024)
keep = torch.rand(B, H, N // 64, N // 64, device="cuda", generator=g) < 0.5
variants = {
    "bias [H, N, N] bf16 causal": ("flash_attention", bf, {"causal": True, "bias": torch.randn(
        H, N, N, device="cuda", dtype=torch.bfloat16, generator=g)}),
    "mask [N, N] band 1024 bf16": ("flash_attention", bf, {"mask": band}),
    "fp32 causal window (1024, 0) B1 H16": ("flash_attention", f32, {"causal": True, "window_size": (1024, 0)}),
    "block_sparse bs64 keep 0.5 bf16 causal": ("block_sparse_attention", bf + [keep],
                                               {"causal": True, "block_size": 64}),
}


def call(mod, op, x, kw):
    return lambda a, b, c: getattr(mod, op)(a, b, c, *x[4:], **kw)


def fwd(mod, op, x, kw):
    f = call(mod, op, x, kw)
    return lambda: f(*x[:3])


def fwd_bwd(mod, op, x, kw):
    return _torch_fwd_bwd(call(mod, op, x, kw), x[:3], x[3])


fns = {}
for name, (op, x, kw) in variants.items():
    for mode, make in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        for tag, mod in (("old", old), ("new", new)):
            fns[(name, mode, tag)] = make(mod, op, x, kw)
res = alternate(fns, 3, lambda f: do_bench(f, warmup=50, rep=200, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; D{D}, N{N}; do_bench medians (us), 3 alternating rounds")
for name in variants:
    for mode in ("fwd", "fwd+bwd"):
        o, n = (statistics.median(res[(name, mode, t)]) * 1e3 for t in ("old", "new"))
        print(f"{name:40s} {mode:8s} old {o:9.1f}  new {n:9.1f}  new/old {n / o:.3f}")
