"""Device time of the norm kernels beside their peers' (not a test): CUPTI's time of every
kernel one call launches (torch.profiler), averaged over back-to-back calls, for ato_torch's
layer_norm and rms_norm forwards, layer_norm forward+backward, and the fastest peers of the
bench table (Liger's layer_norm, torch.compile's rms_norm). Host time is not in these numbers:
the kernels alone, to compare two versions of a kernel run by the same command (e.g. with
PYTHONPATH pointing at another checkout) where ``ato bench`` rows would be host-bound.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``: python benchmarks/tools/norm_kernels.py
[--bwd-sweep [N ...]]: with --bwd-sweep, instead, the layer_norm backward's device time at each of its
launch settings (ato_core.ops.norms.plans.BwdSettings: programs per SM, warps, pipeline stages) at
16384 x N (default N 4096: every point; other N: a few), fastest last: each a backward plan
built with that settings value, run through ato_torch's launcher.
"""

import sys

import torch
import torch.nn.functional as F

import ato_torch
from ato_cli import bench

CALLS = 50


def _inputs(M: int, N: int):
    """x, dy [M, N], weight, bias [N] (bf16, seeded), and x, weight, bias as leaves requiring grad."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x, dy = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    w, b = (torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    return x, dy, w, b, tuple(t.detach().requires_grad_() for t in (x, w, b))


def bwd_sweep(N: int = 4096, wide: bool = True):
    """The sweep at 16384 x N; ``wide``: every point, else a few around the winners at 4096."""
    from ato_core.ops.norms import plans as norms
    from ato_torch.launcher import run_plan, spec, target_for

    M = 16384
    x, dy, w, b, _ = _inputs(M, N)
    target = target_for(x)
    fwd = norms.forward_plan(spec(x), None, spec(w), spec(b), rms=False, eps=1e-5, p=0.0, seed=0, target=target)
    _, _, mean, rstd = run_plan(fwd, {"x": x, "residual": None, "weight": w, "bias": b}, target)
    env = {"x": x, "weight": w, "dy": dy, "mean": mean, "rstd": rstd}
    print(f"GPU {torch.cuda.get_device_name()}; layer_norm backward {M}x{N} bf16, device us per call "
          f"(CUPTI, {CALLS} calls): norm_bwd_kernel + partial_sum_kernel at (programs per SM, warps, "
          f"pipeline stages); now {norms.BWD_SETTINGS}")
    if wide:
        points = [(p, w, st) for p in (1, 2, 3, 4) for w in (4, 8, 16) for st in (1, 2, 3, 4)]
    else:
        points = [(p, w, st) for p in (2, 4) for w in (4, 8, 16) for st in (1, 3)]
    results = []
    for point in points:
        settings = norms.BWD_SETTINGS._replace(by_width=((norms.MAX_N, point),))
        plan = norms.backward_plan(spec(x), spec(w), spec(b), rms=False, has_residual=False, has_dh=False, p=0.0,
                                   seed=0, target=target, settings=settings)
        try:
            ks = bench.device_kernels(lambda: run_plan(plan, env, target), lambda out: torch.cuda.synchronize(), CALLS)
        except Exception as exc:  # noqa: BLE001  (e.g. out of registers or shared memory)
            print(f"{point}: failed {type(exc).__name__}: {str(exc)[:80]}", flush=True)
            continue
        bwd = sum(t for n, (_, t) in ks.items() if "bwd" in n or "partial" in n)
        results.append((bwd, point))
        print(f"{point}: {bwd:7.1f} us", flush=True)
    best = sorted(results)[:3]
    print("fastest: " + "; ".join(f"{p} {t:.1f} us" for t, p in best))


def main():
    M, N = 16384, 4096
    x, dy, w, b, (xl, wl, bl) = _inputs(M, N)
    cases = {
        "ato layer_norm fwd": lambda: ato_torch.layer_norm(x, w, b),
        "ato rms_norm fwd": lambda: ato_torch.rms_norm(x, w),
        "ato layer_norm fwd+bwd": lambda: torch.autograd.grad(ato_torch.layer_norm(xl, wl, bl), (xl, wl, bl), dy),
    }
    lig = bench.liger("liger_kernel.ops.layer_norm:LigerLayerNormFunction")
    if lig:
        cases["Liger layer_norm fwd"] = lambda: lig.apply(x, w, b, 1e-5)
        cases["Liger layer_norm fwd+bwd"] = lambda: torch.autograd.grad(lig.apply(xl, wl, bl, 1e-5), (xl, wl, bl), dy)
    rms = torch.compile(lambda a: F.rms_norm(a, (N,), w, 1e-6))
    cases["torch.compile rms_norm fwd"] = lambda: rms(x)
    print(f"GPU {torch.cuda.get_device_name()}; device us per call (CUPTI, {CALLS} calls), {M}x{N} bf16")
    for name, fn in cases.items():
        ks = bench.device_kernels(fn, lambda out: torch.cuda.synchronize(), CALLS)
        total = sum(t for _, t in ks.values())
        detail = ", ".join(f"{n[:40]} {t:.1f}" for n, (_, t) in sorted(ks.items(), key=lambda k: -k[1][1]))
        print(f"{name:28s} {total:8.1f}  ({detail})", flush=True)


if __name__ == "__main__":
    if "--bwd-sweep" in sys.argv[1:]:
        widths = [int(a) for a in sys.argv[1:] if a.isdigit()] or [4096]
        for n in widths:
            bwd_sweep(n, wide=(n == 4096))
    else:
        main()
