"""softmax with a traced temperature: dL/dt from x (now) against from log y (before): the
backward's time beside a fixed temperature's, and dL/dt's error against float64, bf16 and
fp32, |x| up to 0.01 / 0.1 / 1 / 4 (rows of 4096, x ~ N(0, 1) clipped to [-4, 4] x m / 4).
Usage: python3 this.py TREE [TREE ...] (each in its own process; .ab_old: git archive of the
tree before)."""

import os
import subprocess
import sys

if sys.argv[1] != "--one":
    for tree in sys.argv[1:]:
        subprocess.run([sys.executable, __file__, "--one", tree], check=True,
                       env={**os.environ, "PYTHONPATH": os.path.abspath(tree) + ":" + os.environ.get("PYTHONPATH", "")})
    sys.exit(0)

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import ato_torch  # noqa: E402

tree = sys.argv[2]
assert os.path.dirname(ato_torch.__file__).startswith(os.path.abspath(tree)), ato_torch.__file__
g = torch.Generator(device="cuda").manual_seed(0)
M, N = 16384, 4096
x = torch.randn(M, N, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
dy = torch.randn(M, N, device="cuda", generator=g).to(torch.bfloat16)
t = torch.tensor(1.3, device="cuda", requires_grad=True)
times = {}
for name, temp, inputs in (("fixed", 1.3, (x,)), ("traced", t, (x, t))):
    y = ato_torch.softmax(x, temperature=temp)
    times[name] = do_bench(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True), warmup=25, rep=200,
                           return_mode="median") * 1e3
print(f"{tree}: bf16 {M}x{N} backward: fixed temperature {times['fixed']:.1f} us, traced {times['traced']:.1f} us "
      f"({times['traced'] / times['fixed']:.3f}x)", flush=True)
for dtype in (torch.bfloat16, torch.float32):
    errs = []
    for m in (0.01, 0.1, 1.0, 4.0):
        a = (torch.randn(64, 4096, device="cuda", generator=g).clamp(-4, 4) * (m / 4)).to(dtype)
        d = torch.randn(64, 4096, device="cuda", generator=g).to(dtype)
        tt = torch.tensor(1.3, device="cuda", requires_grad=True)
        got, = torch.autograd.grad(ato_torch.softmax(a, temperature=tt), (tt,), d)
        t64 = torch.tensor(1.3, device="cuda", dtype=torch.float64, requires_grad=True)
        ref, = torch.autograd.grad(torch.softmax(a.double() / t64, -1), (t64,), d.double())
        errs.append(f"|x|<={m}: {abs(got.double() - ref).item() / abs(ref).item():.2e}")
    print(f"{tree}: {str(dtype)[6:]} dL/dt relative error: " + ", ".join(errs), flush=True)
