#!/usr/bin/env bash
# One visit to the GPU machine: install the carried wheels, run the GPU test tier,
# `ato check` and `ato bench`, with every log under $OUT. Run from the repository root,
# with .whl carried (../shared/gpu/prepare.sh array-api-compat==1.16.0 fills it).
# Usage: bash benchmarks/tools/gpu_run.sh [tests|check|bench]...   (default: all three)
# The whole GPU tier takes longer than one 10-minute device command on a cold Triton cache
# (about 7 min linear attention, 7 flash attention, 3 transformer ops): split it with
# GPU_TESTS_K, a pytest -k expression (e.g. GPU_TESTS_K=flash), and the bench with
# BENCH_OPS (e.g. BENCH_OPS="--op transformer_ops"). `ato check` on a cold cache also runs past
# 10 minutes on an H100 (12 of 51 cases in 470 s, 2026-11-21): split it with CHECK_OPS
# (e.g. CHECK_OPS="--op transformer_ops").
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests check bench)
rc=0
for step in "${steps[@]}"; do
  case $step in
    tests) python3 -m pytest -v -rs tests/test_gpu.py ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} 2>&1 | tee "$OUT/gpu-tests.txt"
           rc=$((rc | $?)) ;;
    check) python3 -m ato_cli.main check ${CHECK_OPS:-} 2>/dev/null | tee "$OUT/check.txt"; rc=$((rc | $?)) ;;
    bench) python3 -m ato_cli.main bench --out "$OUT" ${BENCH_OPS:-} 2>&1 | tee "$OUT/bench-log.txt"; rc=$((rc | $?)) ;;
    *) echo "gpu_run.sh: unknown step '$step' (expected tests, check or bench)" >&2; exit 2 ;;
  esac
done
exit $rc
