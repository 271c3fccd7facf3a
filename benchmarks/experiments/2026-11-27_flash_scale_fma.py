"""flash_attention with the softmax scale folded into exp2's argument (plain scores: the raw dot's
row max times the scale, then exp2(fma(s, scale, -m)); one multiply a score fewer in the forward
and both backward kernels) against the tree before, A/B in one process: bf16, causal and full,
forward and forward+backward (us, do_bench medians, 3 rounds in alternating order); o and the
gradients of the new form against the old's (relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-27_flash_scale_fma.py OLD NEW
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {"old": ab.load(sys.argv[1], "ato_torch"), "new": ab.load(sys.argv[2], "ato_torch")}
print(f"GPU {torch.cuda.get_device_name()}; bf16 (us)")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for (B, H, N, D), causal in (((4, 32, 4096, 128), True), ((4, 32, 4096, 128), False), ((16, 16, 1024, 64), True)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    label = f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}"
    got, times = {}, {n: [] for n in forms}
    for r in range(3):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            ato = forms[name]

            def fwd():
                return ato.flash_attention(q, k, v, causal=causal)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (q, k, v), do)
            if r == 0:
                got[name] = (fwd(), *fwd_bwd())
            times[name].append((do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3,
                                do_bench(fwd_bwd, warmup=25, rep=200, return_mode="median") * 1e3))
    print(f"  {label}: new o/dq/dk/dv vs old " + " ".join(f"{rel(a, b):.1e}" for a, b in zip(got["new"], got["old"])))
    for name, ts in times.items():
        print(f"  {label} {name}: fwd " + " / ".join(f"{f:7.1f}" for f, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
