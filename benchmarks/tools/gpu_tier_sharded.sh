#!/usr/bin/env bash
# The GPU test tier in SHARDS parallel pytest processes on one GPU (not a benchmark: the
# processes share the GPU, so run no timing beside it). On a cold Triton cache the tier is
# bound by compilation, one CPU core per process: the whole tier takes about 7 minutes in one
# process on an H100, past what fits in a device command beside anything else.
# Memory: each process keeps its own JAX and torch pools. Beside other shards the largest
# flash-attention tests ran out of the H100's 80 GB (2026-11-21, 5 shards; 2026-11-23, 4
# shards; 2026-11-28, 8 shards: 3 of 112 Hopper and block-sparse tests; 2026-11-29, H200, 10
# shards: cab_attention's special values, N 8192 float64 references, and 6 beside them): the tests that HEAVY_K
# (a pytest -k expression) selects run in shard 0 alone, after the other shards have ended (beside
# them on an H100 the N 16384 tests ran out of memory, 2026-12-07).
# Usage (repository root, .whl carried): bash benchmarks/tools/gpu_tier_sharded.sh [PYTEST_K] [SHARDS]
# SHARD_TIMEOUT (seconds, default 540) stops each shard (the heavy one runs after the others: a run may
# take twice it), so the summary is still written
# inside one device command (a stopped shard's line says so, with the tests it reported). Logs: $OUT/gpu-tests-shard<i>.txt; the summary (every test's
# result, each failure's one-line reason from pytest's short summary and, written as it happens,
# its first "E" line (kept for a shard the timeout stops), and each shard's last line) in
# $OUT/gpu-tests-summary.txt.
# Beside other correctness work (memcheck.sh) in one command, wait on this script's own pid:
#   bash benchmarks/tools/gpu_tier_sharded.sh K N & tier=$!; bash benchmarks/tools/memcheck.sh ...; wait $tier
# A `pgrep -f pytest` loop matches the device command's own shell (its line names pytest) and
# never ends: it spent a whole command's time on 2026-11-29.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
k=${1:-}
shards=${2:-4}
heavy_k=${HEAVY_K-vs_sdpa_16k or memory_linear_in_n or 4096x4096 or (every_op and cab_attention)}
collect() { python3 -m pytest -q --collect-only tests/test_gpu.py "$@" 2>/dev/null | grep '::'; }
mapfile -t all < <(collect ${k:+-k "$k"})
mapfile -t heavy < <([ -n "$heavy_k" ] && collect -k "${k:+($k) and }($heavy_k)")
mapfile -t ids < <(printf '%s\n' "${all[@]}" | grep -vxFf <(printf '%s\n' "${heavy[@]}"))
export ATO_FAILURE_LOG="$OUT/gpu-tests-failures.txt"  # each failure's reason as it happens (tests/conftest.py)
: > "$ATO_FAILURE_LOG"
echo "${#all[@]} tests in $shards shards (-k '${k}'; ${#heavy[@]} heavy ones in shard 0 alone)" > "$OUT/gpu-tests-summary.txt"
pids=()
counts=()
codes=()
for ((s = 0; s < shards; s++)); do
  mine=()
  if [ ${#heavy[@]} -gt 0 ]; then
    if [ $s -eq 0 ]; then mine=("${heavy[@]}"); else
      for ((i = s - 1; i < ${#ids[@]}; i += shards - 1)); do mine+=("${ids[i]}"); done
    fi
  else
    for ((i = s; i < ${#ids[@]}; i += shards)); do mine+=("${ids[i]}"); done
  fi
  [ ${#mine[@]} -eq 0 ] && continue
  counts[s]=${#mine[@]}
  if [ $s -eq 0 ] && [ ${#heavy[@]} -gt 0 ]; then heavy_ids=("${mine[@]}"); continue; fi
  timeout "${SHARD_TIMEOUT:-540}" python3 -m pytest -v -rsfE "${mine[@]}" > "$OUT/gpu-tests-shard$s.txt" 2>&1 &
  pids[s]=$!
done
rc=0
for s in "${!pids[@]}"; do wait "${pids[s]}"; codes[s]=$?; [ "${codes[s]}" -eq 0 ] || rc=1; done
if [ ${#heavy[@]} -gt 0 ]; then  # the heavy tests alone on the GPU
  timeout "${SHARD_TIMEOUT:-540}" python3 -m pytest -v -rsfE "${heavy_ids[@]}" > "$OUT/gpu-tests-shard0.txt" 2>&1
  codes[0]=$?
  [ "${codes[0]}" -eq 0 ] || rc=1
fi
for ((s = 0; s < shards; s++)); do
  [ -f "$OUT/gpu-tests-shard$s.txt" ] || continue
  grep -E "PASSED|FAILED|ERROR|SKIPPED" "$OUT/gpu-tests-shard$s.txt" | grep '::' >> "$OUT/gpu-tests-summary.txt"
  if [ "${codes[s]}" -eq 124 ]; then  # (its last line would be a test's, which a grep for PASSED hides)
    echo "shard $s: stopped at SHARD_TIMEOUT ${SHARD_TIMEOUT:-540} s, $(grep -cE '(PASSED|FAILED|ERROR|SKIPPED) +\[' \
      "$OUT/gpu-tests-shard$s.txt") of ${counts[s]} tests reported" >> "$OUT/gpu-tests-summary.txt"
  else
    tail -1 "$OUT/gpu-tests-shard$s.txt" | sed "s/^/shard $s: /" >> "$OUT/gpu-tests-summary.txt"
  fi
done
[ -s "$ATO_FAILURE_LOG" ] && { echo "failures (first E line):"; cat "$ATO_FAILURE_LOG"; } >> "$OUT/gpu-tests-summary.txt"
rm -f "$ATO_FAILURE_LOG"
cat "$OUT/gpu-tests-summary.txt"
exit $rc
