"""A/B of the portable flash and block-sparse kernels' reads of unseen values: the tree before
(argv[1]) against another (argv[2]), imported into one process and timed in alternating rounds
(benchmarks/tools/ab.py). The paths where every tile is masked (a bias or a mask: the portable
kernels at bf16 D128) pay most for reading the values of keys no query of a tile sees as 0;
fp32 causal window (portable at every D) pays in the band's edge tiles; block-sparse at
block_size 64 (portable) in the diagonal tiles. do_bench medians, us."""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load, op_fns, print_ratios  # noqa: E402

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


fns = op_fns({"old": old, "new": new}, variants)
res = alternate(fns, 3, lambda f: do_bench(f, warmup=50, rep=200, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; D{D}, N{N}; do_bench medians (us), 3 alternating rounds")
print_ratios(res, variants, 40)
