"""Based's forward state walk (plans.WALK) by batch size at H16 N4096 d16 Dv64 bf16: 4
programs per b*h (two 64-row quadratic tiles, the 16-row rest, the constant and linear
rows), so B 2, 4, 8, 16 give 128, 256, 512, 1024 programs against 2 resident an SM (255
registers). Per-kernel device time of one forward. Not a test; on the GPU machine, after
``source benchmarks/tools/gpu_env.sh``: python benchmarks/experiments/2026-11-26_based_walk_waves.py
Run on b63c505 (plans.WALK_WAVES a float then; a Waves pair since).
"""
import torch

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops.based import plans

plans.WALK_WAVES = 0.0
H, N, d, Dv = 16, 4096, 16, 64
print(f"GPU {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs")
for B in (1, 2, 4, 8, 16):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    v = torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g)
    per = device_kernels(lambda: ato_torch.based_attention(q, k, v), lambda out: torch.cuda.synchronize())
    walk = per["based_state_walk_kernel"][1]
    print(f"B{B:3d}: {B * H * 4:5d} walk programs | walk {walk:7.1f} us ({walk / B:6.1f} per batch row) | output pass "
          f"{per['based_fwd_kernel'][1]:7.1f} us", flush=True)
