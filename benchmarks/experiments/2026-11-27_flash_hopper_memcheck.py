"""The Gluon flash forward (flash_attention/hopper.py) at small odd shapes (partial tiles,
causal programs with no key, Nq < Nk, GQA, MQA, bnhd, one row), forward and backward against
the float64 reference (session 35: with windows and lengths too): run under compute-sanitizer (memcheck) on an sm_90 GPU to find
out-of-range accesses and races on its shared-memory ring.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py [--backward]

--backward: with plans.HOPPER_BACKWARD on (the Gluon dK / dV and dQ kernels, windows and lengths too);
--alibi: the ALiBi cases alone; --softcap: the softcap cases alone; --segments: the segment-id ones;
--per-item: the forward one item a program (plans.HOPPER_PERSISTENT off; on, the cases without kv
lengths run its persistent form); --kv-lengths: the persistent form with kv lengths too
(plans.PERSISTENT_KV_LENS); --persistent-dq (with --backward): dQ's persistent kernel where it applies
(plans.HOPPER_BWD_PERSISTENT: no lengths); --persistent-dkdv (with --backward, in a copy with
2026-11-28_flash_persistent_dkdv.patch): dK / dV's (plans.HOPPER_DKDV_PERSISTENT); --d64: every case at D 64 on the persistent forward (plans.D64_MIN_TILES 0:
short items too); --dropout: every case with dropout 0.1 (plans.HOPPER_DROPOUT: the Gluon forward one item
a program, its mask drawn by the producer; with --backward the Gluon dK / dV and dQ too,
plans.HOPPER_DROPOUT_BACKWARD); --split-kv: the forward's K / V ring with split barriers (plans.HOPPER_SPLIT_KV).
"""
import sys

import torch

import ato_torch
from ato_core.ops.flash_attention import plans, reference

sys.path.insert(0, "benchmarks/tools")
from fa_against_reference import against_reference  # noqa: E402

CASES = [
    # (B, Hq, Hkv, Nq, Nk, dtype, kwargs)
    (2, 4, 2, 77, 77, torch.bfloat16, dict(causal=True)),
    (1, 2, 2, 300, 77, torch.float16, dict(causal=True)),
    (1, 4, 1, 100, 1000, torch.bfloat16, dict(causal=False, layout="bnhd")),
    (2, 2, 2, 1, 1, torch.bfloat16, dict(causal=True)),
    (1, 2, 1, 1000, 1000, torch.bfloat16, dict(causal=False)),
    (1, 2, 2, 700, 700, torch.bfloat16, dict(causal=True, window_size=(150, None))),
    (2, 2, 1, 300, 500, torch.float16, dict(causal=False, window_size=(40, 70))),
    (1, 2, 2, 400, 200, torch.bfloat16, dict(causal=False, window_size=(0, 0))),
    (3, 2, 1, 300, 500, torch.bfloat16, dict(causal=True, lengths=True)),
    # (session 37) ALiBi slopes [Hq], and [B, Hq] with a window and lengths
    (2, 4, 2, 77, 77, torch.bfloat16, dict(causal=True, alibi="h")),
    (3, 2, 1, 300, 500, torch.float16, dict(causal=False, window_size=(40, 70), lengths=True, alibi="bh")),
    # (session 38) causal ALiBi, split into key and row terms, with a window and lengths
    (3, 2, 1, 300, 500, torch.bfloat16, dict(causal=True, window_size=(100, None), lengths=True, alibi="bh")),
    # (session 39) softcap, alone and with a window, lengths and ALiBi
    (2, 4, 2, 300, 700, torch.bfloat16, dict(causal=False, softcap=5.0)),
    (3, 2, 1, 300, 500, torch.float16, dict(causal=True, window_size=(100, None), lengths=True, alibi="bh",
                                            softcap=30.0)),
    # segment ids (forward on the Gluon kernel), out of order, with a window and lengths
    (3, 2, 1, 300, 700, torch.bfloat16, dict(causal=True, window_size=(200, None), lengths=True, segments=True)),
    # (session 46) q lengths alone (the persistent forward takes them), more items than SMs
    (3, 2, 1, 300, 500, torch.bfloat16, dict(causal=True, window_size=(100, None), q_lengths_only=True)),
    (4, 16, 4, 1000, 1000, torch.bfloat16, dict(causal=True)),
]

plans.HOPPER_BACKWARD = "--backward" in sys.argv
plans.HOPPER_BWD_PERSISTENT = "--persistent-dq" in sys.argv or plans.HOPPER_BWD_PERSISTENT
if "--persistent-dkdv" in sys.argv:
    plans.HOPPER_DKDV_PERSISTENT = True
plans.HOPPER_PERSISTENT = "--per-item" not in sys.argv
plans.PERSISTENT_KV_LENS = "--kv-lengths" in sys.argv or plans.PERSISTENT_KV_LENS
plans.HOPPER_DROPOUT = "--dropout" in sys.argv or plans.HOPPER_DROPOUT
plans.HOPPER_SPLIT_KV = "--split-kv" in sys.argv or plans.HOPPER_SPLIT_KV
D = 64 if "--d64" in sys.argv else 128
if D == 64:
    plans.D64_MIN_TILES = 0
for B, Hq, Hkv, Nq, Nk, dtype, kw in CASES:
    if "--alibi" in sys.argv and "alibi" not in kw:  # the ALiBi cases alone
        continue
    if "--softcap" in sys.argv and "softcap" not in kw:  # the softcap cases alone
        continue
    if "--segments" in sys.argv and "segments" not in kw:  # the segment-id cases alone
        continue
    g = torch.Generator(device="cuda").manual_seed(Nq)
    shape_q, shape_k = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if kw.get("layout") != "bnhd" else \
        ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    q = torch.randn(shape_q, device="cuda", generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(shape_k, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(2))
    if kw.pop("lengths", False):
        kw["q_lengths"] = torch.tensor([Nq - 1, 0, Nq // 2][:B], device="cuda", dtype=torch.int32)
        kw["kv_lengths"] = torch.tensor([Nk, Nk // 3, 0][:B], device="cuda", dtype=torch.int64)
    if kw.pop("q_lengths_only", False):
        kw["q_lengths"] = torch.tensor([Nq - 1, 0, Nq // 2][:B], device="cuda", dtype=torch.int32)
    if kw.pop("segments", False):  # 3 ids in random order
        kw["segment_ids"] = tuple(torch.randint(0, 3, (B, n), device="cuda", generator=g, dtype=torch.int32)
                                  for n in (Nq, Nk))
    if "--dropout" in sys.argv:
        kw.update(dropout_p=0.1, seed=Nq)
    alibi = kw.pop("alibi", None)
    if alibi:
        kw["alibi_slopes"] = torch.rand((Hq,) if alibi == "h" else (B, Hq), device="cuda", generator=g)
    result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **kw)
    print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} {dtype} {kw}: " + result, flush=True)
