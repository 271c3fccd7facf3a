#!/usr/bin/env bash
# One diagnostic visit to the GPU machine: bash benchmarks/diagnose_run.sh COMMAND [ARGS...]
# runs python benchmarks/diagnose.py COMMAND ARGS (see its docstring), log in $OUT/diagnose.txt.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
timeout 540 python3 benchmarks/diagnose.py "$@" 2>&1 | grep -v Warn | tee "$OUT/diagnose.txt"
