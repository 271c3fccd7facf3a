"""max_l2_coarsen forward and backward on a few shapes (N not a multiple of the block, odd D,
every block size, a strided view; the Gluon kernel's on sm_90), each against the float64 reference: run under
compute-sanitizer (memcheck) on the GPU machine to find out-of-range accesses.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_coarsen_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.block_sparse import plans, reference

plans.HOPPER_COARSEN["MIN_TILES"] = 0  # the Gluon coarsening at these small shapes too (sm_90)

for B, H, N, D, bs, dtype in [(2, 3, 37, 48, 16, torch.bfloat16), (1, 2, 1000, 200, 256, torch.float32),
                              (1, 4, 129, 5, 128, torch.float16), (2, 2, 4096, 128, 64, torch.bfloat16),
                              # the Gluon kernel's (sm_90: fp16 / bf16, D a power of two; 2026-11-29)
                              (2, 3, 1000, 16, 16, torch.float16), (1, 2, 300, 256, 256, torch.bfloat16),
                              (3, 1, 64, 32, 32, torch.bfloat16), (1, 4, 999, 64, 128, torch.float16)]:
    g = torch.Generator(device="cuda").manual_seed(N)
    x = torch.randn(B, N, H, D, device="cuda", generator=g).to(dtype).transpose(1, 2).requires_grad_()
    xc, idx = ato_torch.max_l2_coarsen(x, bs)
    rc, ri = reference.max_l2_coarsen(x.detach().double(), bs)
    cot = torch.randn_like(xc)
    (dx,) = torch.autograd.grad(xc, x, cot)
    expect = torch.zeros(B * H, N, D, device="cuda", dtype=dtype)
    flat = idx.reshape(B * H, -1).long()
    expect[torch.arange(B * H, device="cuda")[:, None], flat] = cot.reshape(B * H, -1, D)
    print(f"B{B} H{H} N{N} D{D} block{bs} {dtype} (strided): index equal {bool(torch.equal(idx, ri))}, rows equal "
          f"{bool(torch.equal(xc.double(), rc))}, dx equal {bool(torch.equal(dx, expect.reshape(B, H, N, D)))}",
          flush=True)
