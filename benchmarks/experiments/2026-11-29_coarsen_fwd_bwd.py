"""max_l2_coarsen forward and forward+backward (bench's closure: fresh leaves, the backward with a
cotangent) with the portable and the Gluon forward, alternating, 2 rounds: do_bench medians (us)
and the kernels' device time (CUPTI) of a forward+backward call. B1 H32 N32768 D128 bf16, blocks
of 64. Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_coarsen_fwd_bwd.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import torch  # noqa: E402

import ato_torch  # noqa: E402
from ato_cli import bench  # noqa: E402
from ato_core.ops.block_sparse import plans  # noqa: E402
from helpers import plan_settings  # noqa: E402

print(f"GPU {torch.cuda.get_device_name()}")
x = torch.randn(1, 32, 32768, 128, device="cuda", dtype=torch.bfloat16)
cot = torch.randn(1, 32, 512, 128, device="cuda", dtype=torch.bfloat16)
for rnd in range(2):
    for name, choose in (("portable", lambda *a: False), ("gluon", plans._hopper_coarsen)):
        with plan_settings("max_l2_coarsen", plans, [], _hopper_coarsen=choose):
            run = bench._torch_fwd_bwd(lambda a: ato_torch.max_l2_coarsen(a, 64)[0], [x], cot)
            ms = bench._bench_torch(run, False)
            ms_f = bench._bench_torch(lambda: ato_torch.max_l2_coarsen(x, 64), False)
            per = bench.device_kernels(run, lambda out: torch.cuda.synchronize())
        parts = ", ".join(f"{k[:48]} {v[1]:.1f} ({v[0]:g} a call)" for k, v in per.items())
        print(f"round {rnd} {name}: forward {ms_f * 1e3:.1f} us, forward+backward {ms * 1e3:.1f} us; device: {parts}",
              flush=True)
