#!/usr/bin/env bash
# The first device run of attention dropout on the Gluon backward (plans.HOPPER_DROPOUT_BACKWARD), one
# device command (give it 600 s): the GPU tests -k dropout (the Gluon dK / dV and dQ against the float64
# reference with its mask, torch == JAX) beside memcheck --backward --dropout (dQ one item a program, and
# --persistent-dq), then the timing (2026-11-29_flash_dropout_backward_time.py).
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-29_flash_dropout_backward_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
mem=benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py
SHARD_TIMEOUT=300 bash benchmarks/tools/tier_with_memcheck.sh "dropout" 6 "$mem --backward --dropout" \
   "$mem --backward --dropout --persistent-dq"
timeout 150 python3 benchmarks/experiments/2026-11-29_flash_dropout_backward_time.py 2>&1 | grep -v Warn \
   | tee "$OUT/dropout_backward.txt"
