"""flash_attention's backward kernels with GQA against MHA at the same query heads (B2 Hq32 N8192
D128 bf16 causal; Hkv 8 against 32): per-kernel device time of one forward+backward. The dkdv
kernel sums the G query heads of its kv head in a loop; on sm_90 that loop at G 4 holds a 1672-byte
stack frame a thread (168 at G 1; 1824 with G a constexpr). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_gqa_dkdv.py
"""
import torch

import ato_torch
from ato_cli.bench import device_kernels

B, Hq, N, D = 2, 32, 8192, 128
print(f"GPU {torch.cuda.get_device_name()}; B{B} Hq{Hq} N{N} D{D} bf16 causal, device us per forward+backward")
for Hkv in (32, 8):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            for _ in range(2))
    do = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g)

    def fb():
        return torch.autograd.grad(ato_torch.flash_attention(q, k, v, causal=True), (q, k, v), do)
    per = device_kernels(fb, lambda out: torch.cuda.synchronize())
    print(f"  Hkv {Hkv:2d}: " + ", ".join(f"{n} {us:.1f}" for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])
                                    if "fa_" in n), flush=True)
