"""Issue 22 probe: can jax-triton 0.3.1 launch a Gluon kernel? It compiles every kernel through
the tl front end (ast_to_ttir, then make_ttir/make_ttgir) and launches num_warps * 32 threads;
a Gluon kernel needs GluonASTSource and, when warp-specialised, the total warps of its partitions
(metadata.num_warps). This wraps get_or_create_triton_kernel for Gluon functions: the same
signature and specialisation as jax-triton builds, compiled by triton.compile, launched with
the compiled warp count. Then the warp-specialised forward from both frameworks, bits compared.

    python3 2026-11-27_flash_gluon_jax.py      # H100
"""
import importlib.util
import os
import types

import numpy as np


def patch_gluon(triton_lib):
    create = triton_lib.get_or_create_triton_kernel
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    cache = {}

    def get_or_create(backend_init_func, platform, fn, arg_dtypes, scalar_args, *, num_warps, num_stages, num_ctas,
                      compute_capability, enable_fp_fusion, metaparams, dump):
        if not getattr(fn, "is_gluon", lambda: False)():
            return create(backend_init_func, platform, fn, arg_dtypes, scalar_args, num_warps=num_warps,
                          num_stages=num_stages, num_ctas=num_ctas, compute_capability=compute_capability,
                          enable_fp_fusion=enable_fp_fusion, metaparams=metaparams, dump=dump)
        cc = compute_capability or triton_lib.triton_kernel_call_lib.get_compute_capability(0)
        backend = backend_init_func(0, cc)
        signature = {fn.arg_names[i]: v for i, v in enumerate(arg_dtypes)}
        alignments = [16] * len(arg_dtypes)
        for i, _, _ in scalar_args:
            alignments[i] = 0
        spec = [triton_lib._triton.native_specialize_impl(
            backend, types.SimpleNamespace(data_ptr=lambda a=a: a, dtype=d.removeprefix("*")), False, True, a > 0)
            for d, a in zip(arg_dtypes, alignments)]
        attrs = {(i, ): backend.parse_attr(attr) for i, (_, attr) in enumerate(spec)}
        constants = dict(metaparams)
        constants.update({k: None for _, k, v in scalar_args if v is None})
        constants.update({fn.arg_names[i]: 1 for i, _, v in scalar_args if v == 1})
        for c in constants:
            signature[c] = "constexpr"
        key = (fn, tuple(signature.items()), tuple(spec), tuple(constants.items()), num_warps, num_ctas, cc)
        if key not in cache:
            src = GluonASTSource(fn, signature, constexprs=constants, attrs=attrs)
            k = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                               options={"num_warps": num_warps, "num_ctas": num_ctas,
                                        "enable_fp_fusion": enable_fp_fusion})
            cache[key] = triton_lib.triton_kernel_call_lib.TritonKernel(
                k.metadata.name, k.metadata.num_warps, num_ctas, k.metadata.shared, k.asm["ptx"], "", cc)
        return cache[key], attrs

    triton_lib.get_or_create_triton_kernel = get_or_create


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
    jt = import_jax_triton()
    patch_gluon(jt.triton_lib)
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
