"""decode_attention with the shared-prefix schedule (bench batch: B64 sharing 4096 tokens, 256
private each, Hq32 Hkv8 D128 bs16 bf16), A/B in one process: OLD (the tree before: chunk kernel
at 3 stages, the split kernel's merge of chunk partials a runtime loop) at 3 and at 5 chunk
stages, against NEW at 5 (session 29's NEW also unrolled the split kernel's merge over BDEPTH units: split
39.4 -> 44.7 us, reverted). Per-kernel device time and do_bench medians (us) in 3 alternating
rounds; o and lse bit for bit against OLD's. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_decode_shared_ab.py .ab_old .
(.ab_old: a copy of the tree before, git archive b5e9efa.)
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {}
for name, path, stages in (("old3", sys.argv[1], 3), ("old5", sys.argv[1], 5), ("new5", sys.argv[2], 5)):
    ato, bench = ab.load(path, "ato_torch", "ato_cli.bench")
    plans = sys.modules["ato_core.ops.decode.plans"]
    forms[name] = (ato, bench, plans, stages)

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = forms["new5"][1].shared_prefix_batch()
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; us")
ref, times = None, {name: [] for name in forms}
for r in range(3):
    for name in (list(forms) if r % 2 == 0 else list(reversed(list(forms)))):
        ato, bench, plans, stages = forms[name]
        plans.CHUNK_TILES["gpu"] = (*plans.CHUNK_TILES["gpu"][:3], stages)
        plans.decode_plan.cache_clear()
        sys.modules["ato_core.ops"].OPS["decode_attention"].cached_forward.cache_clear()
        s = ato.decode_schedule(table, lens, block_size=BS)

        def run():
            return ato.decode_attention(q, kc, vc, table, lens, schedule=s, return_lse=True)
        got = run()
        ref = ref or got
        same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, ref))
        per = bench.device_kernels(run, lambda out: torch.cuda.synchronize())
        kernels = ", ".join(f"{n.replace('decode_', '').replace('_kernel', '')} {us:.1f}"
                            for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))
        times[name].append(do_bench(run, warmup=10, rep=100, return_mode="median") * 1e3)
        print(f"  round {r} {name}: {times[name][-1]:6.1f} | {kernels} | o, lse bitwise vs old3: {same}", flush=True)
for name, ts in times.items():
    print(f"{name}: " + " / ".join(f"{t:6.1f}" for t in ts))
