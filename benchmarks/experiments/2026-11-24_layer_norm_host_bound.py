"""layer_norm forward+backward from ato_torch at 16384 x 4096 bf16 (the bench's shape): device
time per kernel (torch.profiler), do_bench of the whole step, and the host time of one step
(not a test). Finds where the bench's step spends the time its kernels do not.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-24_layer_norm_host_bound.py
"""
import time

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

import ato_torch

M, N = 16384, 4096
g = torch.Generator(device="cuda").manual_seed(0)
x, dy = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
w, b = (torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
leaves = [t.detach().requires_grad_() for t in (x, w, b)]


def step():
    for t in leaves:
        t.grad = None
    ato_torch.layer_norm(*leaves).backward(dy)


def fwd():
    ato_torch.layer_norm(*leaves)


for _ in range(3):
    step()
torch.cuda.synchronize()
print(f"GPU {torch.cuda.get_device_name()}; layer_norm {M}x{N} bf16")
print(f"do_bench fwd {do_bench(fwd, warmup=25, rep=200) * 1e3:.1f} us, fwd+bwd {do_bench(step, warmup=25, rep=200) * 1e3:.1f} us")
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(50):
    step()
host = (time.perf_counter() - t0) / 50
torch.cuda.synchronize()
print(f"host time of one step (50 steps queued, no sync): {host * 1e6:.1f} us")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
