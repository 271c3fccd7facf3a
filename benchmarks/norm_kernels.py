"""Device time of the norm kernels beside their peers' (not a test): CUPTI's time of every
kernel one call launches (torch.profiler), averaged over back-to-back calls, for ato_torch's
layer_norm and rms_norm forwards, layer_norm forward+backward, and the fastest peers of the
bench table (Liger's layer_norm, torch.compile's rms_norm). Host time is not in these numbers:
the kernels alone, to compare two versions of a kernel run by the same command (e.g. with
PYTHONPATH pointing at another checkout) where ``ato bench`` rows would be host-bound.

On the GPU machine, after ``source benchmarks/gpu_env.sh``: python benchmarks/norm_kernels.py
"""

import torch
import torch.nn.functional as F

import ato_torch
from ato_cli import bench

CALLS = 50


def main():
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    M, N = 16384, 4096
    x, dy = (torch.randn(M, N, device=dev, dtype=bf, generator=g) for _ in range(2))
    w, b = (torch.randn(N, device=dev, dtype=bf, generator=g) for _ in range(2))
    xl, wl, bl = (t.detach().requires_grad_() for t in (x, w, b))
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
    main()
