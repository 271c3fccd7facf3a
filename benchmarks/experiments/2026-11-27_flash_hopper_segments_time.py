"""Issue 25: segment ids on the Gluon forward (flash_attention/hopper.py, SEGMENTS; the backward
stays portable) against plain causal and against segment ids on the portable kernels
(plans.HOPPER_ARRAYS without them), ato_torch, B4 H32 N4096 D128 bf16 causal, one segment and 8
equal documents (ato bench's rows; tools/fa_option_time.py).

    python3 benchmarks/experiments/2026-11-27_flash_hopper_segments_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import B, N, inputs, patched, report, timed  # noqa: E402


def main():
    import torch

    from ato_core.ops.flash_attention import plans

    x = inputs()
    one = torch.zeros((B, N), device="cuda", dtype=torch.int32)
    docs = (torch.arange(N, device="cuda", dtype=torch.int32) * 8 // N).expand(B, N).contiguous()
    rows = [timed("plain causal (Gluon)", *x), timed("one segment (Gluon)", *x, segment_ids=one),
            timed("8 documents (Gluon)", *x, segment_ids=docs)]
    with patched(plans, "HOPPER_ARRAYS", plans.HOPPER_ARRAYS[:3]):
        rows += [timed("one segment (portable)", *x, segment_ids=one),
                 timed("8 documents (portable)", *x, segment_ids=docs)]
    report(rows)


if __name__ == "__main__":
    main()
