"""block_sparse_attention's forward and dq pipelining stages (settings FWD,DQ[,N]: num_stages of
bs_fwd_kernel and bs_bwd_dq_kernel, and the forward's key tile N (default 64); 64-row tiles, 4
warps) at the bench shape (B1 H32 N32768 D128
bf16, blocks of 64, random 10% mask, non-causal) and causal with the same mask, against dense
flash attention timed in the same run (us, do_bench medians). The K/V loads wait on a block-id
load: at 3 stages Triton's pipeliner keeps one buffer in one of the two key loops (ttgir
async_wait num 0), at 5 both overlap (as decode's chunk kernel). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_block_sparse_stages.py 3,2 4,2 5,2 3,3 3,4 3,2,32
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import random_block_mask
from ato_core.ops import OPS
from ato_core.ops.block_sparse import plans
from ato_core.ops.flash_attention.plans import Tiles

B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
mask = random_block_mask(B, H, N // bs, 0.1, "cuda")
kept = float(mask.float().mean())
dense = do_bench(lambda: ato_torch.flash_attention(q, k, v), return_mode="median") * 1e3
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16, blocks of {bs}, {kept:.3f} kept; "
      f"dense fwd {dense:.1f} us")
tiles = plans._bs_tiles
first = None
for setting in sys.argv[1:]:
    fs, qs, *n = map(int, setting.split(","))

    def patched(cfg, block_size, target, fs=fs, qs=qs, n=n):
        fwd, dkdv, dq = tiles(cfg, block_size, target)
        return Tiles(fwd.m, n[0] if n else fwd.n, fwd.warps, fs), dkdv, Tiles(dq.m, dq.n, dq.warps, qs)
    plans._bs_tiles = patched
    for f in (plans.block_sparse_forward_plan, plans.block_sparse_backward_plan):
        f.cache_clear()
    OPS["block_sparse_attention"].cached_forward.cache_clear()
    row = []
    for causal in (False, True):
        def fwd():
            return ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs, causal=causal)

        def fwd_bwd():
            return torch.autograd.grad(fwd(), (q, k, v), do)
        try:
            got = (fwd(), *fwd_bwd())
            if first is None or causal not in first:
                first = {**(first or {}), causal: got}
            same = all(torch.equal(a, b) for a, b in zip(got, first[causal]))
            f = do_bench(fwd, return_mode="median") * 1e3
            fb = do_bench(fwd_bwd, return_mode="median") * 1e3
            row.append(f"{'causal' if causal else 'full'}: fwd {f:7.1f} ({f / (dense * kept):.3f}x dense x kept) "
                       f"fwd+bwd {fb:8.1f} same bits {same}")
        except Exception as exc:  # noqa: BLE001
            row.append(f"failed: {type(exc).__name__}: {str(exc)[:150]}")
    print(f"{setting:6s} " + " | ".join(row), flush=True)
