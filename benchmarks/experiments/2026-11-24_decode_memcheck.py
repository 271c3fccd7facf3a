"""decode_attention and merge_attention_states on a few shapes (ragged lengths with 0 and
the table's capacity, odd D, every block size), each against the float64 reference: run
under compute-sanitizer (memcheck) on the GPU machine to find out-of-range accesses.

    compute-sanitizer --tool memcheck python benchmarks/experiments/2026-11-24_decode_memcheck.py
"""
import numpy as np
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
