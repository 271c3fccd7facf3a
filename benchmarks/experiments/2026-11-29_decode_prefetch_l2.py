"""(experiments/2026-11-29_decode_prefetch_l2.patch, applied in every form) decode_attention's split
kernel where it merges the chunk partials, its own tokens' K / V rows
prefetched into L2 (prefetch.global.L2, kernels._prefetch_rows) before the merge's dependent loads,
for plans.MERGE_PREFETCH tokens (0: none, the form before) on the shared-prefix batches B64 P4096 +
T own tokens (Hq32 Hkv8 D128 bs16 bf16): CUPTI device us a call and per kernel, o against the
seq-first path. Each form in a process of its own (patched_tree.alternate_forms), 2 alternating
rounds. Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_prefetch_l2.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

FORMS = {"no prefetch (before)": 0, "64 tokens": 64, "128 tokens": 128, "256 tokens": 256}


def inner(form: str):
    import ato_torch
    from ato_cli import bench
    from ato_core.ops.decode import plans
    from decode_kernels import row

    plans.MERGE_PREFETCH = FORMS[form]
    batches, refs = {}, {}
    for t in (256, 0, 1024):
        (_, _, _, _, BS, _, _), args = bench.shared_prefix_batch(T=t)
        batches[f"T{t}"] = (args, ato_torch.decode_schedule(args[3], args[4], block_size=BS))
        refs[f"T{t}"] = ato_torch.decode_attention(*args)
    print(row(batches, refs, "seq-first"))


if __name__ == "__main__":
    if "--inner" in sys.argv:
        inner(sys.argv[sys.argv.index("--inner") + 1])
    else:
        import torch

        from patched_tree import alternate_forms

        print(f"GPU {torch.cuda.get_device_name()}; shared prefix B64 P4096 + T own tokens, Hq32 Hkv8 D128 bs16 bf16; "
              "device us")
        patch = ("benchmarks/experiments/2026-11-29_decode_prefetch_l2.patch",)
        alternate_forms("benchmarks/experiments/2026-11-29_decode_prefetch_l2.py", [(f, patch) for f in FORMS])
