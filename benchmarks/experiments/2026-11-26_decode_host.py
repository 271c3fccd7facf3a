"""ato_torch.decode_attention's host time at B1 (bench.paged_batch, bs16): calls dispatched
without waiting, timed to their return (us a call, median of 5 rounds of 200), against SDPA's on
contiguous keys and a bare launch of an empty Triton kernel; then cProfile of 2000 calls (the
top functions by own time). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_decode_host.py
"""
import cProfile
import pstats
import statistics
import time

import torch
import torch.nn.functional as F
import triton

import ato_torch
from ato_cli import bench


@triton.jit
def _empty(X):
    pass


def host_us(fn, rounds=5, calls=200):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


q, kc, vc, table, lens = bench.paged_batch(1, 16)
k, v = (c[table.long()].reshape(1, 8192, 8, 128).transpose(1, 2).contiguous() for c in (kc, vc))
x = torch.empty(1, device="cuda")
print(f"GPU {torch.cuda.get_device_name()}; B1 Hq32 Hkv8 N8192 D128 bs16 bf16, host us a call")
print(f"  ato_torch.decode_attention {host_us(lambda: ato_torch.decode_attention(q, kc, vc, table, lens)):.1f}")
print(f"  SDPA contiguous            {host_us(lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)):.1f}")
print(f"  empty Triton kernel[(1,)]  {host_us(lambda: _empty[(1,)](x)):.1f}")
prof = cProfile.Profile()
prof.enable()
for _ in range(2000):
    ato_torch.decode_attention(q, kc, vc, table, lens)
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
