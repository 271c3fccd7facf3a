"""decode_attention's pipelining depth (num_stages) on an H100. The K/V row gathers depend on a
block-id load, and at the plans' stages (chunk 3, split 2) Triton's pipeliner keeps one buffer and
waits for every copy at the top of each tile (async_wait num=0): no load overlaps the dots. From 5
stages it double-buffers K and V. Part 1: seq-first without sharing (B64, B8, B1; bs16; against
SDPA on contiguous keys) at split stages given by --split; part 2: the shared-prefix batch at
settings "CHUNK_STAGES,SPLIT_STAGES[,SPLIT_TOKENS]", each with a per-kernel breakdown.
Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-26_decode_stages.py --split 2,5 3,2 5,2 5,5
"""
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels, shared_prefix_batch
from ato_core.ops import OPS
from ato_core.ops.decode import DecodeSchedule, decode_schedule, plans


def bench(fn):
    return do_bench(fn, warmup=10, rep=100, return_mode="median") * 1e3


def clear():
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()


args = sys.argv[1:]
split_stages = [2]
if args[:1] == ["--split"]:
    split_stages, args = [int(s) for s in args[1].split(",")], args[2:]
print(f"GPU {torch.cuda.get_device_name()}")
Hq, Hkv, D, N, BS = 32, 8, 128, 8192, 16
for B in (64, 8, 1):
    g = torch.Generator(device="cuda").manual_seed(B)
    NB = B * N // BS
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    table = torch.randperm(NB, device="cuda", generator=g).reshape(B, N // BS).to(torch.int32)
    lens = torch.full((B,), N, device="cuda", dtype=torch.int32)
    k, v = (c[table.long()].reshape(B, N, Hkv, D).transpose(1, 2).contiguous() for c in (kc, vc))
    sdpa = bench(lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True))
    ref = F.scaled_dot_product_attention(q[:, :, None].float(), k.float(), v.float(), enable_gqa=True)[:, :, 0]
    k = v = None
    line = f"no sharing B{B} N{N} bs{BS}: SDPA {sdpa:7.1f} us"
    for st in split_stages:
        plans.STAGES = st
        clear()
        err = float((ato_torch.decode_attention(q, kc, vc, table, lens).float() - ref).norm() / ref.norm())
        ms = bench(lambda: ato_torch.decode_attention(q, kc, vc, table, lens))
        line += f" | split stages {st}: {ms:7.1f} us ({ms / sdpa:.2f}x SDPA, rel L2 {err:.1e})"
    print(line, flush=True)
    del kc, vc, ref
    torch.cuda.empty_cache()
plans.STAGES = 2

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
clear()
ref = ato_torch.decode_attention(q, kc, vc, table, lens).float()
seq = bench(lambda: ato_torch.decode_attention(q, kc, vc, table, lens))
print(f"shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS}: seq-first {seq:.1f} us (split stages 2)")
s = decode_schedule(table.cpu().numpy(), lens.cpu().numpy(), block_size=BS)
s = DecodeSchedule(*(torch.from_numpy(a).cuda() for a in s))
default = plans.CHUNK_TILES["gpu"]
for setting in args:
    cst, sst, *tokens = map(int, setting.split(","))
    plans.CHUNK_TILES["gpu"] = (*default[:3], cst)
    plans.STAGES = sst
    plans.TOKENS = tokens[0] if tokens else 64
    clear()

    def run():
        return ato_torch.decode_attention(q, kc, vc, table, lens, schedule=s)
    try:
        err = ((run().float() - ref).abs().max() / ref.abs().max()).item()
        us = bench(run)
    except Exception as e:  # noqa: BLE001  (a setting that does not compile)
        print(f"{setting:16s} | failed: {type(e).__name__}: {str(e)[:100]}", flush=True)
        continue
    print(f"{setting:16s} | {us:7.1f} us ({seq / us:.2f}x seq-first), max rel err vs seq-first {err:.1e}", flush=True)
    per = device_kernels(run, lambda out: torch.cuda.synchronize())
    for name, (calls, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"    {name[:40]:40s} {calls:4.1f} launches {t:8.1f} us", flush=True)
