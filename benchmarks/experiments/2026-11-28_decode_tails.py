"""decode_attention's split kernel settings (plans.TOKENS, STAGES, WARPS, PROGRAMS_PER_SM): the
shared-prefix bench batch (the tails: 256 own tokens a sequence after the schedule's shared
ones) and the no-sharing rows (B1, B8, B64, N 8192, bs16). Per-kernel device time (CUPTI, us)
and o's error against the base settings'. Not a test. On the GPU machine:
python3 benchmarks/experiments/2026-11-28_decode_tails.py [--stages | --parts]
"""

import os
import sys

import torch

from ato_cli import bench
from ato_core.ops import OPS
from ato_core.ops.decode import plans
from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from decode_kernels import row  # noqa: E402

(B, Hq, Hkv, D, BS, P, T), shared = bench.shared_prefix_batch()
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; us")
sched = DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
    shared[3].cpu().numpy(), shared[4].cpu().numpy(), block_size=BS)))
batches = {"shared": (shared, sched)}
for b in (1, 8, 64):
    batches[f"B{b} N8192"] = (bench.paged_batch(b, 16), None)
BASE = {"TOKENS": plans.TOKENS, "STAGES": plans.STAGES, "WARPS": plans.WARPS, "PROGRAMS_PER_SM": plans.PROGRAMS_PER_SM}


def setting(**kw):
    for name, value in {**BASE, **kw}.items():
        setattr(plans, name, value)
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()


FORMS = [("base", {}), ("tokens 32", {"TOKENS": 32}), ("tokens 32, stages 3", {"TOKENS": 32, "STAGES": 3}),
         ("tokens 64, stages 3", {"STAGES": 3}), ("tokens 16, stages 4", {"TOKENS": 16, "STAGES": 4}),
         ("tokens 128", {"TOKENS": 128}), ("tokens 32, 8 programs an SM", {"TOKENS": 32, "PROGRAMS_PER_SM": 8}),
         ("tokens 64, 2 warps", {"WARPS": 2}), ("tokens 32, 2 warps", {"TOKENS": 32, "WARPS": 2})]
if "--stages" in __import__("sys").argv:  # the second sweep: deeper pipelines
    FORMS = [("base", {})] + [(f"tokens {t}, stages {st}", {"TOKENS": t, "STAGES": st})
                              for t in (64, 32) for st in (4, 5, 6)] + [
        ("tokens 64, stages 5, 8 warps", {"STAGES": 5, "WARPS": 8}),
        ("tokens 128, stages 4, 8 warps", {"TOKENS": 128, "STAGES": 4, "WARPS": 8})]
if "--parts" in __import__("sys").argv:  # the split kernel's two parts apart: tails alone, merge alone
    FORMS = [("base", {})]
    for t in (0, 16):
        (_, _, _, _, _, _, _), sb = bench.shared_prefix_batch(T=t)
        batches[f"shared T{t}"] = (sb, DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
            sb[3].cpu().numpy(), sb[4].cpu().numpy(), block_size=BS))))
    batches["B64 N256"] = (bench.paged_batch(64, 16, N=256), None)
    batches["B64 N4352"] = (bench.paged_batch(64, 16, N=4352), None)
    for b in (1, 8, 64):
        del batches[f"B{b} N8192"]
refs = {}
for r in range(2):
    print(f"round {r}")
    for label, kw in FORMS:
        setting(**kw)
        print(f"  {label:28s} " + row(batches, refs), flush=True)
setting()
