"""decode_attention with a shared-prefix schedule: B 64 sequences sharing a 4096-token prefix,
256 private tokens each (bf16, Hq32 Hkv8 D128, block size 16), for several chunk_tokens of
decode_schedule and CHUNK_ROWS of plans.py ("CHUNK_TOKENS,CHUNK_ROWS"), against the seq-first
path; the first setting also gets a per-kernel breakdown (device time). Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_decode_shared_sweep.py 256,64 128,64 64,64
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import shared_prefix_batch
from ato_core.ops.decode import DecodeSchedule, decode_schedule, plans

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
seq = do_bench(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), warmup=10, rep=100, return_mode="median")
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS}: "
      f"seq-first {seq * 1e3:.1f} us")
for setting in sys.argv[1:]:
    chunk, rows = map(int, setting.split(","))
    plans.CHUNK_ROWS = rows
    plans.decode_plan.cache_clear()
    from ato_core.ops import OPS
    OPS["decode_attention"].cached_forward.cache_clear()
    s = decode_schedule(table.cpu().numpy(), lens.cpu().numpy(), block_size=BS, chunk_tokens=chunk)
    s = DecodeSchedule(*(torch.from_numpy(a).cuda() for a in s))
    ms = do_bench(lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=s), warmup=10, rep=100,
                  return_mode="median")
    print(f"{setting:10s} | {ms * 1e3:7.1f} us ({seq / ms:.1f}x seq-first), work items {s.work.shape[0]}", flush=True)
    if setting == sys.argv[1]:
        from ato_cli.bench import device_kernels
        per = device_kernels(lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=s),
                             lambda out: torch.cuda.synchronize())
        for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"    {name[:40]:40s} {calls:4.1f} launches {us:8.1f} us", flush=True)
