"""decode_attention with a shared-prefix schedule (B 64 sequences sharing a 4096-token prefix,
256 private tokens each, bf16, Hq32 Hkv8 D128, block size 16): chunk_tokens of decode_schedule
against the chunk kernel's tile and programs per SM of plans.py. Settings
"CHUNK_TOKENS,M,BN,WARPS,STAGES,PROGRAMS_PER_SM[,TOKENS,SPLIT_WARPS]" (the last two: the
split kernel's token tile and warps); each is checked against the seq-first path and
timed; the best gets a per-kernel breakdown (device time). Not a test. On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-24_decode_shared_tiles.py 512,128,64,8,3,2 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels, shared_prefix_batch
from ato_core.ops import OPS
from ato_core.ops.decode import DecodeSchedule, decode_schedule, plans

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
ref = ato_torch.decode_attention(q, kc, vc, table, lens).float()
seq = do_bench(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), warmup=10, rep=100, return_mode="median")
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS}: "
      f"seq-first {seq * 1e3:.1f} us")
best = None
for setting in sys.argv[1:]:
    chunk, M, BN, warps, stages, ppsm, *split = map(int, setting.split(","))
    plans.TOKENS, plans.WARPS = split or (64, 4)
    plans.CHUNK_TILES["gpu"] = (M, BN, warps, stages)
    plans.CHUNK_PROGRAMS_PER_SM = ppsm
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()
    s = decode_schedule(table.cpu().numpy(), lens.cpu().numpy(), block_size=BS, chunk_tokens=chunk)
    s = DecodeSchedule(*(torch.from_numpy(a).cuda() for a in s))

    def run():
        return ato_torch.decode_attention(q, kc, vc, table, lens, schedule=s)
    try:
        err = ((run().float() - ref).abs().max() / ref.abs().max()).item()
        ms = do_bench(run, warmup=10, rep=100, return_mode="median")
    except Exception as e:  # noqa: BLE001  (a tile that does not compile)
        print(f"{setting:22s} | failed: {type(e).__name__}: {str(e)[:100]}", flush=True)
        continue
    print(f"{setting:22s} | {ms * 1e3:7.1f} us ({seq / ms:.2f}x seq-first), work items {s.work.shape[0]}, "
          f"max rel err vs seq-first {err:.1e}", flush=True)
    if best is None or ms < best[0]:
        best = (ms, setting, run)
if best is not None:
    print(f"best {best[1]}: per kernel (device time)")
    per = device_kernels(best[2], lambda out: torch.cuda.synchronize())
    for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"    {name[:40]:40s} {calls:4.1f} launches {us:8.1f} us", flush=True)
