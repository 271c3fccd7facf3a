"""decode_attention's split count: the tree's (plans._split: the most splits that fit in one wave of
PROGRAMS_PER_SM * SMs programs where they fill ONE_WAVE of it, else the ceil) against the rule
before (the ceil, one split where it gives 2 or fewer: experiments/2026-11-29_decode_split_ceil.patch).
On 132 SMs they differ at B8 (8 splits against 9), B16 (4 / 5) and B32 (2 / 3). No-sharing batches,
N 8192, bs16, Hq32 Hkv8 D128 bf16; per-kernel device time (CUPTI, us), o against the rule before's.
Each form in a process of its own, 2 rounds. Not a test. On the GPU machine:
python3 benchmarks/experiments/2026-11-29_decode_splits.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

if "--inner" in sys.argv:
    import torch

    from ato_cli import bench
    from decode_kernels import row

    batches = {f"B{b}": (bench.paged_batch(b, 16), None) for b in (1, 4, 8, 16, 24, 32, 48, 64)}
    refs = {}
    if sys.argv[-1] == "one wave":  # the rule before's o, saved by its process
        refs = {k: v.cuda() for k, v in torch.load("/tmp/decode_split_refs.pt").items()}
    print("    " + row(batches, refs, "the ceil's"), flush=True)
    if sys.argv[-1] == "ceil":
        torch.save({k: v.cpu() for k, v in refs.items()}, "/tmp/decode_split_refs.pt")
else:
    import torch

    from patched_tree import alternate_forms

    print(f"GPU {torch.cuda.get_device_name()}; no sharing, N 8192 bs16 Hq32 Hkv8 D128 bf16; device us")
    alternate_forms("benchmarks/experiments/2026-11-29_decode_splits.py",
                    (("ceil", ("benchmarks/experiments/2026-11-29_decode_split_ceil.patch",)), ("one wave", ())))
