"""decode_attention and merge_attention_states on a few shapes (ragged lengths with 0 and
the table's capacity, odd D, every block size), each against the float64 reference: run
under compute-sanitizer (memcheck) on the GPU machine to find out-of-range accesses.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_decode_memcheck.py
"""
import torch

import ato_torch
from ato_core.ops.decode import reference

for B, Hq, Hkv, D, BS, MB, dtype in [(5, 8, 2, 128, 16, 40, torch.bfloat16), (3, 4, 1, 80, 64, 9, torch.float16),
                                     (2, 6, 3, 200, 256, 3, torch.float32), (64, 32, 8, 128, 32, 8, torch.bfloat16)]:
    g = torch.Generator(device="cuda").manual_seed(B)
    NB = B * MB + 1
    q = torch.randn(B, Hq, D, device="cuda", generator=g).to(dtype)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    table = torch.randperm(NB, device="cuda", generator=g)[:B * MB].reshape(B, MB).to(torch.int32)
    lens = torch.randint(0, MB * BS + 1, (B,), device="cuda", generator=g, dtype=torch.int32)
    lens[0], lens[-1] = 0, MB * BS
    o, lse = ato_torch.decode_attention(q, kc, vc, table, lens, return_lse=True)
    ro, rl = reference.decode_attention(*(t.double().cpu() for t in (q, kc, vc)), table.cpu(), lens.cpu(),
                                        return_lse=True)
    err = float((o.double().cpu() - ro).norm() / ro.norm())
    fin = torch.isfinite(rl)
    lerr = float((lse.double().cpu()[fin] - rl[fin]).abs().max())
    om, lm = ato_torch.merge_attention_states(o, lse, o, lse)
    merr = float((om.double() - o.double()).abs().max())
    print(f"B{B} Hq{Hq} Hkv{Hkv} D{D} bs{BS} max_blocks{MB} {dtype}: o rel err {err:.1e}, lse max abs err {lerr:.1e}, "
          f"empty rows -inf {bool(torch.isneginf(lse[0]).all())}, merge(x, x) - x {merr:.1e}", flush=True)

# shared-prefix batches through the schedule (chunk-first kernel): B sequences share 40 blocks,
# 4 of them 8 more (a tree), ragged private tails; B16 Hkv2 splits the private tokens (combine
# kernel), B64 Hkv8 does not (the split kernel merges)
for B, Hkv in ((16, 2), (64, 8)):
    Hq, D, BS = 4 * Hkv, 128, 16
    g = torch.Generator(device="cuda").manual_seed(1)
    NB = 48 + B * 10
    ids = torch.randperm(NB, device="cuda", generator=g).to(torch.int32)
    rows = [torch.cat([ids[:40], ids[40:48] if b < 4 else ids[48 + b * 10:48 + b * 10 + 8],
                       ids[48 + b * 10 + 8:48 + b * 10 + 10]]) for b in range(B)]
    table = torch.stack(rows)
    lens = torch.randint(40 * BS + 1, 50 * BS, (B,), device="cuda", generator=g, dtype=torch.int32)
    q = torch.randn(B, Hq, D, device="cuda", generator=g).to(torch.bfloat16)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    sched = ato_torch.decode_schedule(table, lens, block_size=BS)
    o1, l1 = ato_torch.decode_attention(q, kc, vc, table, lens, return_lse=True)
    o2, l2 = ato_torch.decode_attention(q, kc, vc, table, lens, return_lse=True, schedule=sched)
    print(f"B{B} Hkv{Hkv} schedule ({sched.work.shape[0]} work items): o vs seq-first "
          f"{float((o2.float() - o1.float()).norm() / o1.float().norm()):.1e}, lse {float((l2 - l1).abs().max()):.1e}",
          flush=True)
