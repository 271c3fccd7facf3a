"""linear_cross_entropy's backward with dlogits stored once (dweight as (x^T dlogits)^T from x
transposed once, dlogits stores vectorised) against the tree before (dlogits stored twice,
[T, C] and [C, T]), A/B in one process at T8192 H4096 V128256 bf16, loss + gradients of x and
weight: per-kernel device time (ms per call) and do_bench medians in 3 alternating rounds;
the gradients against OLD's (relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_lce_one_store.py .ab_old .
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

T, H, V = 8192, 4096, 128256
forms = {}
for name, path in (("old", sys.argv[1]), ("new", sys.argv[2])):
    forms[name] = ab.load(path, "ato_torch", "ato_cli.bench")

g = torch.Generator(device="cuda").manual_seed(0)
x = (torch.randn(T, H, device="cuda", generator=g) * 0.5).to(torch.bfloat16).requires_grad_()
w = (torch.randn(V, H, device="cuda", generator=g) * 0.02).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, V, (T,), device="cuda", generator=g)
print(f"GPU {torch.cuda.get_device_name()}; T{T} H{H} V{V} bf16, loss + dx + dweight")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


ref = None
times = {n: [] for n in forms}
for r in range(3):
    for name in (list(forms) if r % 2 == 0 else list(forms)[::-1]):
        ato, bench = forms[name]

        def run():
            loss = ato.linear_cross_entropy(x, w, t)
            return (loss, *torch.autograd.grad(loss, (x, w)))
        got = run()
        ref = ref if ref is not None else got
        torch.cuda.synchronize()
        times[name].append(do_bench(run, warmup=100, rep=500, return_mode="median"))
        per = bench.device_kernels(run, lambda out: torch.cuda.synchronize(), calls=3)
        parts = ", ".join(f"{n.split('_kernel')[0].replace('lce_', '')} {us / 1e3:.2f}" for n, (c, us) in
                          sorted(per.items(), key=lambda kv: -kv[1][1]) if us > 20)
        print(f"  round {r} {name}: {times[name][-1]:.2f} ms | {parts} | loss/dx/dw vs old "
              + " ".join(f"{rel(a, b):.1e}" for a, b in zip(got, ref)), flush=True)
for name, ts in times.items():
    print(f"{name}: " + " / ".join(f"{v:.2f}" for v in ts) + " ms")
