"""flash_attention with segment ids after the ranges narrowed by them (kernels._segment_ranges:
the unmasked loop then runs over tiles the scan chose), forward and backward against the float64
reference at odd shapes: runs of whole tiles ending mid-tile, one segment with kv_lengths ending
mid-tile, Nq != Nk, GQA, bnhd, ids out of order; bf16 and fp32. Run under compute-sanitizer on the
GPU machine:

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-26_flash_segments_memcheck.py
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, D, dtype, segments, sorted, kwargs)
    (2, 4, 2, 700, 650, 128, torch.bfloat16, 3, True, dict(causal=True)),
    (2, 2, 2, 333, 333, 64, torch.float32, 1, True, dict(causal=True, lengths=True)),
    (1, 4, 1, 520, 900, 80, torch.bfloat16, 2, True, dict(layout="bnhd")),
    (2, 2, 1, 300, 280, 128, torch.bfloat16, 3, False, dict(causal=True)),
]

for B, Hq, Hkv, Nq, Nk, D, dtype, nseg, ordered, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    shape_q, shape_k = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if kw.get("layout") != "bnhd" else \
        ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    q = torch.randn(shape_q, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(shape_k, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    opts = {n: kw[n] for n in ("causal", "layout") if n in kw}
    if kw.get("lengths"):
        opts["kv_lengths"] = torch.tensor([Nk - 77, Nk][:B], device="cuda", dtype=torch.int32)
    ids = [torch.randint(0, nseg, (B, n), device="cuda", generator=g, dtype=torch.int32) for n in (Nq, Nk)]
    opts["segment_ids"] = tuple(torch.sort(i).values if ordered else i for i in ids)
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} segments {nseg} sorted {ordered} {sorted(kw)}: " + result, flush=True)
