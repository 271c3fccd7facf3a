"""Issue 22: the portable forward's tiles at D 64 (tuned on an H100 at B4 H64 N4096, where the
Gluon persistent forward now runs), swept at the issue's B16 H16 N1024 (8 key tiles a query
block: below D64_MIN_TILES, so the portable kernel runs there), with candidates beyond the
H100 sweep's (4 warps at 128 rows, 128-key tiles, deeper pipelines).
Usage (GPU machine, gpu_env.sh sourced): python3 this.py."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

import fa_sweep  # noqa: E402
from ato_core.ops.flash_attention.plans import Tiles  # noqa: E402

FWD = [Tiles(128, 64, 8, 3), Tiles(128, 64, 4, 3), Tiles(128, 64, 8, 4), Tiles(128, 64, 8, 2), Tiles(128, 128, 8, 2),
       Tiles(128, 128, 8, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 4), Tiles(64, 128, 4, 3), Tiles(128, 32, 4, 3),
       Tiles(128, 128, 4, 3), Tiles(256, 64, 8, 3)]

if __name__ == "__main__":
    fa_sweep.main([], shapes=[(16, 16, 1024, 64)], which=(0,), cands=(FWD, None, None))
