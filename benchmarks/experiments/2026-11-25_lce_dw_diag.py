import torch, ato_torch
from ato_core.ops.linear_cross_entropy import LINEAR_CROSS_ENTROPY, plans, reference
def run(T, H, V, chunk_mib, bias=True):
    plans.SETTINGS = plans.SETTINGS._replace(chunk_bytes=chunk_mib << 20)
    for fn in (plans.forward_plan, plans.backward_plan, plans.stats_plan): fn.cache_clear()
    LINEAR_CROSS_ENTROPY.cached_forward.cache_clear()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(T, H, device="cuda", generator=g).bfloat16().requires_grad_()
    w = torch.randn(V, H, device="cuda", generator=g).bfloat16().requires_grad_()
    b = torch.randn(V, device="cuda", generator=g).bfloat16().requires_grad_() if bias else None
    t = torch.randint(0, V, (T,), device="cuda", generator=g)
    loss = ato_torch.linear_cross_entropy(x, w, t, bias=b, label_smoothing=0.1)
    gx, gw = torch.autograd.grad(loss, (x, w))
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    lr = reference.linear_cross_entropy(xr, wr, t, bias=None if b is None else b.detach().double(), label_smoothing=0.1)
    rx, rw = torch.autograd.grad(lr, (xr, wr))
    e = (gw.double() - rw)
    rows = e.norm(dim=1) / rw.norm(dim=1).clamp_min(1e-30)
    bad = (rows > 0.05).nonzero().flatten()
    print(f"T{T} H{H} V{V} chunk{chunk_mib}MiB bias={bias}: dx {float((gx.double()-rx).norm()/rx.norm()):.4f} dw {float(e.norm()/rw.norm()):.4f}; rows >5%: {bad.numel()} first {bad[:8].tolist()}", flush=True)
run(1024, 1024, 128256, 128)
run(1000, 1024, 128256, 128)
run(1024, 1024, 128256, 4096)
run(1024, 1024, 128256, 128, bias=False)
