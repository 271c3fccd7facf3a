"""Issue 25: attention dropout (p 0.1) on the Gluon forward with its mask drawn by the producer
warpgroup (plans.HOPPER_DROPOUT, hopper._draw_masks; the backward portable), in the persistent form
(the default at this shape) and one item a program, against plain causal in the same forms and
against dropout on the portable kernels (the flag off), ato_torch, B4 H32 N4096 D128 bf16 causal
(tools/fa_option_time.py; each form's forward kernel checked by the profiler, its o against the
portable dropout's: the same mask). The target: dropout at most 1.15x plain causal.

    python3 benchmarks/experiments/2026-11-28_flash_dropout_producer_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import DROPOUT, inputs, report, timed_forms  # noqa: E402

FORMS = [  # label, plans settings, options
    ("plain causal", {}, {}),
    ("dropout 0.1 (producer)", {"HOPPER_DROPOUT": True}, DROPOUT),
    ("plain, one item a prog.", {"HOPPER_PERSISTENT": False}, {}),
    ("dropout, one item a prog.", {"HOPPER_DROPOUT": True, "HOPPER_PERSISTENT": False}, DROPOUT),
    ("dropout 0.1 (portable)", {"HOPPER_DROPOUT": False}, DROPOUT),
]


def main():
    import ato_torch

    x = inputs()
    rows, outs = timed_forms(x, FORMS, lambda kw: ato_torch.flash_attention(*x[:3], causal=True, **kw).float(),
                             "fa_fwd")
    a, b = outs["dropout 0.1 (producer)"], outs["dropout 0.1 (portable)"]
    print(f"  o (producer) against o (portable): rel err {float((a - b).norm() / b.norm()):.2e} "
          f"(bf16 rounding of two kernels: about 1e-3; another mask: about 0.3)", flush=True)
    report(rows)


if __name__ == "__main__":
    main()
