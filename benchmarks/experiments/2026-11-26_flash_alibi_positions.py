"""flash_attention with ALiBi, its distance |q - k| taken in fp32 from positions converted once a
row and once a column (kernels._scores) against the tree before (an int-to-float conversion an
element), A/B in one process: B4 H32 N4096 D128 bf16 causal, forward and forward+backward, plain
causal beside it (us, do_bench medians, 3 alternating rounds); o and the gradients against
OLD's (relative L2: 0, the distances are exact in fp32 below 2^24). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_alibi_positions.py .ab_old .
"""
import sys

import torch

sys.path.insert(0, "benchmarks/tools")
from triton.testing import do_bench  # noqa: E402

import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch") for name, path in (("old", sys.argv[1]), ("new", sys.argv[2]))}
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda")
variants = {"plain": {}, "alibi": {"alibi_slopes": slopes}}
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16 causal (us)")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for name, kw in variants.items():
    ref, times = None, {}
    for r in range(3):
        for form in (("old", "new") if r % 2 == 0 else ("new", "old")):
            ato = forms[form]

            def fwd():
                return ato.flash_attention(q, k, v, causal=True, **kw)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (q, k, v), do)
            got = (fwd(), *fwd_bwd())
            ref = ref if ref is not None else got
            t = (do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3,
                 do_bench(fwd_bwd, warmup=25, rep=200, return_mode="median") * 1e3)
            times.setdefault(form, []).append(t)
            if r == 0 and form == "new":
                print(f"  {name}: o/dq/dk/dv new vs old " + " ".join(f"{rel(a, b):.1e}" for a, b in zip(got, ref)))
    for form, ts in times.items():
        print(f"  {name} {form}: fwd " + " / ".join(f"{f:7.1f}" for f, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
