"""Issue 22's D128 shapes after the Gluon forward's producer moved to TMA: ato's forward (TMA) against
the same kernel with the cp.async producer it replaced (hopper.py at a98a2ba, taken from git and
launched through the current plan without its scratch output) and cuDNN (SDPA's backend; JAX's
dot_product_attention on [B, N, H, D]), ato_jax beside; forward+backward of ato_torch against SDPA
cuDNN's. do_bench medians (torch), wall over 20 calls (JAX), best of 3 alternating rounds.
Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_tma_table.py
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

old = module_at("a98a2ba", "ato_core/ops/flash_attention/hopper.py")  # the cp.async producers


def cp_async_forward(q, k, v, causal):
    target = cuda_target(q.device.index or 0)
    plan = plans.forward_plan(spec(q, "q"), spec(k, "k"), spec(v, "v"), causal=causal, softmax_scale=None,
                              target=target)
    (launch,) = plan.launches
    assert launch.name == "fa_fwd_hopper_kernel" and launch.scratch
    launch = dataclasses.replace(launch, kernel=old.fa_fwd_hopper_kernel, outputs=launch.outputs[:3],
                                 constexprs={**launch.constexprs, "CHUNK": 32})
    plan = Plan((launch,), plan.results)
    return lambda: run_plan(plan, {"q": q, "k": k, "v": v}, target)


def jax_wall(f, *args, n=20):
    f(*args).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(n):
        out = f(*args)
    out.block_until_ready()
    return (time.perf_counter() - t0) / n * 1e6


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
        o_new = ato_torch.flash_attention(q, k, v, causal=causal)
        old_fn = cp_async_forward(q, k, v, causal)
        o_old = old_fn()[0]
        ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(Hq // Hkv, 1),
                                             v.float().repeat_interleave(Hq // Hkv, 1), is_causal=causal) \
            if B * Hq * N <= 4 * 32 * 4096 else None
        err = "" if ref is None else (f"; max |o - fp32| TMA {float((o_new.float() - ref).abs().max()):.3g}, "
                                      f"cp.async {float((o_old.float() - ref).abs().max()):.3g}")
        print(f"B{B} Hq{Hq} Hkv{Hkv} N{N} D128 bf16 {'causal' if causal else 'full'}: TMA o == cp.async o "
              f"{torch.equal(o_new, o_old)}, max |diff| {float((o_new.float() - o_old.float()).abs().max()):.3g}{err}",
              flush=True)
        del ref
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        do = torch.randn_like(q)

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)

        def sdpa_fb():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, enable_gqa=Hq != Hkv)
            return torch.autograd.grad(o, (qg, kg, vg), do)

        def ato_fb():
            return torch.autograd.grad(ato_torch.flash_attention(qg, kg, vg, causal=causal), (qg, kg, vg), do)

        jq, jk, jv = (jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) for t in (q, k, v))
        jqn, jkn, jvn = (x.transpose(0, 2, 1, 3) for x in (jq, jk, jv))
        ato_j = jax.jit(lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=causal))
        cudnn_j = jax.jit(lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=causal,
                                                                       implementation="cudnn"))
        torch_runs = {"ato_torch fwd (TMA)": lambda: ato_torch.flash_attention(q, k, v, causal=causal),
                      "ato fwd (cp.async)": old_fn, "SDPA cuDNN fwd": sdpa,
                      "ato_torch fwd+bwd": ato_fb, "SDPA cuDNN fwd+bwd": sdpa_fb}
        times = {name: [] for name in [*torch_runs, "ato_jax fwd (wall)", "jax cuDNN fwd (wall)"]}
        for _ in range(3):
            for name, fn in torch_runs.items():
                times[name].append(do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3)
            times["ato_jax fwd (wall)"].append(jax_wall(ato_j, jq, jk, jv))
            times["jax cuDNN fwd (wall)"].append(jax_wall(cudnn_j, jqn, jkn, jvn))
        flops = 4 * B * Hq * N * N * 128 * (0.5 if causal else 1.0)
        best = {name: min(ts) for name, ts in times.items()}
        for name, ts in times.items():
            mult = 3.5 if "bwd" in name else 1.0
            peer = best["SDPA cuDNN fwd+bwd" if "bwd" in name else "SDPA cuDNN fwd"]
            if "jax" in name:
                peer = best["jax cuDNN fwd (wall)"]
            print(f"    {name:22s} " + " ".join(f"{t:8.1f}" for t in ts) + f" us  {best[name] / peer:.3f}x cuDNN  "
                  f"{flops * mult / best[name] / 1e6:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
