"""A/B of flash_attention's plain paths: the tree before issue 25's options (argv[1], e.g. an
unpacked `git archive` of the commit before them) against this one (argv[2]), imported into
one process and timed in alternating rounds (benchmarks/tools/ab.py): does the options'
plumbing (new pointers and scalars, the dk/dv kernel's generic query ranges) cost the plain
causal and full forward and forward+backward anything? B4 H32 N4096 D128 bf16, do_bench medians.
"""
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load  # noqa: E402

old, new = load(sys.argv[1]), load(sys.argv[2])
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
leaves = [t.detach().requires_grad_() for t in (q, k, v)]


def fwd(mod, causal):
    return lambda: mod.flash_attention(q, k, v, causal=causal)


def fwd_bwd(mod, causal):
    def run():
        for t in leaves:
            t.grad = None
        mod.flash_attention(*leaves, causal=causal).backward(do)
    return run


fns = {}
for causal in (True, False):
    for mode, make in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        for tag, mod in (("old", old), ("new", new)):
            fns[(causal, mode, tag)] = make(mod, causal)
res = alternate(fns, 4, lambda f: do_bench(f, warmup=100, rep=400, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16; do_bench medians (us), 4 alternating rounds")
for causal in (True, False):
    for mode in ("fwd", "fwd+bwd"):
        o, n = (statistics.median(res[(causal, mode, t)]) * 1e3 for t in ("old", "new"))
        print(f"{'causal' if causal else 'full'} {mode:8s} old {o:8.1f}  new {n:8.1f}  new/old {n / o:.3f}")
