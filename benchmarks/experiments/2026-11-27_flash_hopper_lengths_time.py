"""Issue 25 on the Gluon forward: padding lengths (full length, so the same work) and a window
against plain causal, B4 H32 N4096 D128 bf16, forward, in one process (do_bench median).

    python3 benchmarks/experiments/2026-11-27_flash_hopper_lengths_time.py
"""
import torch
from triton.testing import do_bench

import ato_torch

B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
full = torch.full((B,), N, device="cuda", dtype=torch.int32)
variants = {"plain": {}, "q/kv lengths": {"q_lengths": full, "kv_lengths": full}, "window 1024": {"window_size": (1024, 0)}}
base = None
print(torch.cuda.get_device_name(), f"B{B} H{H} N{N} D{D} bf16 causal, forward")
for name, kw in variants.items():
    ms = do_bench(lambda kw=kw: ato_torch.flash_attention(q, k, v, causal=True, **kw), warmup=100, rep=500,
                  return_mode="median")
    base = base or ms
    print(f"{name:14s} {ms * 1e3:8.1f} us  {ms / base:.2f}x plain", flush=True)
