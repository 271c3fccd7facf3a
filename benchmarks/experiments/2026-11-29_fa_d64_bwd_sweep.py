"""Issue 22: the portable backward's tiles at D 64 (tuned on an H100 at B4 H64 N4096 only),
swept on this GPU at that shape and at the issue's B16 H16 N1024, with candidates the H100
sweep did not try (128-key dK / dV blocks, deeper pipelines, 64-query dQ blocks at 8 warps).
Usage (GPU machine, gpu_env.sh sourced): python3 this.py."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

import fa_sweep  # noqa: E402
from ato_core.ops.flash_attention.plans import Tiles  # noqa: E402

DKDV = [Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 4), Tiles(64, 64, 4, 2), Tiles(32, 64, 4, 3), Tiles(64, 128, 8, 3),
        Tiles(128, 64, 8, 3), Tiles(128, 128, 8, 2), Tiles(32, 128, 4, 3), Tiles(64, 64, 8, 3), Tiles(128, 64, 4, 3)]
DQ = [Tiles(128, 32, 8, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 4), Tiles(128, 64, 8, 3), Tiles(64, 32, 4, 3),
      Tiles(128, 32, 4, 4), Tiles(64, 64, 8, 3), Tiles(128, 128, 8, 2)]

if __name__ == "__main__":
    fa_sweep.main([], shapes=[(16, 16, 1024, 64), (4, 64, 4096, 64)], which=(1, 2), cands=(None, DKDV, DQ))
