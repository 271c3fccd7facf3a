"""A block of four ops (layer_norm, causal attention, swiglu, cross-entropy) forward+backward,
written with ato_torch and with torch's own ops, eager, compiled (inductor) and compiled with
CUDA graphs (reduce-overhead): time per step (the block's loss, then torch.autograd.grad) at a
host-bound size and at a GPU-bound one. Not a test. On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``: python benchmarks/experiments/2026-11-24_torch_compile_block.py
"""
import torch
import torch.nn.functional as F
from triton.testing import do_bench

import ato_torch


def block(ops, B, H, N, D):
    C = H * D

    def loss(x, w, b, targets):
        h = ops["ln"](x, w, b).to(torch.bfloat16)
        q, k, v = (t.view(B, N, H, D).transpose(1, 2) for t in h.chunk(3, dim=-1))
        a = ops["attn"](q, k, v).transpose(1, 2).reshape(B * N, C)
        u = ops["swiglu"](a[:, :C // 2], a[:, C // 2:])
        return ops["ce"](u.float(), targets)
    return loss


ATO = {"ln": lambda x, w, b: ato_torch.layer_norm(x, w, b), "attn": lambda q, k, v: ato_torch.flash_attention(
    q, k, v, causal=True), "swiglu": ato_torch.swiglu, "ce": ato_torch.cross_entropy}
TORCH = {"ln": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
         "attn": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         "swiglu": lambda g, u: F.silu(g) * u, "ce": F.cross_entropy}
print(f"GPU {torch.cuda.get_device_name()}; torch {torch.__version__}", flush=True)
for B, H, N, D in ((1, 2, 64, 64), (4, 16, 2048, 64)):
    C = H * D
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B * N, 3 * C, device="cuda", generator=g, requires_grad=True)
    w, b = (torch.randn(3 * C, device="cuda", generator=g, requires_grad=True) for _ in range(2))
    t = torch.randint(0, C // 2, (B * N,), device="cuda", generator=g)
    for name, ops in (("ato_torch", ATO), ("torch", TORCH)):
        f = block(ops, B, H, N, D)
        for mode in ("eager", "default", "reduce-overhead"):
            torch._dynamo.reset()
            fn = f if mode == "eager" else torch.compile(f, mode=mode, fullgraph=True)

            def step():
                return torch.autograd.grad(fn(x, w, b, t), (x, w, b))
            ms = do_bench(step, return_mode="median")
            print(f"B{B} H{H} N{N} D{D}  {name:10s} {mode:16s} {ms * 1e3:9.1f} us a step", flush=True)
