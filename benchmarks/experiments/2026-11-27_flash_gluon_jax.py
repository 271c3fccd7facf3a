"""Issue 22 probe: can jax-triton 0.3.1 launch a Gluon kernel? It compiles every kernel through
the tl front end (ast_to_ttir, then make_ttir/make_ttgir) and launches num_warps * 32 threads;
a Gluon kernel needs GluonASTSource and, when warp-specialised, the total warps of its partitions
(metadata.num_warps). This wraps get_or_create_triton_kernel for Gluon functions: the same
signature and specialisation as jax-triton builds, compiled by triton.compile, launched with
the compiled warp count. Then the warp-specialised forward from both frameworks, bits compared.
The wrapper is ato_jax.launcher._compile_gluon now (import_jax_triton installs it); this probe's
own copy of it, which gave session 34's result, is in the git history.

    python3 2026-11-27_flash_gluon_jax.py      # H100
"""
import importlib.util
import os

import numpy as np


def main():
    import jax
    import jax.numpy as jnp
    import torch
    import triton
    from ato_jax.launcher import import_jax_triton
    spec = importlib.util.spec_from_file_location("g", os.path.join(os.path.dirname(__file__),
                                                                   "2026-11-27_flash_gluon.py"))
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    jt = import_jax_triton()  # with ato_jax.launcher._compile_gluon installed (jax-triton 0.3.x)
    print("GPU", torch.cuda.get_device_name())
    regs = (240, 24, 32, True, False)
    for B, H, N, D, causal in ((2, 4, 1000, 128, True), (2, 4, 1000, 128, False), (4, 32, 4096, 128, True)):
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o_t, lse_t = g.launch(q, k, v, causal, 3, ws=regs)
        qj, kj, vj = (jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16) for x in (q, k, v))
        st = (H * N * D, N * D, D)

        def fwd(qj, kj, vj):
            return jt.triton_call(
                qj, kj, vj, *st, *st, *st, *st, H, N, np.float32(D**-0.5 * 1.4426950408889634), kernel=g.gluon_fwd_ws,
                out_shape=[jax.ShapeDtypeStruct(qj.shape, qj.dtype), jax.ShapeDtypeStruct((B, H, N), jnp.float32)],
                grid=(triton.cdiv(N, 128), B * H), num_warps=4, num_stages=3, CAUSAL=causal, BLOCK_N=128, D=D,
                STAGES=3, CHUNK=regs[2], CONSUMER_REGS=regs[0], PRODUCER_REGS=regs[1], FMA=regs[3], PINGPONG=regs[4])

        f = jax.jit(fwd)
        o_j, lse_j = f(qj, kj, vj)
        o_j = np.asarray(o_j.astype(jnp.float32))
        same_o = np.array_equal(o_j, o_t.float().cpu().numpy())
        same_l = np.array_equal(np.asarray(lse_j), lse_t.cpu().numpy())
        import time
        f(qj, kj, vj)[0].block_until_ready()
        t0 = time.perf_counter()
        for _ in range(20):
            out = f(qj, kj, vj)
        out[0].block_until_ready()
        us = (time.perf_counter() - t0) / 20 * 1e6
        ms = triton.testing.do_bench(lambda: g.launch(q, k, v, causal, 3, ws=regs), warmup=50, rep=300)
        print(f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}: torch == JAX o {same_o}, lse {same_l}; "
              f"JAX {us:.1f} us a call (wall), torch {ms*1e3:.1f} us (do_bench)", flush=True)


if __name__ == "__main__":
    main()
