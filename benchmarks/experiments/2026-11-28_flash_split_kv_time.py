"""Issues 25 / 22: the Gluon forward's K / V ring with split barriers (plans.HOPPER_SPLIT_KV: a K slot
freed at its QK, a V slot at its PV) against the joint ones, ato_torch, B4 H32 N4096 D128 bf16
causal, the persistent form: plain with rings of 3 and 2, and dropout 0.1 (its ring of 2; the
target: at most 1.15x plain causal). Each row's kernel checked by the profiler, o of the split
rows bit for bit that of the joint (tools/fa_option_time.py; do_bench medians, fwd and fwd+bwd).

    python3 benchmarks/experiments/2026-11-28_flash_split_kv_time.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import DROPOUT, inputs, report, timed_forms  # noqa: E402

FORMS = [  # label, plans settings (HOPPER's STAGES apart), options
    ("plain, joint", {}, {}),
    ("plain, split", {"HOPPER_SPLIT_KV": True}, {}),
    ("plain 2 stages, joint", {"STAGES": 2}, {}),
    ("plain 2 stages, split", {"STAGES": 2, "HOPPER_SPLIT_KV": True}, {}),
    ("dropout, joint", {}, DROPOUT),
    ("dropout, split", {"HOPPER_SPLIT_KV": True}, DROPOUT),
]


def main():
    import torch

    import ato_torch
    from ato_core.ops.flash_attention import plans

    x = inputs()
    forms = []
    for label, settings, kw in FORMS:  # STAGES as HOPPER's; HOPPER_SPLIT_KV off unless the form sets it
        settings = {"HOPPER_SPLIT_KV": False, **settings}
        if "STAGES" in settings:
            settings["HOPPER"] = {**plans.HOPPER, "STAGES": settings.pop("STAGES")}
        forms.append((label, settings, kw))
    rows, outs = timed_forms(x, forms, lambda kw: ato_torch.flash_attention(*x[:3], causal=True, **kw), "fa_fwd")
    for joint in ("plain, joint", "plain 2 stages, joint", "dropout, joint"):
        split = joint.replace("joint", "split")
        print(f"  o ({split}) bit for bit o ({joint}): {torch.equal(outs[split], outs[joint])}", flush=True)
    report(rows)


if __name__ == "__main__":
    main()
