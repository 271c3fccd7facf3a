"""linear_cross_entropy forward and backward at small odd shapes (T, H, V not multiples of any
tile; several vocabulary chunks, forced by a small chunk_bytes; bias, softcap, z-loss, ignored
rows), against the float64 reference: run under compute-sanitizer (memcheck) on the GPU
machine to find out-of-range accesses.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-25_lce_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.linear_cross_entropy import LINEAR_CROSS_ENTROPY, plans, reference

plans.SETTINGS = plans.SETTINGS._replace(chunk_bytes=1 << 16)  # several chunks at these sizes
for fn in (plans.forward_plan, plans.backward_plan, plans.stats_plan):
    fn.cache_clear()
LINEAR_CROSS_ENTROPY.cached_forward.cache_clear()

for T, H, V, dtype, kw in [(37, 72, 1001, torch.bfloat16, dict(softcap=20.0, z_loss=1e-3)),
                           (1, 16, 7, torch.float16, dict()),
                           (130, 200, 3000, torch.float32, dict(label_smoothing=0.1, reduction="none")),
                           (257, 64, 600, torch.bfloat16, dict(reduction="sum"))]:
    g = torch.Generator(device="cuda").manual_seed(T)
    x = torch.randn(T, H, device="cuda", generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, H, device="cuda", generator=g) * 0.3).to(dtype).requires_grad_()
    b = torch.randn(V, device="cuda", generator=g).to(dtype).requires_grad_()
    t = torch.randint(0, V, (T,), device="cuda", generator=g)
    t[::7] = -100
    loss = ato_torch.linear_cross_entropy(x, w, t, bias=b, **kw)
    grads = torch.autograd.grad(loss.sum(), (x, w, b))
    xr, wr, br = (a.detach().double().requires_grad_() for a in (x, w, b))
    ref = reference.linear_cross_entropy(xr, wr, t, bias=br, **kw)
    rgrads = torch.autograd.grad(ref.sum(), (xr, wr, br))
    errs = [float((a.double() - r).norm() / r.norm().clamp_min(1e-30)) for a, r in zip((loss, *grads), (ref, *rgrads))]
    print(f"T{T} H{H} V{V} {dtype} {kw}: rel err loss/dx/dw/db " + " ".join(f"{e:.1e}" for e in errs), flush=True)
