"""Issue 25: packed sequences with attention dropout on the Gluon kernels (2026-11-29_flash_varlen_dropout.patch
applied: the tree runs them on the portable kernels) against the portable kernels (plans.HOPPER_DROPOUT and
HOPPER_DROPOUT_BACKWARD off) and against varlen without dropout, the bench's 8 documents
(ato_cli.bench.VARLEN_DOCS, T32768 H32 D128 bf16 causal), p 0.1; do_bench medians of 3 alternating rounds,
fwd and fwd+bwd (us).

    git apply benchmarks/experiments/2026-11-29_flash_varlen_dropout.patch
    python3 benchmarks/experiments/2026-11-29_flash_varlen_dropout.py
"""
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def main():
    import statistics

    import torch
    from triton.testing import do_bench

    import ato_torch
    from ato_cli.bench import VARLEN_DOCS
    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    H, D, docs = 32, 128, VARLEN_DOCS
    T, L = sum(docs), max(docs)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    cu = torch.tensor([0, *itertools.accumulate(docs)], device="cuda", dtype=torch.int32)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    print("GPU", torch.cuda.get_device_name(), f"{len(docs)} docs, T{T} H{H} D{D} bf16 causal", flush=True)
    forms = (("plain", {}, {}), ("dropout 0.1, Gluon", {"dropout_p": 0.1, "seed": 7}, {}),
             ("dropout 0.1, portable", {"dropout_p": 0.1, "seed": 7},
              {"HOPPER_DROPOUT": False, "HOPPER_DROPOUT_BACKWARD": False}))
    times = {label: ([], []) for label, _, _ in forms}
    for _ in range(3):
        for label, kw, settings in forms:
            with plan_settings("flash_attention", plans, [plans.varlen_forward_plan, plans.varlen_backward_plan],
                               **settings):
                def fwd(x=leaves, kw=kw):
                    return ato_torch.flash_attention_varlen(*x, cu, cu, L, L, causal=True, **kw)

                def fwd_bwd(kw=kw):
                    torch.autograd.grad(fwd(kw=kw), leaves, do)

                times[label][0].append(do_bench(fwd) * 1e3)
                times[label][1].append(do_bench(fwd_bwd) * 1e3)
    base = [statistics.median(t) for t in times["plain"]]
    for label, _, _ in forms:
        f, fb = (statistics.median(t) for t in times[label])
        print(f"{label:24s} fwd {f:8.1f} us ({f / base[0]:.3f}x plain)   "
              f"fwd+bwd {fb:8.1f} us ({fb / base[1]:.3f}x plain)", flush=True)


if __name__ == "__main__":
    main()
