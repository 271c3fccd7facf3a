"""decode_attention's per-kernel device time (CUPTI, through ato_cli.bench.device_kernels) and o's
error, a row of batches a line, for the decode experiments (experiments/2026-11-28_decode_tails.py,
2026-11-29_decode_*.py)."""


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
