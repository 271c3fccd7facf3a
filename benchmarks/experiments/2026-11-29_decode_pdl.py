"""decode_attention's split kernel as a programmatic dependent launch after the Gluon chunk kernel
(experiments/2026-11-29_decode_pdl.patch, applied in every form: Launch.pdl, plans.CHUNK_PDL: the
chunk kernel lets it start at once, it attends its own tokens, waits (griddepcontrol.wait) and
merges the chunk partials after them) against the split kernel in stream order merging them first
(the form before, CHUNK_PDL False), with and without the chunk kernel's 128-register cap
(plans.CHUNK_PDL_REGS) that leaves room for one split program beside it on an SM, and waiting at its
start (merge first: PDL only hiding the launch, CHUNK_PDL_ORDER 1). Shared-prefix batches B64 P4096
+ T own tokens (Hq32 Hkv8 D128 bs16 bf16). Timed as a CUDA graph's replay (do_bench median, us):
under PDL the split kernel's CUPTI time includes its wait, so the per-kernel sums (also shown)
overstate a call. o's error against the seq-first path. Each form in a process of its own
(patched_tree.alternate_forms), 2 alternating rounds.
Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_pdl.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

FORMS = {"merge first, stream order (before)": (False, None, 2),
         "PDL, wait then merge first, chunk kernel uncapped": (True, None, 1),
         "PDL, merge after, chunk kernel uncapped": (True, None, 2),
         "PDL, merge after, chunk kernel at 128 registers": (True, "patch", 2)}


def inner(form: str):
    import torch

    import ato_torch
    from ato_cli import bench
    from ato_core.ops.decode import plans
    from decode_kernels import measure

    plans.CHUNK_PDL, regs, plans.CHUNK_PDL_ORDER = FORMS[form]
    if regs is None:  # else the patch's cap
        plans.CHUNK_PDL_REGS = None
    cells = []
    for t in (256, 0, 1024):
        (_, _, _, _, BS, _, _), args = bench.shared_prefix_batch(T=t)
        sched = ato_torch.decode_schedule(args[3], args[4], block_size=BS)
        ref = ato_torch.decode_attention(*args).float()
        o, total, kernels = measure(args, sched)
        graph = bench._bench_graph(lambda: ato_torch.decode_attention(*args, schedule=sched), False) * 1e3
        err = ((o.float() - ref).norm() / ref.norm()).item()
        cells.append(f"T{t} graph {graph:5.1f} (CUPTI sum {total:5.1f}: {kernels}; o vs seq-first {err:.0e})")
        torch.cuda.synchronize()
    print(" | ".join(cells))


if __name__ == "__main__":
    if "--inner" in sys.argv:
        inner(sys.argv[sys.argv.index("--inner") + 1])
    else:
        import torch

        from patched_tree import alternate_forms

        print(f"GPU {torch.cuda.get_device_name()}; shared prefix B64 P4096 + T own tokens, Hq32 Hkv8 D128 bs16 bf16")
        patch = ("benchmarks/experiments/2026-11-29_decode_pdl.patch",)
        alternate_forms("benchmarks/experiments/2026-11-29_decode_pdl.py", [(f, patch) for f in FORMS])
