"""Where ato_jax.linear_cross_entropy's XLA temp memory goes (T8192 H4096 V128256 bf16):
XLA's temp bytes of jit(grad) for x alone, weight alone, both; and the copies of
weight-sized buffers in the optimised HLO (copy insertion around the aliased dweight chain).

    python benchmarks/experiments/2026-11-25_lce_jax_memory.py
"""
import re

import jax
import jax.numpy as jnp

import ato_jax

T, H, V = 8192, 4096, 128256
k = jax.random.split(jax.random.key(0), 3)
x = jax.random.normal(k[0], (T, H), jnp.bfloat16)
w = (jax.random.normal(k[1], (V, H), jnp.float32) * 0.02).astype(jnp.bfloat16)
t = jax.random.randint(k[2], (T,), 0, V)
for argnums in (0, 1, (0, 1)):
    c = jax.jit(jax.grad(lambda a, b: ato_jax.linear_cross_entropy(a, b, t), argnums=argnums)).lower(x, w).compile()
    temp = c.memory_analysis().temp_size_in_bytes
    text = c.as_text()
    copies = [ln.strip()[:160] for ln in text.splitlines() if re.search(r"= bf16\[128256,4096\].* copy\(", ln)]
    print(f"grad argnums={argnums}: temp {temp / 2 ** 20:.0f} MiB, copies of [V, H]: {len(copies)}", flush=True)
    for ln in copies[:3]:
        print("   ", ln)
