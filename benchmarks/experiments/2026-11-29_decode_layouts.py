"""decode_attention with its caches in the two layouts it reads, "bnhd" [num_blocks, block_size,
Hkv, D] (the bench's: one kv head's rows 256 B apart every Hkv * D * 2 bytes) and "bhnd"
[num_blocks, Hkv, block_size, D] (one kv head's block contiguous), the same keys: does the
strided read of one head's rows cost the no-sharing rows their last percent against SDPA?
--sequential: each sequence's blocks in order in the cache instead of scattered (do scattered
blocks cost it?). Per-kernel device time (CUPTI, us), SDPA on the keys laid out contiguously in
the same run, 2 rounds. Not a test. On the GPU machine:
python3 benchmarks/experiments/2026-11-29_decode_layouts.py [--sequential]
"""
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

import ato_torch  # noqa: E402
from ato_cli import bench  # noqa: E402
from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule  # noqa: E402


def device_us(fn):
    per = bench.device_kernels(fn, lambda out: torch.cuda.synchronize(), calls=50)
    return bench._device_ms(per) * 1e3


print(f"GPU {torch.cuda.get_device_name()}; Hq32 Hkv8 D128 bf16; device us")
batches = [(f"B64 N8192 bs{bs}", bench.paged_batch(64, bs), None) for bs in (16, 64)]
if "--sequential" in sys.argv:  # the blocks of each sequence in order in the cache: no scattered blocks
    batches = []
    for bs in (16, 64):
        q, kc, vc, table, lens = bench.paged_batch(64, bs)
        table = torch.arange(table.numel(), device="cuda", dtype=torch.int32).reshape(table.shape)
        batches.append((f"B64 N8192 bs{bs} in order", (q, kc, vc, table, lens), None))
else:
    batches.append(("tails B64 N256 bs16", bench.paged_batch(64, 16, N=256), None))
    (B, Hq, Hkv, D, BS, P, T), shared = bench.shared_prefix_batch()
    batches.append(("shared P4096+256 bs16", shared, DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in
                                                                   decode_schedule(shared[3].cpu().numpy(),
                                                                                   shared[4].cpu().numpy(),
                                                                                   block_size=BS)))))
for r in range(2):
    for name, (q, kc, vc, table, lens), sched in batches:
        kh, vh = (c.transpose(1, 2).contiguous() for c in (kc, vc))
        o = ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched)
        oh = ato_torch.decode_attention(q, kh, vh, table, lens, schedule=sched, layout="bhnd")
        cells = []
        for layout, kk, vv in (("bnhd", kc, vc), ("bhnd", kh, vh)):
            us = device_us(lambda: ato_torch.decode_attention(q, kk, vv, table, lens, schedule=sched, layout=layout))
            cells.append(f"{layout} {us:6.1f}")
        if sched is None:
            b, n = table.shape[0], table.shape[1] * kc.shape[1]
            k, v = (c[table.long()].reshape(b, n, 8, 128).transpose(1, 2).contiguous() for c in (kc, vc))
            us = device_us(lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True))
            cells.append(f"SDPA contiguous {us:6.1f}")
            k = v = None
        cells.append(f"o bhnd vs bnhd {float((oh.float() - o.float()).abs().max()):.0e}")
        print(f"round {r} {name:24s} " + " | ".join(cells), flush=True)
