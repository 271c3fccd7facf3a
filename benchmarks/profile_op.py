"""CUDA kernels of ato_torch.layer_norm forward+backward (16384 x 4096 bf16), from
torch.profiler (not a test): which launches a call makes and their device time."""

import torch
from torch.profiler import ProfilerActivity, profile

import ato_torch

g = torch.Generator(device="cuda").manual_seed(0)
x, dy = (torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
w, b = (torch.randn(4096, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
x.requires_grad_()


def step():
    for t in (x, w, b):
        t.grad = None
    ato_torch.layer_norm(x, w, b).backward(dy)


for _ in range(3):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(10):
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=50))
