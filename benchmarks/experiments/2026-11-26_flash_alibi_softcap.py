"""flash_attention with ALiBi on whole causal tiles as a column term (one FMA with the score
scale) and a row term taken with the row max, and the softcap's tanh with tl.math.fdiv (2 ulp)
for its division, against the tree before, A/B/C in one process (neither kept:
results/NVIDIA_H100_80GB_HBM3-flash_options-ab.txt, session 31): B4 H32 N4096 D128 bf16 causal,
plain, ALiBi and softcap 50, forward and forward+backward (us, do_bench medians, 3 rounds in
rotating order); o and the gradients of each form against the first's (relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_alibi_softcap.py NAME=PATH ...
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {}
for arg in sys.argv[1:]:
    name, path = arg.split("=")
    forms[name] = ab.load(path, "ato_torch")
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda")
variants = {"plain": {}, "alibi": {"alibi_slopes": slopes}, "softcap 50": {"softcap": 50.0}}
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16 causal (us)")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


names = list(forms)
for label, kw in variants.items():
    ref, times = None, {n: [] for n in names}
    for r in range(3):
        for name in names[r % len(names):] + names[:r % len(names)]:
            ato = forms[name]

            def fwd():
                return ato.flash_attention(q, k, v, causal=True, **kw)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (q, k, v), do)
            if r == 0:
                got = (fwd(), *fwd_bwd())
                ref = ref if ref is not None else got
                print(f"  {label} {name}: o/dq/dk/dv vs {names[0]} " + " ".join(f"{rel(a, b):.1e}"
                                                                           for a, b in zip(got, ref)))
            times[name].append((do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3,
                                do_bench(fwd_bwd, warmup=25, rep=200, return_mode="median") * 1e3))
    for name, ts in times.items():
        print(f"  {label} {name}: fwd " + " / ".join(f"{f:7.1f}" for f, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
