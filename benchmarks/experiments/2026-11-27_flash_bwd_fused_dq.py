"""Issue 22: the Gluon backward with dQ in the dK / dV kernel (plans.HOPPER_FUSED_DQ:
hopper.fa_bwd_dkdv_hopper_kernel's FUSED form, then fa_bwd_dq_cast_hopper_kernel) against the
dK / dV and dQ kernels, launch by launch on an sm_90 GPU: dq, dk, dv of the two plans compared
(relative L2), the fused plan's bits over 3 runs (its dQ sum has a fixed order), each launch
timed (triton do_bench; the fused dK / dV launch's time includes zeroing its fp32 dQ sum and
counters, which run_plan allocates zeroed), and the kernels' registers, spills and shared memory.

    python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py --compile  # resources (CPU)
    python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py            # H100

Run it under a timeout on the GPU: a wrong turn count waits forever (the counts against the
tiles each block visits: ..._fused_dq_turns.py).

The fused form is gone from hopper.py since session 38 (measured slower; results README); it runs at commit f7500f4.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from ato_core.ops.flash_attention import plans  # noqa: E402

SHAPES = [  # B, Hq, Hkv, Nq, Nk, causal
    (2, 4, 2, 1000, 1000, True), (1, 4, 4, 300, 700, False), (1, 2, 2, 777, 300, True),
    (4, 32, 32, 4096, 4096, False), (4, 32, 32, 4096, 4096, True), (1, 32, 32, 16384, 16384, True),
    (2, 32, 8, 8192, 8192, True)]


def _backward(spec_of, q, k, v, do, causal, target, fused, **kw):
    was, plans.HOPPER_FUSED_DQ = plans.HOPPER_FUSED_DQ, fused
    plans.backward_plan.cache_clear()
    try:
        return plans.backward_plan(*(spec_of(t) for t in (q, k, v, do)), causal=causal, softmax_scale=None,
                                   has_dlse=False, target=target, **kw)
    finally:
        plans.HOPPER_FUSED_DQ = was
        plans.backward_plan.cache_clear()


def compile_only():
    import test_compile_sm90 as base
    from ato_core.testing import gpu_spec, h100

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    specs = {"q": q, "k": k, "v": k, "do": q, "q_lengths": gpu_spec((2,), "int32"),
             "kv_lengths": gpu_spec((2,), "int64"), "alibi_slopes": gpu_spec((2, 8), "float32"),
             "lse_base2": gpu_spec((2, 8, 1000), "float32")}
    arrays = tuple(specs.get(n) if n in ("alibi_slopes", "q_lengths", "kv_lengths") else None
                   for n in plans.OPTION_ARRAYS)
    for label, kw in (("full", {"causal": False}), ("causal", {"causal": True}),
                      ("window (100, 20), lengths, ALiBi", {"causal": False, "arrays": arrays,
                                                            "options": plans.Options(window=(100, 20))})):
        plan = _backward(lambda s: s, q, k, k, q, kw.pop("causal"), h100(), True, **kw)
        for launch in plan.launches[1:]:
            compiled = base.compile_sm90(launch, plan, specs)
            print(label, launch.name, base.cubin_resources(compiled.asm["cubin"]), "smem", compiled.metadata.shared,
                  flush=True)


def main():
    import torch
    import triton

    import ato_torch
    from ato_torch.launcher import run_plan, spec, target_for

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, Hq, Hkv, Nq, Nk, causal in SHAPES:
        print(f"(B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} causal {causal}: starting)", flush=True)  # a hang shows here
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(o)
        target = target_for(q)
        env = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse}
        got, times = {}, {}
        for fused in (False, True):
            plan = _backward(spec, q, k, v, do, causal, target, fused)
            got[fused] = [run_plan(plan, env, target) for _ in range(3 if fused else 1)]
            steps, scratch = [], dict(env)
            for launch in plan.launches:  # each launch alone, on the outputs of those before it
                step = type(plan)((launch,), tuple(b.name for b in launch.outputs if not b.placeholder))
                outs = run_plan(step, scratch, target)
                scratch.update(zip(step.results, outs))
                steps.append((launch.name, step, dict(scratch)))
            times[fused] = [(name, triton.testing.do_bench(lambda: run_plan(step, inputs, target), warmup=25,
                                                           rep=200) * 1e3) for name, step, inputs in steps]
        same = all(torch.equal(a, b) for run in got[True][1:] for a, b in zip(run, got[True][0]))
        errs = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(got[True][0], got[False][0])]
        flops = 4 * B * Hq * Nq * Nk * 128 / (2 if causal else 1)
        print(f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} {'causal' if causal else 'full'}: fused vs dK/dV + dQ rel L2 "
              f"dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e}; fused bits equal over 3 runs: {same}", flush=True)
        for fused in (False, True):
            total = sum(t for _, t in times[fused])
            print(f"  {'fused   ' if fused else 'two     '} " + "  ".join(f"{n} {t:8.1f} us" for n, t in times[fused])
                  + f"  | backward {total:8.1f} us ({2.5 * flops / total / 1e6:4.0f} TF/s)", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile" in sys.argv else main()
