"""Issue 22's D128 shapes after the Gluon backward's producers moved to TMA (dK / dV: Q / dO over
the G query heads by one 3-D descriptor; dQ: K / V): the backward plan (delta, dK / dV, dQ)
against the same plan with the cp.async kernels it replaced (hopper.py at f4747df, taken from
git), gradients compared bit for bit; ato_torch's and ato_jax's fwd+bwd against cuDNN (SDPA's
backend; JAX's dot_product_attention on [B, N, H, D]). do_bench medians (torch), wall over 20
calls (JAX), best of 3 alternating rounds. Not a test. On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_tma_backward.py
"""
import dataclasses
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import ato_torch
from ato_core.launch import Plan
from ato_core.ops.flash_attention import plans
from ato_core.target import cuda_target
from ato_torch.launcher import run_plan, spec
from benchmarks.tools.ab import module_at

old = module_at("f4747df", "ato_core/ops/flash_attention/hopper.py")  # the cp.async producers


def backward(q, k, v, o, lse, do, causal, cp_async):
    target = cuda_target(q.device.index or 0)
    plan = plans.backward_plan(spec(q, "q"), spec(k, "k"), spec(v, "v"), spec(do, "do"), causal=causal,
                               softmax_scale=None, has_dlse=False, target=target)
    delta, dkdv, dq = plan.launches
    assert dkdv.name == "fa_bwd_dkdv_hopper_kernel" and dkdv.scratch and dq.scratch
    if cp_async:
        dkdv = dataclasses.replace(dkdv, kernel=old.fa_bwd_dkdv_hopper_kernel, outputs=dkdv.outputs[:2],
                                   constexprs={**dkdv.constexprs, "CHUNK": 32})
        dq = dataclasses.replace(dq, kernel=old.fa_bwd_dq_hopper_kernel, outputs=dq.outputs[:1],
                                 constexprs={**dq.constexprs, "CHUNK": 32})
    plan = Plan((delta, dkdv, dq), plan.results, plan.dense)
    env = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do}
    return lambda: run_plan(plan, env, target)


def jax_wall(f, *args, n=20):
    jax_block(f(*args))
    t0 = time.perf_counter()
    for _ in range(n):
        out = f(*args)
    jax_block(out)
    return (time.perf_counter() - t0) / n * 1e6


def jax_block(out):
    for x in out:
        x.block_until_ready()


def main():
    import jax
    import jax.numpy as jnp

    import ato_jax
    print(f"GPU {torch.cuda.get_device_name()}", flush=True)
    for B, Hq, Hkv, N, causal in [(4, 32, 32, 4096, False), (4, 32, 32, 4096, True), (1, 32, 32, 16384, True),
                                  (2, 32, 8, 8192, True)]:
        g = torch.Generator(device="cuda").manual_seed(N)
        q = torch.randn(B, Hq, N, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, N, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        do = torch.randn_like(q)
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        new_fn, old_fn = (backward(q, k, v, o, lse, do, causal, c) for c in (False, True))
        new, prev = new_fn(), old_fn()
        same = all(torch.equal(a, b) for a, b in zip(new, prev))  # (dq, dk, dv)
        diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(new, prev))
        print(f"B{B} Hq{Hq} Hkv{Hkv} N{N} D128 bf16 {'causal' if causal else 'full'}: TMA dq, dk, dv == cp.async's "
              f"{same}, max |diff| {diff:.3g}", flush=True)
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

        def sdpa_fb():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, enable_gqa=Hq != Hkv)
            return torch.autograd.grad(out, (qg, kg, vg), do)

        def ato_fb():
            return torch.autograd.grad(ato_torch.flash_attention(qg, kg, vg, causal=causal), (qg, kg, vg), do)

        jq, jk, jv, jdo = (jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) for t in (q, k, v, do))
        jqn, jkn, jvn, jdon = (x.transpose(0, 2, 1, 3) for x in (jq, jk, jv, jdo))

        def vjp(f):
            return jax.jit(lambda a, b, c, d: jax.vjp(f, a, b, c)[1](d))

        ato_j = vjp(lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=causal))
        cudnn_j = vjp(lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=causal, implementation="cudnn"))
        torch_runs = {"ato bwd plan (TMA)": new_fn, "ato bwd plan (cp.async)": old_fn, "ato_torch fwd+bwd": ato_fb,
                      "SDPA cuDNN fwd+bwd": sdpa_fb}
        times = {name: [] for name in [*torch_runs, "ato_jax fwd+bwd (wall)", "jax cuDNN fwd+bwd (wall)"]}
        for _ in range(3):
            for name, fn in torch_runs.items():
                times[name].append(do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3)
            times["ato_jax fwd+bwd (wall)"].append(jax_wall(ato_j, jq, jk, jv, jdo))
            times["jax cuDNN fwd+bwd (wall)"].append(jax_wall(cudnn_j, jqn, jkn, jvn, jdon))
        flops = 4 * B * Hq * N * N * 128 * (0.5 if causal else 1.0)
        best = {name: min(ts) for name, ts in times.items()}
        for name, ts in times.items():
            mult = 2.5 if "plan" in name else 3.5
            peer = best["jax cuDNN fwd+bwd (wall)" if "jax" in name else
                        "ato bwd plan (cp.async)" if "plan" in name else "SDPA cuDNN fwd+bwd"]
            what = "cp.async" if "plan" in name else "cuDNN"
            print(f"    {name:26s} " + " ".join(f"{t:8.1f}" for t in ts) + f" us  {best[name] / peer:.3f}x {what}  "
                  f"{flops * mult / best[name] / 1e6:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
