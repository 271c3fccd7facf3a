"""decode_attention's shared-prefix schedule (bench batch: B64 sharing 4096 tokens, 256 private
each, Hq32 Hkv8 D128 bs16 bf16): the Gluon chunk-first kernel (decode/hopper.py) against the
portable one, and its settings (plans.HOPPER_CHUNK: STAGES, CHUNK; schedule chunk_tokens).
Per-kernel device time (CUPTI) and do_bench medians (us); o's error against the portable
path's. Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-27_decode_chunk_gluon.py
[--settings] (the kernel's settings; else the tails' splits, plans.SCHEDULE_SPLITS).
"""

import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli import bench
from ato_core.ops import OPS
from ato_core.ops.decode import plans
from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = bench.shared_prefix_batch()
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; us")
gluon_applies = plans._hopper_chunk
base = dict(plans.HOPPER_CHUNK)


def form(label, gluon=True, tokens=512, splits=0, **settings):
    plans._hopper_chunk = gluon_applies if gluon else (lambda *a: False)
    plans.SCHEDULE_SPLITS = splits
    plans.HOPPER_CHUNK.clear()
    plans.HOPPER_CHUNK.update(base, **settings)
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()
    s = DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
        table.cpu().numpy(), lens.cpu().numpy(), block_size=BS, chunk_tokens=tokens)))

    def run():
        return ato_torch.decode_attention(q, kc, vc, table, lens, schedule=s, return_lse=True)
    return label, run


def measure(label, run, ref):
    o, lse = run()
    err = ((o.float() - ref[0].float()).norm() / ref[0].float().norm()).item()
    lerr = (lse - ref[1]).abs().max().item()
    per = bench.device_kernels(run, lambda out: torch.cuda.synchronize())
    kernels = ", ".join(f"{n.replace('decode_', '').replace('_kernel', '')} {us:.1f}"
                        for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))
    t = do_bench(run, warmup=10, rep=100, return_mode="median") * 1e3
    print(f"  {label:34s} {t:6.1f} | device {sum(us for _, us in per.values()):5.1f}: {kernels} | o rel {err:.1e}, "
          f"lse max {lerr:.1e}", flush=True)


FORMS = [("portable", {"gluon": False}), ("gluon", {}), ("gluon, tails in 2 splits", {"splits": 2}),
         ("gluon, tails in 3 splits", {"splits": 3}), ("gluon, tails in 4 splits", {"splits": 4}),
         ("gluon 1024 tokens, 2 splits", {"tokens": 1024, "splits": 2})]
if "--settings" in sys.argv:  # session 41's first sweep
    FORMS = [("portable", {"gluon": False}), ("gluon", {}), ("gluon stages 3", {"STAGES": 3}),
             ("gluon stages 6", {"STAGES": 6}), ("gluon chunk 16", {"CHUNK": 16}), ("gluon chunk 64", {"CHUNK": 64}),
             ("gluon 256 tokens", {"tokens": 256}), ("gluon 1024 tokens", {"tokens": 1024}),
             ("portable 1024 tokens", {"gluon": False, "tokens": 1024}),
             ("gluon BLOCK_N 128, stages 2", {"BLOCK_N": 128, "STAGES": 2})]
print("gluon's settings:", base)
ref = form("portable", gluon=False)[1]()
for r in range(2):
    print(f"round {r}")
    for label, kw in FORMS:
        try:
            measure(*form(label, **kw), ref)
        except Exception as e:  # a setting that does not compile or fit
            print(f"  {label:34s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
