#!/usr/bin/env bash
# The whole CPU tier, the slow tier too (ATO_SLOW_TESTS=1), on the GPU machine's 16 cores with its
# GPU hidden: about 4 minutes there against ~28 on a 2-core machine. The interpreter runs
# under the GPU machine's Triton (3.6). .whl must also hold the test extras that machine lacks:
#   bash ../shared/gpu/prepare.sh array-api-compat==1.16.0 pytest-xdist execnet hypothesis sortedcontainers attrs
# Usage (repository root, .whl carried): bash benchmarks/tools/cpu_tier_on_gpu_machine.sh [PYTEST ARGS]
# Output: $OUT/cpu-tier.txt (per-test durations at its end).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
export CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu ATO_SLOW_TESTS=1
python3 -m pytest -n 16 -q -p no:cacheprovider -rs --durations=30 --deselect tests/test_gpu.py tests "$@" \
    > "$OUT/cpu-tier.txt" 2>&1
rc=$?
tail -3 "$OUT/cpu-tier.txt"
exit $rc
