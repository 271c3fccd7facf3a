"""Issue 22: the Gluon forward's row maxima as a tree (hopper._row_max under ATO_TREE_MAX=1: the
score tile's columns halved four times by register-level reshapes, then the last 8) against
Triton's in-thread chain (the default). The same maxima, so o's bits must not change. Not
kept: the form is 2026-11-28_flash_tree_max.patch (git apply it first); results flash_gluon.txt 25. Run in
alternating processes (one compiled form each): ato_torch, B4 H32 N4096 D128 bf16, forward and
forward+backward, full and causal, do_bench medians; md5 of o.

    for t in 0 1 0 1; do ATO_TREE_MAX=$t python3 benchmarks/experiments/2026-11-28_flash_tree_max.py; done
"""
import hashlib
import os

import torch
from triton.testing import do_bench

import ato_torch

g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(4, 32, 4096, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
flops = 4 * 4 * 32 * 4096 * 4096 * 128
line = [f"ATO_TREE_MAX={os.environ.get('ATO_TREE_MAX', '0')}"]
for causal in (False, True):
    o = ato_torch.flash_attention(q, k, v, causal=causal)
    digest = hashlib.md5(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:10]

    def fwd_bwd():
        for t in leaves:
            t.grad = None
        ato_torch.flash_attention(*leaves, causal=causal).backward(do)
    f = do_bench(lambda: ato_torch.flash_attention(q, k, v, causal=causal), warmup=100, rep=500,
                 return_mode="median") * 1e3
    fb = do_bench(fwd_bwd, warmup=50, rep=500, return_mode="median") * 1e3
    share = 0.5 if causal else 1.0
    line.append(f"{'causal' if causal else 'full'}: fwd {f:7.1f} us ({flops * share / f / 1e6:3.0f} TF/s) "
                f"fwd+bwd {fb:7.1f} us, o md5 {digest}")
print(" | ".join(line), flush=True)
