"""decode_attention's split kernel with a schedule (one split: it merges the chunk partials):
every program merging them before its own tokens (the tree) against every other program merging
them after (experiments/2026-11-29_decode_merge_after.patch; not taken, slower). Each form in a
process of its own (benchmarks/tools/patched_tree.py), 2 alternating rounds; per-kernel device
time (CUPTI, us) and o's error against the seq-first path.
Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_merge_order.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

from decode_kernels import shared_prefix_ab  # noqa: E402

shared_prefix_ab("benchmarks/experiments/2026-11-29_decode_merge_order.py",
                 (("merge after on odd programs (the patch)",
                   ("benchmarks/experiments/2026-11-29_decode_merge_after.patch",)),
                  ("merge first everywhere (tree)", ())))
