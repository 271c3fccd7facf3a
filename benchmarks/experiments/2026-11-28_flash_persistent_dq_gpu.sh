#!/usr/bin/env bash
# The first device run of dQ's persistent kernel (plans.HOPPER_BWD_PERSISTENT, off), in one device
# command (about 6-8 minutes on a cold cache; give it 600 s): memcheck of the backward's cases with it
# (beside the tests: correctness only), the GPU tests that compare it bit for bit with one item a
# program (and session 47's D64 NaN-padding test, not yet run), and, after them, the A/B timing
# (2026-11-28_flash_persistent_dq.py), then the Gluon backward at D 64 against the portable one
# (2026-11-28_flash_d64_persistent.py --backward) if time is left. If the tests pass and
# it is faster where the rule picks it, set HOPPER_BWD_PERSISTENT = True (and the tile cap from the
# A/B) in plans.py, then run the hopper tier and `ato bench --op flash_attention`.
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-28_flash_persistent_dq_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
(MEMCHECK_TIMEOUT=240 bash benchmarks/tools/memcheck.sh \
   "benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py --backward --persistent-dq" \
   > "$OUT/memcheck-summary.txt" 2>&1) &
mc=$!
SHARD_TIMEOUT=240 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "persistent_dq or d64_nan" 4 > /dev/null 2>&1
echo "passed $(grep -c PASSED "$OUT/gpu-tests-summary.txt")"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
rm -f "$OUT"/gpu-tests-shard*.txt
wait $mc; cat "$OUT/memcheck-summary.txt"; grep -c "rel err" "$OUT"/memcheck-*persistent-dq*.txt
timeout 300 python3 benchmarks/experiments/2026-11-28_flash_persistent_dq.py 2>&1 | grep -v Warn | tee "$OUT/persistent_dq.txt"
timeout 200 python3 benchmarks/experiments/2026-11-28_flash_d64_persistent.py --backward 2>&1 | grep -v Warn | tee "$OUT/d64_backward.txt"
