"""block_sparse_attention forward and backward on a few shapes (partial blocks, Nq != Nk, GQA,
causal, empty rows), each against the float64 reference: run under compute-sanitizer
(memcheck) on the GPU machine to find out-of-range accesses (the last two shapes: the Gluon
forward on Hopper).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_block_sparse_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.block_sparse import reference

for B, Hq, Hkv, Nq, Nk, D, bs, causal, dtype in [(1, 4, 2, 300, 300, 128, 64, True, torch.bfloat16),
                                                 (2, 2, 1, 100, 250, 80, 16, False, torch.float16),
                                                 (1, 2, 2, 257, 129, 48, 128, True, torch.float32),
                                                 # the Gluon forward on Hopper (blocks from 128, D 128)
                                                 (1, 4, 2, 300, 400, 128, 128, True, torch.bfloat16),
                                                 (2, 2, 1, 100, 700, 128, 256, False, torch.float16)]:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    q = torch.randn(B, Hq, Nq, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    mask = torch.rand(B, Hq, -(-Nq // bs), -(-Nk // bs), device="cuda", generator=g) < 0.4
    mask[0, 0, 0] = False
    o = ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs, causal=causal)
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ro = reference.block_sparse_attention(*leaves, mask, block_size=bs, causal=causal)
    rgrads = torch.autograd.grad(ro, leaves, do.double())
    errs = [float((a.double() - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip((o, *grads), (ro, *rgrads))]
    print(f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} D{D} block{bs} causal {causal} {dtype}: rel err o, dq, dk, dv "
          f"{', '.join(f'{e:.1e}' for e in errs)}", flush=True)
