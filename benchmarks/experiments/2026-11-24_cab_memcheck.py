"""curvature_block_mask and cab_attention (forward and backward) on shapes whose coarse size M
is not a multiple of the kernels' tiles (M 5, 63, 130), GQA, the Gluon coarsening (sm_90), fp32 / fp16 / bf16, causal and
not, each against the float64 reference: run under compute-sanitizer (memcheck) on the GPU
machine to find out-of-range accesses.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_cab_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.block_sparse import plans, reference

plans.HOPPER_COARSEN["MIN_TILES"] = 0  # the Gluon coarsening at these small shapes too (sm_90)

for B, Hq, Hkv, N, D, bs, causal, dtype in [(1, 4, 2, 300, 128, 64, True, torch.bfloat16),
                                            (2, 2, 1, 1000, 80, 16, False, torch.float16),
                                            (1, 2, 2, 4160, 48, 32, True, torch.float32),
                                            # q and k in one Gluon coarsening launch on sm_90 (2026-11-29)
                                            (2, 8, 2, 1000, 64, 16, False, torch.float16)]:
    g = torch.Generator(device="cuda").manual_seed(N)
    q = torch.randn(B, Hq, N, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    mask = ato_torch.curvature_block_mask(q.detach(), k.detach(), block_size=bs, keep=0.2, causal=causal)
    rmask = reference.curvature_block_mask(q.detach().double(), k.detach().double(), block_size=bs, keep=0.2,
                                           causal=causal)
    o = ato_torch.cab_attention(q, k, v, block_size=bs, keep=0.2, causal=causal)
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ro = reference.cab_attention(*leaves, block_size=bs, keep=0.2, causal=causal)
    rgrads = torch.autograd.grad(ro, leaves, do.double())
    errs = [float((a.double() - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip((o, *grads), (ro, *rgrads))]
    print(f"B{B} Hq{Hq} Hkv{Hkv} N{N} D{D} block{bs} causal {causal} {dtype}: mask blocks differing "
          f"{int((mask != rmask).sum())} of {mask.numel()}; rel err o, dq, dk, dv "
          f"{', '.join(f'{e:.1e}' for e in errs)}", flush=True)
