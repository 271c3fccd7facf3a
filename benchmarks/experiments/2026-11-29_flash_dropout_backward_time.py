"""Issue 25: attention dropout on the Gluon backward (plans.HOPPER_DROPOUT_BACKWARD: the dK / dV and dQ
producers draw the mask) against the portable dropout backward and plain causal, ato_torch, B4 H32
N4096 D128 bf16 causal, p 0.1 (the target: at most 1.15x plain causal). Each row's backward kernels
checked by the profiler; the two dropout rows' gradients against each other (the same mask: a draw off
by one would put them far apart). tools/fa_option_time.py; do_bench medians, fwd and fwd+bwd.

    python3 benchmarks/experiments/2026-11-29_flash_dropout_backward_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import DROPOUT, inputs, report, timed_forms  # noqa: E402

FORMS = [  # label, plans settings, options
    ("plain", {}, {}),
    ("dropout, Gluon bwd", {"HOPPER_DROPOUT_BACKWARD": True}, DROPOUT),
    ("dropout, portable bwd", {"HOPPER_DROPOUT_BACKWARD": False}, DROPOUT),
]


def main():
    import torch

    import ato_torch

    x = inputs()
    leaves = [t.detach().requires_grad_() for t in x[:3]]

    def grads(kw):
        return torch.autograd.grad(ato_torch.flash_attention(*leaves, causal=True, **kw), leaves, x[3])

    rows, got = timed_forms(x, FORMS, grads)
    for a, b, n in zip(got["dropout, Gluon bwd"], got["dropout, portable bwd"], ("dq", "dk", "dv")):
        err = ((a.float() - b.float()).norm() / b.float().norm()).item()
        print(f"  {n}: Gluon against portable, rel err {err:.2e}", flush=True)
    report(rows)


if __name__ == "__main__":
    main()
