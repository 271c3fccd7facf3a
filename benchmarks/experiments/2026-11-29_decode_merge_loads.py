"""decode_attention's split kernel merging the chunk partials with four partials' loads in
flight (experiments/2026-11-29_decode_merge_loads.patch: each unit's id a scalar load, the four
loads written out before their first use, a 128-register cap on that launch) against the tree,
whose ids are picked out of a [BDEPTH] tile by cross-warp reductions, so that each partial's load
waits for the last one's use (SASS: NVIDIA_H200-decode-sweep.txt 22c). Prepared in session 56
without device time: o and lse keep their bits under the interpreter; on sm_90 the patched kernel
has its four loads back to back, 128 registers and no spill (the tree's: 108). Each form in a
process of its own (benchmarks/tools/patched_tree.py), 2 alternating rounds; per-kernel device
time (CUPTI, us) and o's error against the seq-first path.
Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_merge_loads.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

from decode_kernels import shared_prefix_ab  # noqa: E402

shared_prefix_ab("benchmarks/experiments/2026-11-29_decode_merge_loads.py",
                 (("four partials' loads in flight (the patch)",
                   ("benchmarks/experiments/2026-11-29_decode_merge_loads.patch",)),
                  ("the tree", ())))
