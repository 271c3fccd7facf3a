"""decode_attention with its K/V gathers loaded evict_first (VAR: each cache row is read by one
program) against without (BASE), A/B in one process, beside SDPA on the same keys laid out
contiguously: no sharing (B64 bs16 and bs64, B8, B1; Hq32 Hkv8 N8192 D128 bf16, the bench's
caches) and the shared-prefix batch with its schedule. do_bench medians (us) in 3 alternating
rounds; o bit for bit VAR against BASE. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_decode_evict.py BASE VAR
"""
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch", "ato_cli.bench") for name, path in (("base", sys.argv[1]),
                                                                              ("var", sys.argv[2]))}
dev, Hq, Hkv, D, N = "cuda", 32, 8, 128, 8192
print(f"GPU {torch.cuda.get_device_name()}; us")


def timed(label, calls, nbytes=None):
    outs = {f: c() for f, c in calls.items()}
    same = torch.equal(outs["base"], outs["var"]) if "var" in outs else ""
    times = {f: [] for f in calls}
    for r in range(3):
        for f in (list(calls) if r % 2 == 0 else list(reversed(list(calls)))):
            times[f].append(do_bench(calls[f], warmup=25, rep=200, return_mode="median") * 1e3)
    print(f"  {label}: var == base {same}")
    for f, ts in times.items():
        rate = f"  {nbytes / min(ts) / 1e3:.0f} GB/s" if nbytes else ""
        print(f"    {f:6s} " + " ".join(f"{t:7.1f}" for t in ts) + rate, flush=True)


for B, BS in ((64, 16), (64, 64), (8, 16), (1, 16)):
    q, kc, vc, table, lens = forms["var"][1].paged_batch(B, BS, Hq, Hkv, D, N)
    k, v = (c[table.long()].reshape(B, N, Hkv, D).transpose(1, 2).contiguous() for c in (kc, vc))
    calls = {f: (lambda ato=forms[f][0]: ato.decode_attention(q, kc, vc, table, lens)) for f in forms}
    calls["sdpa"] = lambda k=k, v=v: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]
    timed(f"B{B} bs{BS} no sharing", calls, 2 * B * N * Hkv * D * 2)
    del k, v, kc, vc
    torch.cuda.empty_cache()
(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = forms["var"][1].shared_prefix_batch()
calls = {}
for f in forms:
    ato = forms[f][0]
    sched = ato.decode_schedule(table, lens, block_size=BS)
    calls[f] = (lambda ato=ato, sched=sched: ato.decode_attention(q, kc, vc, table, lens, schedule=sched))
timed(f"shared prefix B{B} P{P}+{T}", calls)
