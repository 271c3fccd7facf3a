"""flash_attention with issue 25's options at small odd shapes (lengths and windows that end
mid-tile, a batch with zero queries or keys, segments, ALiBi, softcap, GQA, bnhd; fp32 and
bf16), forward and backward against the float64 reference: run under compute-sanitizer
(memcheck) on the GPU machine to find out-of-range accesses (the padding paths compute
their own bounds).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-25_flash_options_memcheck.py
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, D, dtype, kwargs); lengths/segments filled below
    (3, 4, 2, 77, 130, 48, torch.bfloat16, dict(causal=True, window_size=(33, None), lengths=True)),
    (2, 2, 1, 130, 77, 80, torch.float32, dict(window_size=(5, 9), softcap=3.0, alibi=True, lengths=True)),
    (2, 4, 4, 200, 200, 128, torch.bfloat16, dict(causal=True, segments=True, lengths=True, layout="bnhd")),
    (1, 2, 2, 1, 300, 16, torch.float16, dict(window_size=(None, 0), alibi=True)),
]

for B, Hq, Hkv, Nq, Nk, D, dtype, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    shape_q, shape_k = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if kw.get("layout") != "bnhd" else \
        ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    q = torch.randn(shape_q, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(shape_k, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    opts = {n: kw[n] for n in ("causal", "window_size", "softcap", "layout") if n in kw}
    if kw.get("alibi"):
        opts["alibi_slopes"] = torch.rand(B, Hq, device="cuda", generator=g) * 0.3
    if kw.get("lengths"):
        opts["q_lengths"] = torch.tensor([Nq - 1, 0, Nq // 2][:B], device="cuda", dtype=torch.int32)
        opts["kv_lengths"] = torch.tensor([Nk, Nk // 3, 0][:B], device="cuda", dtype=torch.int32)
    if kw.get("segments"):
        opts["segment_ids"] = (torch.sort(torch.randint(0, 4, (B, Nq), device="cuda", generator=g)).values,
                               torch.sort(torch.randint(0, 4, (B, Nk), device="cuda", generator=g)).values)
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} {sorted(kw)}: " + result, flush=True)
