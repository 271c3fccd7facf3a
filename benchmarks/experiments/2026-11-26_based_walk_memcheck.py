"""based_attention's causal state walks (plans.WALK_WAVES = 0: taken whatever B*H), forward
and backward with an initial and a final state, against the float64 reference: run under
compute-sanitizer (memcheck) on the GPU machine to find out-of-range reads or writes.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-26_based_walk_memcheck.py
Each argument "BxHxNxdxDv[:dtype]" (default: the shapes below).
"""
import sys

import numpy as np
import torch

import ato_torch
from ato_core.ops.based import plans, reference
from ato_core.target import Target

plans.WALK_WAVES = 0.0
shapes = sys.argv[1:] or ["1x2x300x32x48", "2x3x777x5x48", "1x3x777x17x48", "1x2x600x16x80:float32",
                          "1x2x300x16x64:float16", "2x2x1000x16x64"]
for shape in shapes:
    dims, _, dtype = shape.partition(":")
    B, H, N, d, Dv = map(int, dims.split("x"))
    F = 1 + d + d * d
    dt = getattr(torch, dtype or "bfloat16")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", generator=g).to(dt).requires_grad_() for _ in range(2))
    v = torch.randn(B, H, N, Dv, device="cuda", generator=g).to(dt).requires_grad_()
    S0 = (0.1 * torch.randn(B, H, F, Dv, device="cuda", generator=g)).requires_grad_()
    z0 = (0.1 * torch.rand(B, H, F, device="cuda", generator=g) + 1).requires_grad_()
    o, (S, z) = ato_torch.based_attention(q, k, v, initial_state=(S0, z0), output_final_state=True)
    grads = torch.autograd.grad(o.float().square().sum() + S.sum() + z.sum(), (q, k, v, S0, z0))
    np64 = lambda t: np.asarray(t.detach().double().cpu())  # noqa: E731
    ref, (S_ref, _) = reference.based_attention(*map(np64, (q, k, v)), causal=True,
                                                initial_state=(np64(S0), np64(z0)), output_final_state=True)
    rel = lambda x, r: np.linalg.norm(np64(x) - r) / np.linalg.norm(r)  # noqa: E731
    walks = plans.config(B, H, N, d, Dv, str(dt).replace("torch.", ""), True,
                         Target(False, torch.cuda.get_device_properties(0).multi_processor_count)).walk
    fin = all(bool(torch.isfinite(t).all()) for t in grads)
    print(f"{shape} walk={walks is not None}: o rel err {rel(o, ref):.1e}, S {rel(S, S_ref):.1e}, "
          f"gradients finite {fin}", flush=True)
