"""linear_cross_entropy's softcap through triton_helpers.tanh_slope (as cross_entropy's, session 33)
against the tree before, A/B in one process: T 2048, H 4096, V 128256 bf16, loss + dx, dw (ms,
do_bench medians, 3 rounds in alternating order) plain and softcap 30; loss and gradients of the
new form against the old's (relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-27_lce_softcap_rcp.py OLD NEW
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {"old": ab.load(sys.argv[1], "ato_torch"), "new": ab.load(sys.argv[2], "ato_torch")}
T, H, V = 2048, 4096, 128256
g = torch.Generator(device="cuda").manual_seed(0)
x = (torch.randn(T, H, device="cuda", generator=g) / 8).to(torch.bfloat16).requires_grad_()
w = (torch.randn(V, H, device="cuda", generator=g) / 8).to(torch.bfloat16).requires_grad_()
tgt = torch.randint(0, V, (T,), device="cuda", generator=g)
print(f"GPU {torch.cuda.get_device_name()}; T{T} H{H} V{V} bf16, loss + dx, dw (ms)")


def run(ato, kw):
    loss = ato.linear_cross_entropy(x, w, tgt, **kw)
    return (loss, *torch.autograd.grad(loss, (x, w)))


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for label, kw in (("plain", {}), ("softcap 30", {"softcap": 30.0})):
    got = {n: run(a, kw) for n, a in forms.items()}
    print(f"  {label}: new vs old loss/dx/dw " + " ".join(f"{rel(a, b):.1e}" for a, b in zip(got["new"], got["old"])))
    del got
    times = {n: [] for n in forms}
    for r in range(3):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            times[name].append(do_bench(lambda: run(forms[name], kw), warmup=1, rep=100, return_mode="median"))
    for name, ts in times.items():
        print(f"  {label} {name}: " + " / ".join(f"{t:7.2f}" for t in ts), flush=True)
