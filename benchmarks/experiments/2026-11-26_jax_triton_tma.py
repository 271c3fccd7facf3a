"""Can jax-triton launch a kernel that builds tensor descriptors (TMA) in the kernel? Such a
kernel has global_scratch_size > 0: Triton's own launcher passes it scratch memory from
triton.set_allocator; jax-triton 0.3.1 knows nothing of it. Runs the minimal TMA forward of
2026-11-26_flash_hopper_forms.py from JAX (in a child process: a fault ends it) and from
torch, and compares.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python3 benchmarks/experiments/2026-11-26_jax_triton_tma.py
"""
import importlib.util
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _forms():
    spec = importlib.util.spec_from_file_location("forms", os.path.join(HERE, "2026-11-26_flash_hopper_forms.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def child(tma: bool):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ato_jax.launcher import import_jax_triton, kernel_scalars
    jt = import_jax_triton()
    forms = _forms()
    B, H, N, D = 2, 4, 1024, 128
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((B, H, N, D)), jnp.bfloat16) for _ in range(3))
    out = jax.ShapeDtypeStruct(q.shape, q.dtype)
    # scalars as ato's launches pass them (a Python float would reach the kernel as fp64)
    o = jt.triton_call(q, k, v, *kernel_scalars((D ** -0.5 * 1.4426950408889634, N)), kernel=forms.fwd_kernel,
                       out_shape=out, grid=(N // 128, B * H), num_warps=8, num_stages=3, BLOCK_M=128, BLOCK_N=128, D=D,
                       CAUSAL=False, TMA=tma, WS=False, PTRS=False, TAIL=False, LSE=False)
    o = np.asarray(jax.block_until_ready(o).astype(jnp.float32))
    ref = np.asarray(jax.nn.dot_product_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3),
                                                  v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3).astype(jnp.float32))
    print(f"jax-triton TMA={tma}: relative error {np.linalg.norm(o - ref) / np.linalg.norm(ref):.1e}", flush=True)


def main():
    for tma in (False, True):
        r = subprocess.run([sys.executable, __file__, "child", str(int(tma))], capture_output=True, text=True,
                           timeout=300)
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], f"jax_tma_child_{int(tma)}.txt"), "w") as f:
                f.write(r.stdout + r.stderr)
        lines = (r.stdout + r.stderr).strip().splitlines()
        said = [ln for ln in lines if ln.startswith("jax-triton")] or lines[-12:]
        print(f"TMA={tma}: exit {r.returncode}:\n  " + "\n  ".join(said), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(bool(int(sys.argv[2])))
    else:
        main()
