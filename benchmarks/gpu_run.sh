#!/usr/bin/env bash
# One visit to the GPU machine: install the carried wheels, run the GPU test tier,
# `ato check` and `ato bench`, with every log under $OUT. Run from the repository root,
# with .whl carried (../shared/gpu/prepare.sh array-api-compat==1.16.0 fills it).
# Usage: bash benchmarks/gpu_run.sh [tests|check|bench]...   (default: all three)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt"
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests check bench)
rc=0
for step in "${steps[@]}"; do
  case $step in
    tests) python3 -m pytest -q -rs tests/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.txt"; rc=$((rc | $?)) ;;
    check) python3 -m ato_cli.main check 2>/dev/null | tee "$OUT/check.txt"; rc=$((rc | $?)) ;;
    bench) python3 -m ato_cli.main bench --out "$OUT" 2>&1 | tee "$OUT/bench-log.txt"; rc=$((rc | $?)) ;;
  esac
done
exit $rc
