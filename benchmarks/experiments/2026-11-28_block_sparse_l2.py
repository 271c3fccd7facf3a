"""Where block_sparse_attention's time goes at the bench shape (B1 H32 N32768 D128 bf16, blocks of
64, 10% kept at random), against dense flash_attention: per-kernel device time of fwd and
fwd+bwd, each kernel's TFLOP/s and the bytes of K/V (forward, dQ) or Q/dO (dK/dV) tiles it
reads from L2 (two 64-row tiles a kept pair; the dense kernels' 128-row tiles read half that).
With NCU=1, two calls of each (what Nsight Compute profiles; results: block_sparse-sweep.txt
37). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-28_block_sparse_l2.py
    NCU=1 ncu --kernel-name regex:"bs_fwd|bs_bwd|hopper" --launch-skip 3 --launch-count 9 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        python3 benchmarks/experiments/2026-11-28_block_sparse_l2.py
"""
import os

import torch

import ato_torch
from ato_cli.bench import device_kernels, random_block_mask

B, H, N, D, bs = 1, 32, 32768, 128, 64
M = N // bs
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
mask = random_block_mask(B, H, M, 0.1, "cuda")
pairs = int(mask.sum())


def sparse():
    return ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs)


def dense():
    return ato_torch.flash_attention(q, k, v)


def fwd_bwd(fn):
    def run():
        o = fn()
        return torch.autograd.grad(o, (q, k, v), do)
    return run


if os.environ.get("NCU"):
    for fn in (sparse, dense):
        for _ in range(2):
            fwd_bwd(fn)()
    torch.cuda.synchronize()
else:
    tile_flops = 4 * bs * bs * D  # QK^T and PV of a kept (64-row, 64-key) pair
    tile_bytes = 2 * bs * D * 2  # its two 64-row bf16 tiles from L2
    print(f"GPU {torch.cuda.get_device_name()}; {pairs} kept pairs of {B * H * M * M} "
          f"({pairs / (B * H * M * M):.3f}); per pair {tile_flops / 1e6:.2f} MFLOP (forward), "
          f"{tile_bytes / 1024:.0f} KiB")
    sync = lambda out: torch.cuda.synchronize()  # noqa: E731
    for name, fn, n_pairs in (("block_sparse", sparse, pairs), ("dense", dense, B * H * M * M)):
        for what, f, mult in (("fwd", fn, 1.0), ("fwd+bwd", fwd_bwd(fn), 3.5)):
            per = device_kernels(f, sync, calls=5)
            total = sum(us for _, us in per.values())
            print(f"{name} {what}: {total:8.1f} us device, {mult * n_pairs * tile_flops / total / 1e6:6.1f} TFLOP/s")
            for kname, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                extra = ""
                if kname.startswith(("bs_fwd", "bs_bwd_dq", "fa_fwd")):
                    extra = f"  {n_pairs * tile_bytes / us / 1e6:5.2f} TB/s of 64-row K/V tiles"
                elif kname.startswith(("bs_bwd_dkdv", "fa_bwd_dkdv")):
                    extra = f"  {n_pairs * tile_bytes / us / 1e6:5.2f} TB/s of 64-row Q/dO tiles"
                print(f"    {kname[:40]:40s} x{calls:.0f} {us:9.1f} us{extra}")
