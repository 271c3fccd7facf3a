"""Two forward+backward passes of based_attention (causal B8 H16 N4096 d16 Dv64 bf16), for
Nsight Compute to profile the second (results: NVIDIA_H100_80GB_HBM3-based-blocks.txt,
section 4d). Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:

    ncu --kernel-name regex:"based_(fwd|bwd_dq|bwd_dkdv|state)_kernel" --launch-skip 4 \\
        --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        --section MemoryWorkloadAnalysis python benchmarks/experiments/2026-11-24_based_ncu.py
"""
import torch

import ato_torch

B, H, N, d, Dv = 8, 16, 4096, 16, 64
g = torch.Generator(device="cuda").manual_seed(0)
q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
v.requires_grad_()
for _ in range(2):
    o = ato_torch.based_attention(q, k, v)
    torch.autograd.grad(o, (q, k, v), do)
torch.cuda.synchronize()
