"""D64 on the Gluon kernels (run with plans.HOPPER_HEAD_DIMS = (64, 128), not the default: results
flash_gluon.txt 28): issue 22's D64 shapes, ato_torch
forward and forward+backward against SDPA cuDNN in the same process (do_bench medians, best of
2 rounds). Run once as is and once with ATO_PORTABLE=1 (the portable kernels) to compare.
Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_d64_hopper.py
"""
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import ato_torch

tag = "portable" if os.environ.get("ATO_PORTABLE") else "Gluon"
for causal in (False, True):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(16, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    do = torch.randn_like(q)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

    def sdpa():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def sdpa_fb():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        return torch.autograd.grad(o, (qg, kg, vg), do)

    def ato_fb():
        return torch.autograd.grad(ato_torch.flash_attention(qg, kg, vg, causal=causal), (qg, kg, vg), do)

    runs = {"ato fwd": lambda: ato_torch.flash_attention(q, k, v, causal=causal), "cuDNN fwd": sdpa,
            "ato fwd+bwd": ato_fb, "cuDNN fwd+bwd": sdpa_fb}
    t = {n: min(do_bench(f, warmup=10, rep=60, return_mode="median") for _ in range(2)) * 1e3 for n, f in runs.items()}
    print(f"B16 H16 N1024 D64 bf16 {'causal' if causal else 'full'} ({tag}): fwd {t['ato fwd']:.1f} us "
          f"{t['ato fwd'] / t['cuDNN fwd']:.3f}x cuDNN ({t['cuDNN fwd']:.1f}); fwd+bwd {t['ato fwd+bwd']:.1f} us "
          f"{t['ato fwd+bwd'] / t['cuDNN fwd+bwd']:.3f}x cuDNN ({t['cuDNN fwd+bwd']:.1f})", flush=True)
