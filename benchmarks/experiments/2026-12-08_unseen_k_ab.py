"""A/B of the zeroed keys and values of keys no query sees: the tree before (argv[1]) against
another (argv[2]), imported into one process and timed in alternating rounds
(benchmarks/tools/ab.py). The Gluon kernels (bf16 D128 on sm_90) zero the first tile's values
below a window and the last tile's past the band (forward), the masked tiles' keys and values
outside the band (dQ), the held values below the window (dK / dV); the portable dQ reads keys as
it reads values (a range; with a mask also a select by the keys some row sees). argv[3], if
given: the variants whose names hold it alone. do_bench medians, us."""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, launched, load, op_fns, print_ratios  # noqa: E402

old, new = load(sys.argv[1]), load(sys.argv[2])
D = 128
g = torch.Generator(device="cuda").manual_seed(0)


def bf(B, H, N):
    return [torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]


big, long = bf(4, 32, 4096), bf(1, 32, 16384)
f32 = [torch.randn(1, 16, 4096, D, device="cuda", generator=g) for _ in range(4)]
rows = torch.arange(4096, device="cuda")
band = (rows[None, :] <= rows[:, None]) & (rows[None, :] > rows[:, None] - 1024)
keep = torch.rand(4, 32, 4096 // 128, 4096 // 128, device="cuda", generator=g) < 0.5
variants = {
    "causal B4 H32 N4096 bf16": ("flash_attention", big, {"causal": True}),
    "full B4 H32 N4096 bf16": ("flash_attention", big, {}),
    "causal window (4096, 0) B1 H32 N16384": ("flash_attention", long, {"causal": True, "window_size": (4096, 0)}),
    "block_sparse bs128 keep 0.5 causal": ("block_sparse_attention", big + [keep], {"causal": True,
                                                                                   "block_size": 128}),
    "mask [N, N] band 1024 bf16 (portable)": ("flash_attention", big, {"mask": band}),
    "fp32 causal window (1024, 0) B1 H16 (portable)": ("flash_attention", f32, {"causal": True,
                                                                               "window_size": (1024, 0)}),
}


if len(sys.argv) > 3:
    variants = {n: v for n, v in variants.items() if sys.argv[3] in n}
fns = op_fns({"old": old, "new": new}, variants)
for name in variants:
    print(name, "kernels:", sorted(set(launched(fns[(name, "fwd+bwd", "new")], ""))), flush=True)
res = alternate(fns, 3, lambda f: do_bench(f, warmup=50, rep=200, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; D{D}; do_bench medians (us), 3 alternating rounds")
print_ratios(res, variants)
