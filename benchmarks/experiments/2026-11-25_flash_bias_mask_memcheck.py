"""flash_attention's bias and mask at small odd shapes (broadcast and full, with a window,
lengths, GQA, Nq != Nk, rows the mask empties; fp32 and bf16), forward and backward against
the float64 reference: run under compute-sanitizer (memcheck) on the GPU machine (the bias and
mask tiles are read with their own bounds).

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-25_flash_bias_mask_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.flash_attention import reference

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
    o, lse = ato_torch.flash_attention(q, k, v, return_lse=True, **opts)
    do = torch.randn_like(o)
    grads = torch.autograd.grad((o * do).sum(), (q, k, v))
    qr, kr, vr = (a.detach().double().requires_grad_() for a in (q, k, v))
    ropts = {n: (a.double() if torch.is_tensor(a) and a.is_floating_point() else a) for n, a in opts.items()}
    ro, rlse = reference.flash_attention(qr, kr, vr, return_lse=True, **ropts)
    rgrads = torch.autograd.grad((ro * do.double()).sum(), (qr, kr, vr))
    errs = [float((a.double() - r).norm() / r.norm().clamp_min(1e-30)) for a, r in zip((o, *grads), (ro, *rgrads))]
    same_inf = bool((torch.isinf(lse) == torch.isinf(rlse)).all())
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} bias {bshape} mask {mshape} {sorted(kw)}: rel err o/dq/dk/dv "
          + " ".join(f"{e:.1e}" for e in errs) + f", lse -inf where the reference's: {same_inf}", flush=True)
