"""linear_cross_entropy's kernels one by one (device time per call, torch.profiler) at T8192
H4096 V128256 bf16 under several tile settings (plans.SETTINGS.half), loss + gradients of x
and weight; matmul + ato_torch.cross_entropy timed alongside.

    [CHUNK_MIB=128] python benchmarks/experiments/2026-11-25_lce_tiles.py [bt,bv,bk,bm,bn,bk2,warps,stages ...]
"""
import os
import sys

import torch

import ato_torch
from ato_cli.bench import _bench_torch, device_kernels
from ato_core.ops.linear_cross_entropy import LINEAR_CROSS_ENTROPY, plans

T, H, V = 8192, 4096, 128256
g = torch.Generator(device="cuda").manual_seed(0)
x = (torch.randn(T, H, device="cuda", generator=g) * 0.5).to(torch.bfloat16).requires_grad_()
w = (torch.randn(V, H, device="cuda", generator=g) * 0.02).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, V, (T,), device="cuda", generator=g)


def call(fn):
    return lambda: torch.autograd.grad(fn(x, w), (x, w))


base = _bench_torch(call(lambda a, b: ato_torch.cross_entropy(a @ b.T, t)), True)
print(f"matmul + ato_torch.cross_entropy: {base * 1e3:.0f} us", flush=True)
CONFIGS = [a.split(",") for a in sys.argv[1:]] or [
    ("128", "256", "64", "128", "256", "64", "8", "3"),
    ("128", "128", "64", "128", "256", "64", "8", "3"),
    ("128", "128", "64", "128", "128", "64", "8", "4"),
    ("128", "128", "64", "128", "128", "64", "4", "4"),
    ("64", "256", "64", "128", "128", "64", "4", "3"),
]
for cfg in CONFIGS:
    tiles = plans.Tiles(*map(int, cfg))
    plans.SETTINGS = plans.SETTINGS._replace(half=tiles, chunk_bytes=int(os.environ.get("CHUNK_MIB", 128)) << 20)
    for fn in (plans.forward_plan, plans.backward_plan, plans.stats_plan):
        fn.cache_clear()
    LINEAR_CROSS_ENTROPY.cached_forward.cache_clear()
    run = call(lambda a, b: ato_torch.linear_cross_entropy(a, b, t))
    try:
        ms = _bench_torch(run, True)
        per = device_kernels(run, lambda out: torch.cuda.synchronize(), calls=3)
    except Exception as exc:
        print(f"{tiles}: failed {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        continue
    parts = ", ".join(f"{n.split('_kernel')[0].replace('lce_', '')} {us / 1e3:.1f}" for n, (c, us) in
                      sorted(per.items(), key=lambda kv: -kv[1][1]) if us > 50)
    print(f"{tuple(tiles)}: {ms:.1f} ms = {ms / base:.2f}x; kernels (ms per call): {parts}", flush=True)
