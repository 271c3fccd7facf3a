"""based_attention forward+backward on a few shapes, each against the float64 reference:
run under compute-sanitizer (memcheck) on the GPU machine, it finds the kernels that read
out of range, which the Triton 3.6 miscompiles of some tile shapes do (results index: Based).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_based_memcheck.py
Each argument "BxHxNxdxDv[:dtype]" (default: the shapes below, bf16); causal and bidirectional.
"""
import sys

import numpy as np
import torch

import ato_torch
from ato_core.ops.based import reference

shapes = sys.argv[1:] or ["1x2x300x32x256", "2x4x2048x16x64", "1x3x777x5x48"]
for shape in shapes:
    dims, _, dtype = shape.partition(":")
    B, H, N, d, Dv = map(int, dims.split("x"))
    dt = getattr(torch, dtype or "bfloat16")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", generator=g).to(dt).requires_grad_() for _ in range(2))
    v = torch.randn(B, H, N, Dv, device="cuda", generator=g).to(dt).requires_grad_()
    for causal in (True, False):
        o, (S, _) = ato_torch.based_attention(q, k, v, causal=causal, output_final_state=True)
        dq, dk, dv = torch.autograd.grad(o.float().square().sum(), (q, k, v))
        ref, (S_ref, _) = reference.based_attention(*(np.asarray(t.detach().double().cpu()) for t in (q, k, v)),
                                                    causal=causal, output_final_state=True)
        rel = lambda x, r: np.linalg.norm(x.detach().double().cpu().numpy() - r) / np.linalg.norm(r)  # noqa: E731
        fin = all(bool(torch.isfinite(t).all()) for t in (dq, dk, dv))
        print(f"{shape} causal={causal}: o rel err {rel(o, ref):.1e}, S {rel(S, S_ref):.1e}, "
              f"gradients finite {fin}", flush=True)
