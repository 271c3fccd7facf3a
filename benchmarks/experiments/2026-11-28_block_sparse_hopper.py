"""block_sparse_attention's Gluon kernels (blocks of 128 and 256) against the portable ones, B1 H32
N32768 D128 bf16, 10% of the key blocks kept at random (the diagonal among them), full and
causal: do_bench medians of fwd and fwd+bwd in alternating rounds, dense flash_attention's for
the issue's ratio (dense x kept), o against the portable kernel's. Blocks of 64 (the bench's):
portable either way. Not a test (results: block_sparse-sweep.txt 38, 39).
    python3 benchmarks/experiments/2026-11-28_block_sparse_hopper.py [block sizes, default 64 128 256]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import ato_torch  # noqa: E402
from ato_cli.bench import random_block_mask  # noqa: E402
from ato_core.ops.block_sparse import plans as bp  # noqa: E402
from helpers import clear_plans  # noqa: E402

B, H, N, D = 1, 32, 32768, 128
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
KERNEL = bp.hopper


def use(module):
    bp.hopper = module
    clear_plans("block_sparse_attention", bp.block_sparse_forward_plan, bp.block_sparse_backward_plan)


def med(fn):
    return do_bench(fn, warmup=20, rep=300, return_mode="median") * 1e3


leaves = [t.detach().requires_grad_() for t in (q, k, v)]


def dense_fwd_bwd(causal):
    for t in leaves:
        t.grad = None
    ato_torch.flash_attention(*leaves, causal=causal).backward(do)


print("GPU", torch.cuda.get_device_name(), flush=True)
dense = {c: med(lambda c=c: ato_torch.flash_attention(q, k, v, causal=c)) for c in (False, True)}
dense_fb = {c: med(lambda c=c: dense_fwd_bwd(c)) for c in (False, True)}
print(f"dense flash fwd {dense[False]:.1f} us, causal {dense[True]:.1f} us; fwd+bwd {dense_fb[False]:.1f} us, "
      f"causal {dense_fb[True]:.1f} us", flush=True)
for bs in [int(a) for a in sys.argv[1:]] or [64, 128, 256]:
    mask = random_block_mask(B, H, N // bs, 0.1, "cuda")
    kept = float(mask.float().mean())
    for causal in (False, True):
        lower = torch.ones(N // bs, N // bs, dtype=torch.bool, device="cuda").tril()
        causal_kept = float((mask & lower).float().mean())
        frac = causal_kept * 2 if causal else kept  # of the causal half's blocks (dense causal: about half)
        times, outs = {"gluon": [], "portable": []}, {}
        for _ in range(3):
            for name, module in (("gluon", KERNEL), ("portable", None)):
                use(module)

                def fwd():
                    return ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs, causal=causal)

                def fwd_bwd():
                    for t in leaves:
                        t.grad = None
                    ato_torch.block_sparse_attention(*leaves, mask, block_size=bs, causal=causal).backward(do)

                outs[name] = fwd().float()
                times[name].append((med(fwd), med(fwd_bwd)))
        err = float((outs["gluon"] - outs["portable"]).norm() / outs["portable"].norm())
        for name, ts in times.items():
            f, fb = min(t[0] for t in ts), min(t[1] for t in ts)
            print(f"  block {bs} {'causal' if causal else 'full  '} kept {frac:.3f} {name:8s} fwd "
                  + " ".join(f"{t[0]:8.1f}" for t in ts) + f" us ({f / (dense[causal] * frac):.2f}x dense x kept)"
                  + "  fwd+bwd " + " ".join(f"{t[1]:8.1f}" for t in ts)
                  + f" ({fb / (dense_fb[causal] * frac):.2f}x); o gluon vs portable {err:.1e}", flush=True)
use(KERNEL)
