"""flash_attention against SDPA's cuDNN backend at issue 22's GQA shape (B2 Hq32 Hkv8 N8192 D128
bf16 causal): forward and forward+backward do_bench medians (us) and TFLOP/s (causal: half the
4 * B * Hq * N^2 * D flops of the forward, 3.5x that for forward+backward, FlashAttention's count). cuDNN gets k,
v with enable_gqa, or repeated to Hq heads where its backend refuses that. Not a test. On the GPU
machine: python3 benchmarks/experiments/2026-11-26_flash_gqa_vs_cudnn.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import ato_torch

B, Hq, Hkv, N, D = 2, 32, 8, 8192, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
do = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
flops = 4 * B * Hq * N * N * D / 2


def cudnn(a, b, c):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        try:
            return F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True)
        except RuntimeError:
            return F.scaled_dot_product_attention(a, b.repeat_interleave(Hq // Hkv, 1),
                                                  c.repeat_interleave(Hq // Hkv, 1), is_causal=True)


def ato(a, b, c):
    return ato_torch.flash_attention(a, b, c, causal=True)


print(f"GPU {torch.cuda.get_device_name()}; B{B} Hq{Hq} Hkv{Hkv} N{N} D{D} bf16 causal")
res = {}
for name, fn in (("ato_torch", ato), ("SDPA cuDNN", cudnn)):
    fwd = do_bench(lambda: fn(q, k, v), warmup=25, rep=200, return_mode="median") * 1e3
    fb = do_bench(lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), do), warmup=25, rep=200,
                  return_mode="median") * 1e3
    res[name] = (fwd, fb)
    print(f"  {name:10s} fwd {fwd:8.1f} us {flops / fwd / 1e6:5.0f} TFLOP/s | fwd+bwd {fb:8.1f} us "
          f"{3.5 * flops / fb / 1e6:5.0f} TFLOP/s", flush=True)
a, c = res["ato_torch"], res["SDPA cuDNN"]
print(f"  ato / cuDNN time: fwd {a[0] / c[0]:.2f}x, fwd+bwd {a[1] / c[1]:.2f}x")
