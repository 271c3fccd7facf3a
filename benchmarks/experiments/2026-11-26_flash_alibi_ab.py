"""Causal ALiBi as a key vector (kernels._scores LINEAR) against the |i - j| form: the tree
before (argv[1]) and this one (argv[2]) in one process, alternating rounds (benchmarks/tools/ab.py),
B4 H32 N4096 D128 bf16 causal, plain and with alibi_slopes, fwd and fwd+bwd, do_bench medians."""
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load  # noqa: E402

old, new = load(sys.argv[1]), load(sys.argv[2])
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
leaves = [t.detach().requires_grad_() for t in (q, k, v)]
slopes = (2.0 ** (-8.0 * torch.arange(1, H + 1, device="cuda") / H)).float()


def calls(mod, kw):
    def bwd():
        for t in leaves:
            t.grad = None
        mod.flash_attention(*leaves, causal=True, **kw).backward(do)
    return (lambda: mod.flash_attention(q, k, v, causal=True, **kw)), bwd


fns = {}
for tag, mod in (("old", old), ("new", new)):
    for name, kw in (("plain", {}), ("alibi", {"alibi_slopes": slopes})):
        f, b = calls(mod, kw)
        fns[(name, "fwd", tag)], fns[(name, "fwd+bwd", tag)] = f, b
res = alternate(fns, 4, lambda f: do_bench(f, warmup=50, rep=300, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16 causal; do_bench medians (us), 4 rounds")
med = {k: statistics.median(v) * 1e3 for k, v in res.items()}
for mode in ("fwd", "fwd+bwd"):
    for tag in ("old", "new"):
        p, a = med[("plain", mode, tag)], med[("alibi", mode, tag)]
        print(f"{tag} {mode:8s} plain {p:8.1f}  alibi {a:8.1f}  alibi/plain {a / p:.3f}")
    print(f"alibi {mode} new/old {med[('alibi', mode, 'new')] / med[('alibi', mode, 'old')]:.3f}")
