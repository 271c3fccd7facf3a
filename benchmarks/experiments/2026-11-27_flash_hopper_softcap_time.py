"""Issue 25: softcap on the Gluon kernels (flash_attention/hopper.py, SOFTCAP) against plain
causal on the same kernels and against softcap on the portable kernels (plans._gluon_applies
refusing it), ato_torch, B4 H32 N4096 D128 bf16 causal, softcap 50 (tools/fa_option_time.py).
The target: softcap at most 1.05x plain causal.

    python3 benchmarks/experiments/2026-11-27_flash_hopper_softcap_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import inputs, patched, report, timed  # noqa: E402


def main():
    from ato_core.ops.flash_attention import plans

    x = inputs()
    rows = [timed("plain causal (Gluon)", *x), timed("softcap 50 (Gluon)", *x, softcap=50.0)]
    gluon = plans._gluon_applies
    with patched(plans, "_gluon_applies", lambda q, D, Nk, target, options, others: options.softcap is None and gluon(
            q, D, Nk, target, options, others)):
        rows.append(timed("softcap 50 (portable)", *x, softcap=50.0))
    report(rows)


if __name__ == "__main__":
    main()
