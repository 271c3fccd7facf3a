"""decode_attention's per-kernel device time (CUPTI, through ato_cli.bench.device_kernels) for the
decode experiments (experiments/2026-11-29_decode_*.py): one line a batch."""


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
    return run(), sum(us for _, us in per.values()), kernels
