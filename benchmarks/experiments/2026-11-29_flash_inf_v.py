"""Where an infinity in v goes on the GPU's flash kernels (test_special_values_gpu's
flash_softcap_alibi-v-inf case): NaN and infinities of o by column, Gluon and portable plans,
fp16 and bf16, against the float64 reference. Usage: python benchmarks/experiments/2026-11-29_flash_inf_v.py"""
import dataclasses
import sys
import zlib

import numpy as np

sys.path[:0] = [".", "tests"]
import test_gpu  # noqa: E402
from ato_cli import harness as h  # noqa: E402
from ato_core.ops.flash_attention import plans  # noqa: E402
from helpers import clear_plans  # noqa: E402


def where(label, o):
    nan, inf = np.argwhere(np.isnan(o)), np.argwhere(np.isinf(o))
    print(f"  {label}: NaN {len(nan)} in columns {np.unique(nan[:, 3]).tolist()} heads {np.unique(nan[:, 2]).tolist()}"
          f", inf {len(inf)} in columns {np.unique(inf[:, 3]).tolist()}", flush=True)


name, arg, special = "flash_softcap_alibi", "v", "inf"
base = test_gpu.SPECIAL_GPU_CASES[name][0]()
for dtype in ("float16", "bfloat16"):
    case = dataclasses.replace(base, dtype=dtype)
    inputs = h.make_inputs(case)
    rng = np.random.default_rng(zlib.crc32(f"{name} {arg} {special}".encode()))
    a = inputs[arg].copy()
    idx = test_gpu._special_index(case, inputs, arg, rng)
    val = test_gpu._special_value(special, rng)
    a.reshape(-1)[idx] = val
    inputs[arg] = a
    print(dtype, "v", np.unravel_index(idx, a.shape), val, flush=True)
    where("reference", h.run_torch(case, inputs, "cuda", reference=True).outputs[0])
    for gluon in (True, False):
        if not gluon:
            plans.HOPPER_HEAD_DIMS, plans.HOPPER_FORWARD_HEAD_DIMS = (), ()
        clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
        fwd = test_gpu._plans(case)[0]
        where(f"ato {[l.name for l in fwd.launches]}", h.run_torch(case, inputs, "cuda").outputs[0])
    plans.HOPPER_HEAD_DIMS, plans.HOPPER_FORWARD_HEAD_DIMS = (128,), (64, 128)
