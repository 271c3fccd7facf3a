"""decode_attention in one launch (chunk-first and seq-first programs in decode_kernel, each
row merged by its last program) against the tree before (chunk kernel, split kernel with the
merge, combine kernel), A/B in one process: the shared-prefix bench batch (B64 sharing 4096
tokens, 256 private each) under chunk tile settings "M,BN,WARPS,STAGES", and the no-sharing
bench batches B1 / B8 / B64 (8192 tokens, bs16) with SDPA on the same keys contiguous.
Per-kernel device time and do_bench medians (us), 3 alternating rounds; o against OLD's
(relative L2). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_decode_one_launch.py .ab_old . 128,64,8,5 64,32,4,3
"""
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {}
for name, path in (("old", sys.argv[1]), ("new", sys.argv[2])):
    ato, bench = ab.load(path, "ato_torch", "ato_cli.bench")
    forms[name] = (ato, bench, sys.modules["ato_core.ops.decode.plans"], sys.modules["ato_core.ops"].OPS)
configs = [tuple(map(int, c.split(","))) for c in sys.argv[3:]] or [None]


def use(name, cfg=None):
    ato, bench, plans, ops = forms[name]
    if cfg is not None:
        plans.CHUNK_TILES["gpu"] = cfg
    plans.decode_plan.cache_clear()
    ops["decode_attention"].cached_forward.cache_clear()
    return ato, bench


def kernels(bench, run):
    per = bench.device_kernels(run, lambda out: torch.cuda.synchronize())
    total = sum(us for _, us in per.values())
    return total, ", ".join(f"{n.replace('decode_', '').replace('_kernel', '')} {us:.1f}"
                            for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


print(f"GPU {torch.cuda.get_device_name()}")
(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = forms["new"][1].shared_prefix_batch()
print(f"## shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16 (us)")
variants = [("old", None)] + [("new", c) for c in configs]
ref, times = None, {v: [] for v in variants}
for r in range(3):
    for v in (variants if r % 2 == 0 else variants[::-1]):
        ato, bench = use(*v)
        s = ato.decode_schedule(table, lens, block_size=BS)

        def run():
            return ato.decode_attention(q, kc, vc, table, lens, schedule=s, return_lse=True)
        got = run()
        ref = ref if ref is not None else got
        total, ks = kernels(bench, run)
        times[v].append(do_bench(run, warmup=10, rep=100, return_mode="median") * 1e3)
        print(f"  round {r} {v[0]} {v[1]}: {times[v][-1]:6.1f} | device {total:5.1f}: {ks} | o vs old "
              f"{rel(got[0], ref[0]):.1e}, lse {rel(got[1], ref[1]):.1e}", flush=True)
for v, ts in times.items():
    print(f"{v[0]} {v[1]}: " + " / ".join(f"{t:6.1f}" for t in ts))
kc = vc = None  # the shared batch's caches freed
torch.cuda.empty_cache()

N = 8192
for B in (1, 8, 64):
    g = torch.Generator(device="cuda").manual_seed(B + BS)
    NB = B * N // BS
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    table = torch.randperm(NB, device="cuda", generator=g).reshape(B, N // BS).to(torch.int32)
    lens = torch.full((B,), N, device="cuda", dtype=torch.int32)
    k, v = (c[table.long()].reshape(B, N, Hkv, D).transpose(1, 2).contiguous() for c in (kc, vc))
    print(f"## no sharing B{B} N{N} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16 (us)")
    fns = {"sdpa": lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)}
    outs = {}
    for name in ("old", "new"):
        ato, bench = use(name, configs[0] if name == "new" else None)
        fns[name] = (lambda a: lambda: a.decode_attention(q, kc, vc, table, lens))(ato)
        outs[name] = fns[name]()
        total, ks = kernels(bench, fns[name])
        print(f"  {name}: device {total:5.1f}: {ks}")
    print(f"  o new vs old {rel(outs['new'], outs['old']):.1e}")
    res = ab.alternate(fns, 5, lambda f: do_bench(f, warmup=10, rep=100, return_mode="median") * 1e3)
    for name, ts in res.items():
        print(f"  {name}: " + " / ".join(f"{t:6.1f}" for t in ts) + f"  (min {min(ts):.1f})", flush=True)
    k = v = kc = vc = None
    torch.cuda.empty_cache()
