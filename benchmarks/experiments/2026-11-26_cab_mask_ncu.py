"""curvature_block_mask at the bench shape (B1 H32 N32768 D128 bf16, blocks of 64, keep 0.1,
causal), called three times: the script Nsight Compute profiles for where the select and
An @ An kernels' time goes (results: block_sparse-sweep.txt 29). Not a test. On the GPU machine:
    ncu --kernel-name regex:"cab_(select|curvature)_kernel" --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section SourceCounters \\
        --section WarpStateStats --section InstructionStats --import-source yes \\
        --export $OUT/cab -f python3 benchmarks/experiments/2026-11-26_cab_mask_ncu.py
    ncu --import $OUT/cab.ncu-rep --page source --csv --print-source sass > $OUT/cab.csv
    python3 benchmarks/tools/ncu_sass.py $OUT/cab.csv 12
"""
import torch

import ato_torch

g = torch.Generator(device="cuda").manual_seed(1)
q, k = (torch.randn(1, 32, 32768, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
for _ in range(3):
    mask = ato_torch.curvature_block_mask(q, k, block_size=64, keep=0.1)
torch.cuda.synchronize()
print("kept", float(mask.float().mean()))
