"""ato_torch under torch.compile on the GPU (not a test): layer_norm forward+backward (the
forward eager, compiled by inductor, or compiled with CUDA graphs (mode="reduce-overhead");
the backward by torch.autograd.grad, AOTAutograd's for the compiled ones), beside torch's own
F.layer_norm the same three ways.
Tiny input (8 x 256 bf16: host time per call, 2000 calls synchronised once) and the
transformer_ops shape (16384 x 4096 bf16: do_bench median). On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``: python benchmarks/experiments/2026-11-24_torch_compile_host.py
"""
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import ato_torch

sys.path.insert(0, "benchmarks/tools")
from host_overhead import per_call_us  # noqa: E402


def fwd_bwd(op):
    def f(x, w, b, dy):
        return torch.autograd.grad(op(x, w, b), (x, w, b), dy)
    return f


ops = {"ato_torch": lambda x, w, b: ato_torch.layer_norm(x, w, b),
       "torch F.layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)}
print(f"GPU {torch.cuda.get_device_name()}; torch {torch.__version__}", flush=True)
for M, N in ((8, 256), (16384, 4096)):
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w, b = (torch.randn(N, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    dy = torch.randn_like(x)
    for name, op in ops.items():
        want = fwd_bwd(op)(x, w, b, dy)
        for mode in ("eager", "default", "reduce-overhead"):
            torch._dynamo.reset()
            g = fwd_bwd(op if mode == "eager" else torch.compile(op, mode=mode, fullgraph=True))
            got = g(x, w, b, dy)
            same = all(torch.equal(a, c) for a, c in zip(want, got))
            if M == 8:
                us = per_call_us(lambda: g(x, w, b, dy))
                print(f"{M}x{N} {name:20s} {mode:16s} host {us:7.1f} us a call   grads == eager: {same}", flush=True)
            else:
                ms = do_bench(lambda: g(x, w, b, dy), return_mode="median")
                print(f"{M}x{N} {name:20s} {mode:16s} {ms * 1e3:8.1f} us          grads == eager: {same}", flush=True)
