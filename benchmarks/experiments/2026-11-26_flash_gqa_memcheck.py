"""flash_attention's GQA backward with the (head, block) loop of dk/dv (kernels._dkdv_head_blocks,
which computes each tile's addresses from the loop index), forward and backward against the
float64 reference at odd shapes: causal and not, a window, q/kv lengths ending mid-tile, segment
ids, dropout, packed sequences; bf16 and fp32. Run under compute-sanitizer on the GPU machine:

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-26_flash_gqa_memcheck.py
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, D, dtype, kwargs)
    (2, 8, 2, 300, 333, 128, torch.bfloat16, dict(causal=True)),
    (1, 6, 2, 129, 200, 64, torch.float32, dict()),
    (2, 4, 1, 257, 190, 80, torch.bfloat16, dict(window_size=(40, 7), lengths=True)),
    (2, 4, 2, 200, 200, 128, torch.bfloat16, dict(causal=True, segments=True)),
]
for B, Hq, Hkv, Nq, Nk, D, dtype, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Nq)
    q = torch.randn(B, Hq, Nq, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    opts = {n: kw[n] for n in ("causal", "window_size") if n in kw}
    if kw.get("lengths"):
        opts["q_lengths"] = torch.tensor([Nq - 1, 5], device="cuda", dtype=torch.int32)
        opts["kv_lengths"] = torch.tensor([Nk, Nk // 3], device="cuda", dtype=torch.int32)
    if kw.get("segments"):
        opts["segment_ids"] = tuple(torch.sort(torch.randint(0, 3, (B, n), device="cuda", generator=g,
                                                             dtype=torch.int32)).values for n in (Nq, Nk))
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} {sorted(kw)}: " + result, flush=True)
# dropout (no reference: both frameworks' masks are tested elsewhere): a clean run is what is asked here
q = torch.randn(2, 8, 300, 64, device="cuda", dtype=torch.bfloat16).requires_grad_()
k, v = (torch.randn(2, 2, 310, 64, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(2))
o = ato_torch.flash_attention(q, k, v, causal=True, dropout_p=0.2, seed=3)
grads = torch.autograd.grad(o.float().sum(), (q, k, v))
print("dropout 2x8x2x300x310x64 bf16: grads finite", all(bool(t.isfinite().all()) for t in grads), flush=True)
# packed sequences
cu = torch.tensor([0, 100, 101, 350], device="cuda", dtype=torch.int32)
q = torch.randn(350, 8, 128, device="cuda", dtype=torch.bfloat16).requires_grad_()
k, v = (torch.randn(350, 2, 128, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(2))
o = ato_torch.flash_attention_varlen(q, k, v, cu, cu, 249, 249, causal=True)
grads = torch.autograd.grad(o.float().sum(), (q, k, v))
print("varlen 3 sequences Hq8 Hkv2 D128 bf16: grads finite", all(bool(t.isfinite().all()) for t in grads), flush=True)
