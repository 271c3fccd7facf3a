"""flash_attention's bias and mask at small odd shapes (broadcast and full, with a window,
lengths, GQA, Nq != Nk, rows the mask empties; fp32 and bf16), forward and backward against
the float64 reference: run under compute-sanitizer (memcheck) on the GPU machine (the bias and
mask tiles are read with their own bounds).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-25_flash_bias_mask_memcheck.py
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, D, dtype, bias shape or None, mask shape or None, kwargs)
    (2, 4, 2, 77, 130, 48, torch.bfloat16, (4, 1, 130), (2, 4, 77, 130), dict(causal=True, window_size=(33, None))),
    (1, 2, 1, 130, 77, 80, torch.float32, (1, 2, 130, 77), (130, 77), dict(softcap=3.0)),
    (3, 4, 4, 200, 200, 128, torch.bfloat16, None, (3, 1, 200, 200), dict(causal=True, lengths=True)),
]

for B, Hq, Hkv, Nq, Nk, D, dtype, bshape, mshape, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    q = torch.randn(B, Hq, Nq, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    opts = {n: kw[n] for n in ("causal", "window_size", "softcap") if n in kw}
    if bshape:
        opts["bias"] = torch.randn(bshape, device="cuda", generator=g).to(dtype)
    if mshape:
        opts["mask"] = torch.rand(mshape, device="cuda", generator=g) < 0.7
    if kw.get("lengths"):
        opts["q_lengths"] = torch.tensor([Nq - 1, 0, Nq // 2][:B], device="cuda", dtype=torch.int32)
        opts["kv_lengths"] = torch.tensor([Nk, Nk // 3, 0][:B], device="cuda", dtype=torch.int32)
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} bias {bshape} mask {mshape} {sorted(kw)}: " + result, flush=True)
