"""Issue 25: ALiBi on the Gluon kernels (flash_attention/hopper.py, ALIBI) against plain causal
on the same kernels and against ALiBi on the portable kernels (plans.HOPPER_ARRAYS and
HOPPER_BACKWARD_ARRAYS without alibi_slopes), ato_torch, B4 H32 N4096 D128 bf16
(tools/fa_option_time.py). The target: ALiBi at most 1.05x plain causal.

    python3 benchmarks/experiments/2026-11-27_flash_hopper_alibi_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import H, inputs, patched, report, timed  # noqa: E402


def main():
    import torch

    from ato_core.ops.flash_attention import plans

    x = inputs()
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda")
    rows = [timed("plain causal (Gluon)", *x), timed("ALiBi (Gluon)", *x, alibi_slopes=slopes)]
    fwd, bwd = (tuple(n for n in names if n != "alibi_slopes")
                for names in (plans.HOPPER_ARRAYS, plans.HOPPER_BACKWARD_ARRAYS))
    with patched(plans, "HOPPER_ARRAYS", fwd), patched(plans, "HOPPER_BACKWARD_ARRAYS", bwd):
        rows.append(timed("ALiBi (portable)", *x, alibi_slopes=slopes))
    report(rows)


if __name__ == "__main__":
    main()
