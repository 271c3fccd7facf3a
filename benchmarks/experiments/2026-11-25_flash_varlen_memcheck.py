"""flash_attention_varlen at small odd shapes (an empty and a one-token sequence, rows before
and after every sequence, GQA, window, softcap, ALiBi; fp32 and bf16), forward and backward
against the float64 reference, then cu_seqlens that break the rules (a sequence longer than
max_seqlen, offsets past T, decreasing, negative: on a GPU no host check runs, the kernels
clamp): run under compute-sanitizer (memcheck) on the GPU machine to find out-of-range
accesses (varlen computes its own bounds).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-25_flash_varlen_memcheck.py [--dropout]

--dropout (session 52): every case, the broken ones too, with dropout 0.1 (the Gluon kernels' at D 128).
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (cu_q, cu_k, Tq, Tk, Hq, Hkv, D, max_q, max_k, dtype, kwargs)
    ((0, 77, 77, 78, 290), (0, 130, 131, 131, 300), 293, 305, 4, 2, 48, 212, 169, torch.bfloat16,
     dict(causal=True, window_size=(33, None))),
    ((3, 130, 207), (5, 82, 300), 210, 301, 2, 1, 80, 127, 218, torch.float32,
     dict(window_size=(5, 9), softcap=3.0, alibi=True)),
    ((0, 1, 200), (0, 300, 301), 200, 301, 4, 4, 128, 199, 300, torch.bfloat16, dict(causal=True)),
    # (session 39) the Gluon kernels' packed form (D 128, fp16 / bf16): rows before and after the sequences
    ((5, 300, 301, 650), (0, 1, 400, 900), 700, 905, 4, 2, 128, 400, 500, torch.float16,
     dict(causal=True, window_size=(100, None), alibi=True)),
    ((0, 513, 1537), (0, 600, 700), 1600, 700, 2, 2, 128, 800, 650, torch.bfloat16, dict()),
]
BROKEN = [  # cu_q, cu_k (Tq = Tk = 100), max_q, max_k
    ((0, 60, 100), (0, 60, 100), 30, 30),      # sequences longer than max_seqlen
    ((0, 50, 180), (0, 150, 100), 64, 150),    # past T, decreasing
    ((-20, 40, 100), (0, 40, 1000), 128, 128),  # negative start, far past T
]

for cu_q, cu_k, Tq, Tk, Hq, Hkv, D, mq, mk, dtype, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(Tq)
    q = torch.randn(Tq, Hq, D, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(Tk, Hkv, D, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    cq, ck = (torch.tensor(c, device="cuda", dtype=torch.int32) for c in (cu_q, cu_k))
    opts = {n: kw[n] for n in ("causal", "window_size", "softcap") if n in kw}
    if "--dropout" in sys.argv:
        opts.update(dropout_p=0.1, seed=Tq)
    if kw.get("alibi"):
        opts["alibi_slopes"] = torch.rand(len(cu_q) - 1, Hq, device="cuda", generator=g) * 0.3
    result = against_reference(ato_torch.flash_attention_varlen, reference.flash_attention_varlen, q, k, v, cq, ck,
                               mq, mk, **opts)
    print(f"cu_q {cu_q} cu_k {cu_k} H{Hq}/{Hkv} D{D} {dtype} {sorted(kw)}: " + result, flush=True)

for (cu_q, cu_k, mq, mk), D in [(c, d) for c in BROKEN for d in (64, 128)]:  # D 128: the Gluon kernels
    q, k, v = (torch.randn(100, 2, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    cq, ck = (torch.tensor(c, device="cuda", dtype=torch.int32) for c in (cu_q, cu_k))
    drop = {"dropout_p": 0.1, "seed": 5} if "--dropout" in sys.argv else {}
    o = ato_torch.flash_attention_varlen(q, k, v, cq, ck, mq, mk, causal=True, **drop)
    grads = torch.autograd.grad(o.float().sum(), (q, k, v))
    torch.cuda.synchronize()
    finite = all(bool(torch.isfinite(t).all()) for t in (o, *grads))
    print(f"broken cu_q {cu_q} cu_k {cu_k} max {mq}/{mk} D{D}: ran, all finite: {finite}", flush=True)
