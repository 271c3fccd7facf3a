#!/usr/bin/env bash
# The first device run of attention dropout on the Gluon backward (plans.HOPPER_DROPOUT_BACKWARD), one
# device command (give it 600 s): the GPU tests -k dropout (the Gluon dK / dV and dQ against the float64
# reference with its mask, torch == JAX) beside memcheck --backward --dropout (dQ one item a program, and
# --persistent-dq), then the timing (2026-11-29_flash_dropout_backward_time.py).
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-29_flash_dropout_backward_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
mem=benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py
(MEMCHECK_TIMEOUT=240 bash benchmarks/tools/memcheck.sh "$mem --backward --dropout" \
   "$mem --backward --dropout --persistent-dq" > "$OUT/memcheck-summary.txt" 2>&1) &
mc=$!
SHARD_TIMEOUT=300 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "dropout" 6 > /dev/null 2>&1
echo "passed $(grep -c PASSED "$OUT/gpu-tests-summary.txt")"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
grep -h -A30 "^E " "$OUT"/gpu-tests-shard*.txt | head -60
wait $mc; cat "$OUT/memcheck-summary.txt"; grep -c "rel err" "$OUT"/memcheck-*.txt
timeout 150 python3 benchmarks/experiments/2026-11-29_flash_dropout_backward_time.py 2>&1 | grep -v Warn \
   | tee "$OUT/dropout_backward.txt"
