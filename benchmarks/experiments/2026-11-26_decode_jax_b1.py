"""Where ato_jax's decode at B1 (46 us a call against ato_torch's 29.6 in decode.txt) spends its
time: wall time per call (ato bench's JAX method: back-to-back calls, one sync) against the
device kernels per call (CUPTI), for ato_torch and ato_jax, B1 and B8 (bench.paged_batch, bs16);
and the JAX call's host time alone (calls dispatched without waiting, timed to their return).
Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_decode_jax_b1.py
"""
import time

import jax
import jax.numpy as jnp
import torch

import ato_jax
import ato_torch
from ato_cli import bench

print(f"GPU {torch.cuda.get_device_name()}; decode Hq32 Hkv8 N8192 D128 bs16 bf16 (us)")
for B in (1, 8):
    q, kc, vc, table, lens = bench.paged_batch(B, 16)
    args = (bench.to_jax_bf16(q), bench.to_jax_bf16(kc), bench.to_jax_bf16(vc), jnp.asarray(table.cpu().numpy()),
            jnp.asarray(lens.cpu().numpy()))
    js = jax.jit(lambda *a: ato_jax.decode_attention(*a))

    def tcall():
        return ato_torch.decode_attention(q, kc, vc, table, lens)
    wall_t = bench._bench_torch(tcall, False) * 1e3
    wall_j = bench._median_jax(js, *args, reps=10) * 1e3
    dev_t = bench.device_kernels(tcall, lambda out: torch.cuda.synchronize())
    dev_j = bench.device_kernels(lambda: js(*args), lambda out: jax.block_until_ready(out))
    host = []
    for _ in range(5):
        out = js(*args)
        jax.block_until_ready(out)
        t = time.perf_counter()
        for _ in range(50):
            out = js(*args)
        host.append((time.perf_counter() - t) / 50 * 1e6)
        jax.block_until_ready(out)
    for name, wall, dev in (("ato_torch", wall_t, dev_t), ("ato_jax", wall_j, dev_j)):
        print(f"  B{B} {name:9s} wall {wall:7.1f}; device " + ", ".join(f"{n} x{c:.0f} {us:.1f}"
                                                                  for n, (c, us) in dev.items()))
    print(f"  B{B} ato_jax host time of a call (dispatch only): {sorted(host)[2]:.1f}", flush=True)
