"""Issue 22: the Gluon forward hung now and then in the GPU tier (a 1x1 causal call, a
2048 full call). Runs it many times a shape, each shape in its own process under a time
limit, to find which launches hang: ato's kernel (torch, then JAX) and the session-34 probe.

    python3 benchmarks/experiments/2026-11-27_flash_hopper_stress.py [REPS]
"""
import subprocess
import sys

SHAPES = [  # B, Hq, Hkv, Nq, Nk, causal, dtype
    (3, 2, 2, 1, 1, True, "float16"), (2, 8, 8, 2048, 2048, False, "bfloat16"), (1, 4, 4, 777, 300, True, "float16"),
    (2, 8, 2, 1000, 1000, True, "bfloat16"), (4, 32, 32, 4096, 4096, True, "bfloat16"),
]

CHILD = r"""
import sys, time, torch
B, Hq, Hkv, Nq, Nk, causal, dtype, how, reps = eval(sys.argv[1])
dt = getattr(torch, dtype)
q = torch.randn(B, Hq, Nq, 128, device="cuda", dtype=dt)
k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", dtype=dt) for _ in range(2))
t0 = time.time()
if how == "torch":
    import ato_torch
    for i in range(reps):
        ato_torch.flash_attention(q, k, v, causal=causal)
        if i % 50 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
elif how == "jax":
    import jax, jax.numpy as jnp, ato_jax
    qj, kj, vj = (jnp.asarray(t.float().cpu().numpy()).astype(dtype) for t in (q, k, v))
    f = jax.jit(lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=causal))
    for i in range(reps):
        o = f(qj, kj, vj)
        if i % 50 == 0:
            o.block_until_ready()
    o.block_until_ready()
print("ok", round(time.time() - t0, 2), flush=True)
"""


def main():
    for shape in SHAPES:
        for how in ("torch", "jax"):
            reps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
            reps = reps if shape[3] < 3000 else reps // 6
            try:
                r = subprocess.run([sys.executable, "-c", CHILD, repr((*shape, how, reps))], capture_output=True,
                                   text=True, timeout=60)
                out = (r.stdout.strip() or r.stderr.strip()[-300:])
            except subprocess.TimeoutExpired:
                out = "HUNG (60 s)"
            print(shape, how, reps, out, flush=True)


if __name__ == "__main__":
    main()
