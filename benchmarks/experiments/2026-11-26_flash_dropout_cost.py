"""Attention dropout's cost (issue 25: p = 0.1 at most 15% over plain causal): ato_torch causal
B4 H32 N4096 D128 bf16 with and without dropout_p = 0.1, and torch SDPA's FlashAttention 2
backend the same way, do_bench medians in alternating rounds (benchmarks/tools/ab.py).
argv[1:]: trees to import (default: this one)."""
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load  # noqa: E402

trees = {p: load(p) for p in (sys.argv[1:] or ["."])}
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
leaves = [t.detach().requires_grad_() for t in (q, k, v)]
seed = torch.tensor(1, device="cuda")


def sdpa(a, b, c, p):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True, dropout_p=p)


def calls(tag, fn):
    def bwd():
        for t in leaves:
            t.grad = None
        fn(*leaves).backward(do)
    return {(tag, "fwd"): lambda: fn(q, k, v), (tag, "fwd+bwd"): bwd}


fns = {}
for path, mod in trees.items():
    fns.update(calls(f"{path} plain", lambda a, b, c, m=mod: m.flash_attention(a, b, c, causal=True)))
    fns.update(calls(f"{path} dropout", lambda a, b, c, m=mod: m.flash_attention(a, b, c, causal=True, dropout_p=0.1,
                                                                                 seed=seed)))
fns.update(calls("SDPA plain", lambda a, b, c: sdpa(a, b, c, 0.0)))
fns.update(calls("SDPA dropout", lambda a, b, c: sdpa(a, b, c, 0.1)))
res = alternate(fns, 3, lambda f: do_bench(f, warmup=50, rep=300, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16 causal; do_bench medians (us), 3 rounds")
for mode in ("fwd", "fwd+bwd"):
    for base in [*(f"{p}" for p in trees), "SDPA"]:
        t0, t1 = (statistics.median(res[(f"{base} {v}", mode)]) * 1e3 for v in ("plain", "dropout"))
        print(f"{base:12s} {mode:8s} plain {t0:8.1f}  dropout 0.1 {t1:8.1f}  ratio {t1 / t0:.3f}")
