#!/usr/bin/env bash
# The GPU test tier of some tests (gpu_tier_sharded.sh, SHARDS shards, no heavy shard) with memcheck runs
# beside it (memcheck.sh, correctness only: time nothing beside it), then what a device command's output
# should show: the tests passed, the non-passing lines, the first failures' tracebacks, each memcheck
# summary and the cases each memcheck run finished (its "rel err" lines). SHARD_TIMEOUT (default 330) and
# MEMCHECK_TIMEOUT (default 240) as those tools take them.
# Usage (repository root, after gpu_env.sh):
#   bash benchmarks/tools/tier_with_memcheck.sh PYTEST_K SHARDS "script.py [args]"...
set -uo pipefail
k=$1
shards=$2
shift 2
(MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-240} bash benchmarks/tools/memcheck.sh "$@" > "$OUT/memcheck-summary.txt" 2>&1) &
mc=$!
SHARD_TIMEOUT=${SHARD_TIMEOUT:-330} HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "$k" "$shards" > /dev/null 2>&1
echo "passed $(grep -c PASSED "$OUT/gpu-tests-summary.txt")"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
grep -h -A30 "^E " "$OUT"/gpu-tests-shard*.txt | head -60
wait $mc
cat "$OUT/memcheck-summary.txt"
grep -c "rel err" "$OUT"/memcheck-*.txt
