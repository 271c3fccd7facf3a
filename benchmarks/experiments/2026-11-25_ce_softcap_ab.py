"""A/B (not a test, 2026-11-25): cross_entropy fwd+bwd (T 8192, V 128256, bf16) plain, with
z_loss, softcap and both, three tanh forms alternating in one process: this tree; bench_ab/old
(`git archive ac4dbf7 ato_core ato_torch ato_jax ato_cli`, the same tanh as this tree's, kept:
(1-t)/(1+t) with IEEE division, slope 1 - tanh^2); bench_ab/fast (a copy whose
triton_helpers.tanh returns tanh.approx.f32 by inline PTX, the one-instruction floor; not
accurate enough to ship). At the time of the run "this tree" had a fast-reciprocal form,
tanh = (1-t) r, slope = 4 t r^2 with r = fdiv(1, 1+t), since reverted.
Run from the repository root with the two copies beside it."""
import sys, torch
sys.path.insert(0, "benchmarks/tools")
from ab import load, alternate
import triton.testing
T, V = 8192, 128256
g = torch.Generator(device="cuda").manual_seed(0)
logits = (torch.randn(T, V, device="cuda", generator=g) * 8).to(torch.bfloat16).requires_grad_()
tgt = torch.randint(0, V, (T,), device="cuda", generator=g)
fns = {}
for ver, path in (("current", "."), ("old tanh", "bench_ab/old"), ("tanh.approx", "bench_ab/fast")):
    at = load(path)
    for label, kw in (("plain", {}), ("z_loss", dict(z_loss=1e-4)), ("softcap", dict(softcap=30.0)),
                      ("both", dict(z_loss=1e-4, softcap=30.0))):
        def f(at=at, kw=kw):
            loss = at.cross_entropy(logits, tgt, **kw)
            loss.backward()
            logits.grad = None
        f(); f()
        fns[(ver, label)] = f
res = alternate(fns, 5, lambda f: triton.testing.do_bench(f, warmup=5, rep=40))
for k, v in res.items():
    print(f"{k[0]:12s} {k[1]:8s} median {sorted(v)[len(v)//2]*1000:8.1f} us   all {[round(x*1000) for x in v]}")
