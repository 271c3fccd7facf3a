"""FlexAttention (torch.compile) on the block_sparse bench shape (B1 H32 N32768 D128 bf16, blocks
of 64, 10% kept): which kernel_options compile with a 64-token block mask, and their times,
forward and forward+backward. Not a test. On the GPU machine, after ``source
benchmarks/tools/gpu_env.sh``: python benchmarks/experiments/2026-11-24_flex_options.py
"""
import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from triton.testing import do_bench

from ato_cli.bench import random_block_mask

B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
mask = random_block_mask(B, H, N // bs, 0.1, "cuda")
order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
bm = BlockMask.from_kv_blocks(mask.sum(-1).to(torch.int32), order, BLOCK_SIZE=bs)
flex = torch.compile(flex_attention)
OPTIONS = [{"BLOCK_M": 64, "BLOCK_N": 64},
           {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32},
           {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "BLOCK_M1": 32, "BLOCK_N1": 64,
            "BLOCK_M2": 64, "BLOCK_N2": 32}]
for opts in OPTIONS:
    for what in ("fwd", "fwd+bwd"):
        try:
            if what == "fwd":
                ms = do_bench(lambda: flex(q, k, v, block_mask=bm, kernel_options=opts), return_mode="median")
            else:
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                ms = do_bench(lambda: flex(*leaves, block_mask=bm, kernel_options=opts).backward(do),
                              return_mode="median")
            print(f"{what:8s} {opts}: {ms * 1e3:.1f} us", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"{what:8s} {opts}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}", flush=True)
