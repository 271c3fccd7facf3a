"""jax.vmap of ato_jax ops on the GPU (not a test): the mapped axis folded into the batch (one
launch) against the same op mapped slice by slice (jax.lax.map, what a vmap without folding
runs), jitted, forward and forward+backward; and the folded results bitwise the per-slice
ones. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_jax_vmap_fold.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

import ato_jax


def median_ms(fn, *args, reps=20):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


print(f"GPU {jax.devices()[0].device_kind}; jax {jax.__version__}", flush=True)
rng = np.random.default_rng(0)
cases = {
    "flash_attention causal, V8 x [1, 16, 1024, 64] bf16": (
        lambda q, k, v: ato_jax.flash_attention(q, k, v, causal=True),
        [jnp.asarray(rng.standard_normal((8, 1, 16, 1024, 64)), jnp.bfloat16) for _ in range(3)]),
    "layer_norm, V8 x [512, 4096] bf16 (weights unmapped)": (
        lambda x: ato_jax.layer_norm(x, jnp.ones(4096, jnp.bfloat16), jnp.zeros(4096, jnp.bfloat16)),
        [jnp.asarray(rng.standard_normal((8, 512, 4096)), jnp.bfloat16)]),
    "softmax, V32 x [64, 4096] fp32": (ato_jax.softmax, [jnp.asarray(rng.standard_normal((32, 64, 4096)), jnp.float32)]),
}
for label, (fn, args) in cases.items():
    loss = lambda *a: sum(jnp.sum(o.astype(jnp.float32) ** 2) for o in jax.tree.leaves(fn(*a)))  # noqa: E731
    grad = jax.grad(loss, argnums=tuple(range(len(args))))
    for what, f in (("fwd", fn), ("fwd+bwd", grad)):
        folded = jax.jit(jax.vmap(f))
        mapped = jax.jit(lambda *a, f=f: jax.lax.map(lambda xs: f(*xs), a))
        same = all(np.array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))
                   for x, y in zip(jax.tree.leaves(folded(*args)), jax.tree.leaves(mapped(*args))))
        t_fold, t_map = median_ms(folded, *args), median_ms(mapped, *args)
        print(f"{label:55s} {what:8s} vmap (folded) {t_fold:8.3f} ms  lax.map {t_map:8.3f} ms  "
              f"{t_fold / t_map:.2f}x  bitwise equal {same}", flush=True)
