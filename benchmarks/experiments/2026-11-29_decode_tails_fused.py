"""decode_attention's shared-prefix schedule with the tails in the Gluon chunk kernel's fourth
warpgroup (plans.HOPPER_TAILS; the combine merges) against the split kernel after the chunk
kernel (the form before), and the tail worker's settings. Per-kernel device time (CUPTI, us) and
o's error against the seq-first path. Not a test. The form is not in the tree: run on it with
the patch applied (experiments/2026-11-29_decode_tails_fused.patch; results: decode-sweep.txt 16),
on the GPU machine: git apply benchmarks/experiments/2026-11-29_decode_tails_fused.patch, then
python3 benchmarks/experiments/2026-11-29_decode_tails_fused.py
"""

import os
import sys

import torch

import ato_torch
from ato_cli import bench
from ato_core.ops import OPS
from ato_core.ops.decode import plans
from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from decode_kernels import row  # noqa: E402

(B, Hq, Hkv, D, BS, P, T), shared = bench.shared_prefix_batch()
copy_gbs = bench._copy_gbs(False)
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; us; "
      f"copy {copy_gbs:.0f} GB/s")


def scheduled(args):
    return DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
        args[3].cpu().numpy(), args[4].cpu().numpy(), block_size=BS)))


batches = {"shared": (shared, scheduled(shared))}
for t in (0, 16, 1024):
    _, sb = bench.shared_prefix_batch(T=t)
    batches[f"T{t}"] = (sb, scheduled(sb))
BASE = (plans.TAIL_MIN_PROGRAMS, dict(plans.HOPPER_TAILS))


def setting(min_programs=BASE[0], **kw):
    plans.TAIL_MIN_PROGRAMS = min_programs
    plans.HOPPER_TAILS.clear()
    plans.HOPPER_TAILS.update({**BASE[1], **kw})
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()


FORMS = [("tails fused (the patch's plan)", {}), ("split kernel after", {"min_programs": float("inf")}),
         ("tail tile 32, 4 stages", {"TAIL_N": 32, "TAIL_STAGES": 4, "STAGES": 4}),
         ("tail tile 32, 6 stages", {"TAIL_N": 32, "TAIL_STAGES": 6, "STAGES": 3}),
         ("chunk ring 2", {"TAIL_STAGES": 4, "STAGES": 2})]
refs = {name: ato_torch.decode_attention(*args) for name, (args, _) in batches.items()}
for name, (args, _) in batches.items():  # the unique K / V bytes (shared prefix once, every tail) at the copy rate
    t = int(name[1:]) if name != "shared" else T
    print(f"  {name}: unique-bytes floor {2 * (P + B * t) * Hkv * D * 2 / copy_gbs / 1e3:.1f} us")
for r in range(2):
    print(f"round {r}")
    for label, kw in FORMS:
        setting(**kw)
        print(f"  {label:26s} " + row(batches, refs, "seq-first"), flush=True)
setting()
