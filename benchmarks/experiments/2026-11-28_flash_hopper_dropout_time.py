"""Issue 25: attention dropout (p 0.1) on the Gluon forward (DROPOUT; the backward portable),
with experiments/2026-11-28_flash_hopper_dropout.patch applied (not kept: flash_gluon.txt 23),
against plain causal on the same kernels and against dropout on the portable kernels
(plans._gluon_applies refusing it), ato_torch, B4 H32 N4096 D128 bf16 causal
(tools/fa_option_time.py). The target: dropout at most 1.15x plain causal.

    git apply benchmarks/experiments/2026-11-28_flash_hopper_dropout.patch
    python3 benchmarks/experiments/2026-11-28_flash_hopper_dropout_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import inputs, patched, report, timed  # noqa: E402


def main():
    from ato_core.ops.flash_attention import plans

    x = inputs()
    rows = [timed("plain causal (Gluon)", *x), timed("dropout 0.1 (Gluon fwd)", *x, dropout_p=0.1, seed=7)]
    gluon = plans._gluon_applies
    with patched(plans, "_gluon_applies", lambda q, D, Nk, target, options, others, *a: options.dropout_p == 0 and
                 gluon(q, D, Nk, target, options, others, *a)):
        rows.append(timed("dropout 0.1 (portable)", *x, dropout_p=0.1, seed=7))
    report(rows)


if __name__ == "__main__":
    main()
