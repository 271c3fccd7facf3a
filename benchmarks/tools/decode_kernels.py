"""decode_attention's per-kernel device time (CUPTI, through ato_cli.bench.device_kernels) and o's
error, a row of batches a line, for the decode experiments (experiments/2026-11-28_decode_tails.py,
2026-11-29_decode_*.py); shared_prefix_ab, the A/B of kernel-source forms on the shared-prefix
batches (2026-11-29_decode_merge_order.py, ..._decode_merge_loads.py)."""
import sys


def measure(args, schedule, calls: int = 50):
    """(o, total device us a call, "kernel us, ..." slowest first) of ato_torch.decode_attention
    on ``args`` with ``schedule``."""
    import torch

    import ato_torch
    from ato_cli import bench

    def run():
        return ato_torch.decode_attention(*args, schedule=schedule)
    per = bench.device_kernels(run, lambda out: torch.cuda.synchronize(), calls=calls)
    kernels = ", ".join(f"{n.replace('decode_', '').replace('_kernel', '')} {us:.1f}"
                        for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))
    return run(), bench._device_ms(per) * 1e3, kernels


def row(batches, refs, against: str = "") -> str:
    """One line of an A/B: for each batch name -> (args, schedule) its total device time, kernels and
    o's relative error against refs[name] (the first o measured where refs has none); a batch that
    fails (a setting that does not compile or fit) says why. ``against``: what refs are, for the text."""
    cells = []
    for name, (args, schedule) in batches.items():
        try:
            o, total, kernels = measure(args, schedule)
            ref = refs.setdefault(name, o)
            err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
            cells.append(f"{name} {total:6.1f} ({kernels}; o{' vs ' + against if against else ''} {err:.0e})")
        except Exception as e:
            cells.append(f"{name} failed: {type(e).__name__}: {str(e)[:160]}")
    return " | ".join(cells)


def shared_prefix_ab(script: str, forms, tails=(256, 0, 16, 1024)) -> None:
    """The A/B of ``script`` (a path from the repository root) on the bench's shared-prefix batch
    (B64 P4096, T own tokens a sequence for each T of ``tails``, with its schedule): run with
    --inner (in a patched tree), one row() against the seq-first path; else each (form, diffs) of
    ``forms`` in a process of its own, 2 alternating rounds (patched_tree.alternate_forms)."""
    import torch

    if "--inner" in sys.argv:
        import ato_torch
        from ato_cli import bench

        batches, refs = {}, {}
        for t in tails:
            (_, _, _, _, BS, _, _), args = bench.shared_prefix_batch(T=t)
            batches[f"T{t}"] = (args, ato_torch.decode_schedule(args[3], args[4], block_size=BS))
            refs[f"T{t}"] = ato_torch.decode_attention(*args)
        print(row(batches, refs, "seq-first"))
        return
    from patched_tree import alternate_forms

    print(f"GPU {torch.cuda.get_device_name()}; shared prefix B64 P4096 + T own tokens, Hq32 Hkv8 D128 bs16 bf16; "
          "device us")
    alternate_forms(script, forms)
