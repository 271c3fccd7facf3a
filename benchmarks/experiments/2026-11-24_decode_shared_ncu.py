"""Two calls of decode_attention with the shared-prefix schedule (bench shape: B64 sharing a
4096-token prefix, 256 private tokens, Hq32 Hkv8 D128 bs16 bf16), for Nsight Compute to
profile the second. Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:

    ncu --kernel-name regex:"decode_(chunk|split)_kernel" --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \\
        --section MemoryWorkloadAnalysis python benchmarks/experiments/2026-11-24_decode_shared_ncu.py
"""
import torch

import ato_torch
from ato_cli.bench import shared_prefix_batch

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
sched = ato_torch.decode_schedule(table, lens, block_size=BS)
for _ in range(2):
    ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched)
torch.cuda.synchronize()
