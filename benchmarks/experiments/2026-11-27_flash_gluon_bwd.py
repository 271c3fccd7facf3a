"""Issue 22: the Gluon backward (flash_attention/hopper.py: fa_bwd_dkdv_hopper_kernel,
fa_bwd_dq_hopper_kernel; plans.HOPPER_BACKWARD) against the portable backward kernels, launch by
launch, on an sm_90 GPU: dq, dk, dv of the two plans compared (relative L2), each launch timed
(triton do_bench), and the Gluon kernels' registers, spills and shared memory.

    python3 benchmarks/experiments/2026-11-27_flash_gluon_bwd.py            # GPU
    python3 benchmarks/experiments/2026-11-27_flash_gluon_bwd.py --compile  # resources only (CPU)

Options: --stages S, --regs CONSUMER,PRODUCER (plans.HOPPER_BWD).
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


def _options():
    argv = sys.argv
    if "--stages" in argv:
        plans.HOPPER_BWD["STAGES"] = int(argv[argv.index("--stages") + 1])
    if "--regs" in argv:
        consumer, producer = map(int, argv[argv.index("--regs") + 1].split(","))
        plans.HOPPER_BWD.update(CONSUMER_REGS=consumer, PRODUCER_REGS=producer)
    print("HOPPER_BWD", plans.HOPPER_BWD, flush=True)


def _backward(spec_of, q, k, v, do, causal, target, hopper):
    was, plans.HOPPER_BACKWARD = plans.HOPPER_BACKWARD, hopper
    plans.backward_plan.cache_clear()
    try:
        return plans.backward_plan(*(spec_of(t) for t in (q, k, v, do)), causal=causal, softmax_scale=None,
                                   has_dlse=False, target=target)
    finally:
        plans.HOPPER_BACKWARD = was
        plans.backward_plan.cache_clear()


def compile_only():
    import test_compile_sm90 as base
    from ato_core.testing import gpu_spec, h100

    for causal in (False, True):
        q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
        plan = _backward(lambda s: s, q, k, k, q, causal, h100(), True)
        for launch in plan.launches[1:]:
            compiled = base.compile_sm90(launch, plan, {"q": q, "k": k, "v": k, "do": q})
            print("causal" if causal else "full", launch.name, base.cubin_resources(compiled.asm["cubin"]), "smem",
                  compiled.metadata.shared, flush=True)


def main():
    import torch
    import triton

    import ato_torch
    from ato_torch.launcher import run_plan, spec, target_for

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, Hq, Hkv, Nq, Nk, causal in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(o)
        target = target_for(q)
        env = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse}
        got = {}
        times = {}
        for hopper in (False, True):
            plan = _backward(spec, q, k, v, do, causal, target, hopper)
            got[hopper] = run_plan(plan, env, target)
            steps = []
            scratch = dict(env)
            for launch in plan.launches:  # each launch alone, on the outputs of those before it
                step = type(plan)((launch,), tuple(b.name for b in launch.outputs))
                outs = run_plan(step, scratch, target)
                scratch.update(zip(step.results, outs))
                steps.append((launch.name, step, dict(scratch)))
            times[hopper] = [(name, triton.testing.do_bench(lambda: run_plan(step, inputs, target), warmup=25,
                                                            rep=200) * 1e3) for name, step, inputs in steps]
        errs = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(got[True], got[False])]
        flops = 4 * B * Hq * Nq * Nk * 128 / (2 if causal else 1)  # a [Nq, Nk, 128] matmul pair
        print(f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} {'causal' if causal else 'full'}: gluon vs portable rel L2 "
              f"dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e}", flush=True)
        for hopper in (False, True):
            total = sum(t for _, t in times[hopper])
            print(f"  {'gluon   ' if hopper else 'portable'} " + "  ".join(f"{n} {t:8.1f} us" for n, t in times[hopper])
                  + f"  | backward {total:8.1f} us ({2.5 * flops / total / 1e6:4.0f} TF/s)", flush=True)


if __name__ == "__main__":
    _options()
    compile_only() if "--compile" in sys.argv else main()
