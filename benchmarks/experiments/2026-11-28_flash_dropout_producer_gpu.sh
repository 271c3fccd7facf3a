#!/usr/bin/env bash
# The first device run of dropout on the Gluon forward with its mask drawn by the producer
# (plans.HOPPER_DROPOUT, off; hopper._draw_masks), persistent and one item a program, one device command
# (about 7 minutes on a cold cache; give it 600 s): its GPU tests (12: the reference's mask, torch == JAX bit
# for bit, each form), memcheck
# of every case with dropout, then the timing against plain causal and the portable dropout
# (2026-11-28_flash_dropout_producer_time.py). If the tests pass and it is faster than the portable
# dropout, set HOPPER_DROPOUT = True and run `ato bench --op flash_options`.
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-28_flash_dropout_producer_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
(MEMCHECK_TIMEOUT=240 bash benchmarks/tools/memcheck.sh \
   "benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py --dropout" > "$OUT/memcheck-summary.txt" 2>&1) &
mc=$!
SHARD_TIMEOUT=240 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "hopper_dropout" 4 > /dev/null 2>&1
echo "passed $(grep -c PASSED "$OUT/gpu-tests-summary.txt")"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
grep -h -A30 "^E " "$OUT"/gpu-tests-shard*.txt | head -60
wait $mc; cat "$OUT/memcheck-summary.txt"; grep -c "rel err" "$OUT"/memcheck-*dropout*.txt
timeout 240 python3 benchmarks/experiments/2026-11-28_flash_dropout_producer_time.py 2>&1 | grep -v Warn \
   | tee "$OUT/dropout_producer.txt"
