"""cross_entropy's softcap through triton_helpers.tanh_slope (tanh = 1 - 2 r, r = 1 / (1 + e^(2x))
by MUFU.RCP; slope 4 e r^2) against the tree before (the Taylor-branch tanh with IEEE-range
division, slope 1 - tanh^2), A/B in one process: T 8192, V 128256, bf16 logits (x 8), loss +
grad from torch (us, do_bench medians, 3 rounds in alternating order) plain, softcap 30 and
z_loss + softcap; the loss and gradient against the old form's and, on T 256, both against a
float64 torch softcapped cross-entropy. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-27_ce_softcap_rcp.py OLD NEW
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {"old": ab.load(sys.argv[1], "ato_torch"), "new": ab.load(sys.argv[2], "ato_torch")}
T, V = 8192, 128256
g = torch.Generator(device="cuda").manual_seed(0)
logits = (torch.randn(T, V, device="cuda", generator=g) * 8).to(torch.bfloat16).requires_grad_()
tgt = torch.randint(0, V, (T,), device="cuda", generator=g)
print(f"GPU {torch.cuda.get_device_name()}; T{T} V{V} bf16 logits x 8, loss + grad (us)")


def loss_grad(ato, x, kw):
    loss = ato.cross_entropy(x, tgt[:x.shape[0]], **kw)
    return loss, torch.autograd.grad(loss, x)[0]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


x64 = logits[:256].detach().double().requires_grad_()
ref_loss = torch.nn.functional.cross_entropy(30.0 * torch.tanh(x64 / 30.0), tgt[:256])
ref_grad = torch.autograd.grad(ref_loss, x64)[0]
for name, ato in forms.items():
    x = logits[:256].detach().float().requires_grad_()
    loss, grad = loss_grad(ato, x, {"softcap": 30.0})
    print(f"  fp32 T256 softcap 30 {name}: loss {rel(loss, ref_loss):.1e}, grad {rel(grad, ref_grad):.1e} rel to float64")
for label, kw in (("plain", {}), ("softcap 30", {"softcap": 30.0}), ("z_loss + softcap", {"z_loss": 1e-4, "softcap": 30.0})):
    got = {n: loss_grad(a, logits, kw) for n, a in forms.items()}
    print(f"  {label}: new vs old loss {rel(got['new'][0], got['old'][0]):.1e}, grad {rel(got['new'][1], got['old'][1]):.1e}")
    del got
    times = {n: [] for n in forms}
    for r in range(3):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            times[name].append(do_bench(lambda: loss_grad(forms[name], logits, kw), warmup=5, rep=60,
                                        return_mode="median") * 1e3)
    for name, ts in times.items():
        print(f"  {label} {name}: " + " / ".join(f"{t:7.1f}" for t in ts), flush=True)
