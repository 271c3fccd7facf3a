"""flash_attention with segment ids (B4 H32 N4096 D128 bf16 causal): plain causal, one segment,
8 equal documents, forward and forward+backward do_bench medians (us), at the segment range
scan's step given as argv[1] (kernels.SEGMENT_SCAN_TILES, tiles a step). Not a test. On the GPU
machine: python3 benchmarks/experiments/2026-11-26_flash_segments.py 16
"""
import sys

import torch
import triton.language as tl
from triton.testing import do_bench

import ato_core.ops.flash_attention.kernels as K
import ato_torch

K.SEGMENT_SCAN_TILES = tl.constexpr(int(sys.argv[1]))
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
one = torch.zeros((B, N), device="cuda", dtype=torch.int32)
docs = (torch.arange(N, device="cuda", dtype=torch.int32) * 8 // N).expand(B, N).contiguous()
line = f"scan tiles {sys.argv[1]:>3}:"
for name, kw in (("plain", {}), ("one segment", {"segment_ids": one}), ("8 documents", {"segment_ids": docs})):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fwd = do_bench(lambda: ato_torch.flash_attention(q, k, v, causal=True, **kw), warmup=25, rep=200,
                   return_mode="median") * 1e3
    fb = do_bench(lambda: torch.autograd.grad(ato_torch.flash_attention(*leaves, causal=True, **kw), leaves, do),
                  warmup=25, rep=200, return_mode="median") * 1e3
    line += f" | {name} fwd {fwd:7.1f} fwd+bwd {fb:7.1f}"
print(line, flush=True)
