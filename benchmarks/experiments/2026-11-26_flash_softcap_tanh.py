"""flash_attention's softcap tanh as 1 - 2t/(1 + t) (t = e^(-2|x|), signed; absolute error a
few 2^-24, what a softmax sees) against the tree before (ratio form plus an odd series below
|x| 0.25, a few ulps relative): fp32 error of o and the gradients against a float64 softcapped
softmax (B1 H4 N1024 D128 causal, caps 50 and 1, relative L2 and max |err| / max |ref|). Speed:
benchmarks/experiments/2026-11-26_flash_alibi_softcap.py. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_softcap_tanh.py OLD NEW
"""
import sys

import torch

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {"old": ab.load(sys.argv[1], "ato_torch"), "new": ab.load(sys.argv[2], "ato_torch")}
B, H, N, D = 1, 4, 1024, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (3 * torch.randn(B, H, N, D, device="cuda", generator=g) for _ in range(4))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} fp32 causal, x 3 randn")


def reference(q, k, v, cap):
    s = cap * torch.tanh((q @ k.transpose(-1, -2)) / D ** 0.5 / cap)
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


for cap in (50.0, 1.0):
    x = [t.double().requires_grad_() for t in (q, k, v)]
    ro = reference(*x, cap)
    ref = (ro, *torch.autograd.grad(ro, x, do.double()))
    for name, ato in forms.items():
        y = [t.clone().requires_grad_() for t in (q, k, v)]
        o = ato.flash_attention(*y, causal=True, softcap=cap)
        got = (o, *torch.autograd.grad(o, y, do))
        errs = " ".join(f"{n} {float((a.double() - b).norm() / b.norm()):.1e}/{float((a.double() - b).abs().max() / b.abs().max()):.1e}"
                        for n, a, b in zip(("o", "dq", "dk", "dv"), got, ref))
        print(f"  softcap {cap:4.0f} {name}: rel L2 / max: {errs}", flush=True)
