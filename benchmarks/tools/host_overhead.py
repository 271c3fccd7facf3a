"""Host time per call of the torch ops (not a test): each op on a tiny input, so the GPU
finishes long before the next call is issued and the wall time of 2000 back-to-back calls
(synchronised once at the end) is what the host spends per call. ato_torch is timed with
its cached-binary launches and with every launch through Triton's JITFunction
(ATO_TRITON_JIT_LAUNCH), beside torch eager and Liger-Kernel.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``: python benchmarks/tools/host_overhead.py
[--profile N]: with --profile, also the N functions with the most own time (cProfile) in
2000 calls of ato_torch's layer_norm forward+backward.
"""

import cProfile
import pstats
import sys
import time

import torch
import torch.nn.functional as F

import ato_torch
from ato_cli.bench import _torch_fwd_bwd
from ato_torch import launcher


def per_call_us(fn, calls=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


class _Floor(torch.autograd.Function):
    """The least a Python autograd.Function can do for a layer_norm: allocate y, save its
    inputs, allocate dx, dw, db. Timed as the floor under any such op's fwd+bwd (Liger's,
    ato's), which torch eager's C++ nodes do not pay."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w, b)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        x, w, b = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)


def main():
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(8, 256, device=dev, dtype=bf)
    w, b = torch.randn(256, device=dev, dtype=bf), torch.randn(256, device=dev, dtype=bf)
    q, k = torch.randn(1, 4, 16, 64, device=dev, dtype=bf), torch.randn(1, 2, 16, 64, device=dev, dtype=bf)
    cos, sin = torch.randn(16, 32, device=dev, dtype=bf), torch.randn(16, 32, device=dev, dtype=bf)
    tgt = torch.randint(0, 256, (8,), device=dev)
    dy = torch.randn_like(x)
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction as LLN
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction as LRMS
        from liger_kernel.ops.softmax import LigerSoftmaxFunction as LSM
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction as LSW
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        lce = LigerCrossEntropyLoss()
        liger = {
            "layer_norm fwd": lambda: LLN.apply(x, w, b, 1e-5),
            "layer_norm fwd+bwd": _torch_fwd_bwd(lambda a, ww, bb: LLN.apply(a, ww, bb, 1e-5), (x, w, b), dy),
            "rms_norm fwd": lambda: LRMS.apply(x, w, 1e-6),
            "softmax fwd": lambda: LSM.apply(x),
            "swiglu fwd": lambda: LSW.apply(x, x),
            "cross_entropy loss+grad": _torch_fwd_bwd(lambda a: lce(a, tgt), (x,)),
        }
    except Exception as exc:  # noqa: BLE001
        print(f"Liger not timed: {exc}")
        liger = {}
    ops = {
        "layer_norm fwd": (lambda: ato_torch.layer_norm(x, w, b), lambda: F.layer_norm(x, (256,), w, b)),
        "layer_norm fwd+bwd": (_torch_fwd_bwd(lambda a, ww, bb: ato_torch.layer_norm(a, ww, bb), (x, w, b), dy),
                               _torch_fwd_bwd(lambda a, ww, bb: F.layer_norm(a, (256,), ww, bb), (x, w, b), dy)),
        "rms_norm fwd": (lambda: ato_torch.rms_norm(x, w), lambda: F.rms_norm(x, (256,), w, 1e-6)),
        "softmax fwd": (lambda: ato_torch.softmax(x), lambda: torch.softmax(x, -1)),
        "swiglu fwd": (lambda: ato_torch.swiglu(x, x), lambda: F.silu(x) * x),
        "rope fwd": (lambda: ato_torch.rope(q, k, cos, sin), None),
        "cross_entropy loss+grad": (_torch_fwd_bwd(lambda a: ato_torch.cross_entropy(a, tgt), (x,)),
                                    _torch_fwd_bwd(lambda a: F.cross_entropy(a.float(), tgt), (x,))),
        "flash_attention fwd": (lambda: ato_torch.flash_attention(q, k, k), None),
        "autograd.Function floor fwd+bwd": (_torch_fwd_bwd(_Floor.apply, (x, w, b), dy), None),
    }
    print(f"GPU {torch.cuda.get_device_name()}; host us per call (tiny inputs, 2000 calls)")
    print(f"{'op':32s} {'ato cached':>11s} {'ato via JIT':>12s} {'torch eager':>12s} {'Liger':>8s}")
    for name, (ato, eager) in ops.items():
        direct = per_call_us(ato)
        launcher.JIT_LAUNCH_ONLY = True
        try:
            jit = per_call_us(ato)
        finally:
            launcher.JIT_LAUNCH_ONLY = False
        e = per_call_us(eager) if eager else float("nan")
        lg = per_call_us(liger[name]) if name in liger else float("nan")
        print(f"{name:32s} {direct:11.1f} {jit:12.1f} {e:12.1f} {lg:8.1f}", flush=True)
    if "--profile" in sys.argv:
        top = int(sys.argv[sys.argv.index("--profile") + 1])
        fn = ops["layer_norm fwd+bwd"][0]
        prof = cProfile.Profile()
        prof.runcall(lambda: [fn() for _ in range(2000)])
        torch.cuda.synchronize()
        print("\ncProfile, 2000 calls of ato_torch layer_norm fwd+bwd (own time, most first):")
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()
