"""flash_attention and flash_attention_varlen with dropout at small odd shapes (GQA, Nq != Nk,
a window, lengths, bnhd; int, tensor and key-data seeds; fp32 and bf16), forward and backward
against the float64 reference with the same mask: run under compute-sanitizer (memcheck) on
the GPU machine.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-26_flash_dropout_memcheck.py
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, D, dtype, seed, kwargs)
    (2, 4, 2, 77, 130, 48, torch.bfloat16, 7, dict(causal=True, window_size=(33, None), dropout_p=0.2)),
    (1, 2, 1, 130, 77, 80, torch.float32, "tensor", dict(dropout_p=0.5)),
    (3, 4, 4, 200, 200, 128, torch.bfloat16, "key", dict(causal=True, lengths=True, dropout_p=0.1)),
]

for B, Hq, Hkv, Nq, Nk, D, dtype, seed, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    q = torch.randn(B, Hq, Nq, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    opts = {n: kw[n] for n in ("causal", "window_size", "dropout_p") if n in kw}
    opts["seed"] = {"tensor": torch.tensor(11, device="cuda"),
                    "key": torch.tensor([3, 12], device="cuda", dtype=torch.int32)}.get(seed, seed)
    if kw.get("lengths"):
        opts["q_lengths"] = torch.tensor([Nq - 1, 0, Nq // 2][:B], device="cuda", dtype=torch.int32)
        opts["kv_lengths"] = torch.tensor([Nk, Nk // 3, 0][:B], device="cuda", dtype=torch.int32)
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} seed {seed} {sorted(kw)}: " + result, flush=True)

seqs = (100, 1, 0, 257)
cu = torch.tensor([0, 100, 101, 101, 358], device="cuda", dtype=torch.int32)
q, k, v = (torch.randn(358 + 5, 4, 64, device="cuda").to(torch.bfloat16).requires_grad_() for _ in range(3))
result = against_reference(ato_torch.flash_attention_varlen, reference.flash_attention_varlen, q, k, v, cu, cu, 257,
                           257, causal=True, dropout_p=0.3, seed=5)
print(f"varlen {seqs} bf16 causal dropout 0.3: " + result, flush=True)
