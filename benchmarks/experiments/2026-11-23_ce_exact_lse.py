"""cross_entropy with the exact-max log-sum-exp (issue 27: 2^((x - m) log2 e), one more
multiply per element than the rounded-max FMA it replaces) against the version before it,
both imported into ONE process in alternating rounds, Liger beside them (not a test).
bf16 logits T8192 V128256, as `ato bench`: loss + gradient (mean), and the loss alone.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-23_ce_exact_lse.py OLD_DIR [ROUNDS]
"""
import os, statistics, sys
import torch
from triton.testing import do_bench

from benchmarks.tools.ab import alternate, load



T, V = 8192, 128256
g = torch.Generator(device="cuda").manual_seed(0)
logits = torch.randn(T, V, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
tgt = torch.randint(0, V, (T,), device="cuda", generator=g)
versions = {"old": load(os.path.abspath(sys.argv[1])), "new": load(os.getcwd())}
try:
    from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
    lig = LigerCrossEntropyLoss()
except ImportError:
    lig = None


def fb(fn):
    def run():
        loss = fn(logits, tgt)
        torch.autograd.grad(loss, (logits,))
    return run


fns = {}
for name, ato in versions.items():
    fns[(name, "loss+grad")] = fb(lambda a, t, ato=ato: ato.cross_entropy(a, t))
    fns[(name, "loss")] = lambda ato=ato: ato.cross_entropy(logits.detach(), tgt)
if lig is not None:
    fns[("liger", "loss+grad")] = fb(lambda a, t: lig(a, t))
for fn in fns.values():
    fn()
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
res = alternate(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; cross_entropy T{T} V{V} bf16, do_bench medians (us), "
      f"{rounds} alternating rounds, old = {sys.argv[1]}: median of rounds (min)")
for mode in ("loss+grad", "loss"):
    line = [f"{mode:10s}"]
    for name in ("old", "new", "liger"):
        if (name, mode) in res:
            t = res[(name, mode)]
            line.append(f"{name} {statistics.median(t) * 1e3:.1f} ({min(t) * 1e3:.1f})")
    o, n = statistics.median(res[("old", mode)]), statistics.median(res[("new", mode)])
    line.append(f"new/old {n / o:.3f}")
    if ("liger", mode) in res:
        line.append(f"new/liger {n / statistics.median(res[('liger', mode)]):.3f}")
    print(" | ".join(line))
big = (torch.rand(64, V, device="cuda") * 2 - 1) * 1.7e38
loss = versions["new"].cross_entropy(big, tgt[:64], reduction="none")
print("logits up to 1.7e38 (fp32, 64 rows): every loss finite:", bool(torch.isfinite(loss).all()))
