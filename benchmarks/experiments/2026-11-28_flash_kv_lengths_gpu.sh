#!/usr/bin/env bash
# The GPU check that plans.PERSISTENT_KV_LENS waits for (results NVIDIA_H200-flash_gluon.txt 30f), in one
# device command (about 7 minutes on a cold cache): the flag on in a copy of the tree
# (2026-11-28_flash_kv_lengths_on.patch, tools/in_copy.sh), the hopper tier there (its kv-length
# cases then run the persistent forward) and memcheck of the forward's cases with kv lengths on it.
# If all pass, flip the flag in plans.py. Usage (repository root, .whl carried):
#   bash benchmarks/experiments/2026-11-28_flash_kv_lengths_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
bash benchmarks/tools/in_copy.sh benchmarks/experiments/2026-11-28_flash_kv_lengths_on.patch bash -c '
  (MEMCHECK_TIMEOUT=260 bash benchmarks/tools/memcheck.sh \
     "benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py --kv-lengths" > "$OUT/memcheck-summary.txt" 2>&1) &
  mc=$!
  SHARD_TIMEOUT=330 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "hopper and not block_sparse" 6 > /dev/null 2>&1
  echo "passed $(grep -c PASSED "$OUT/gpu-tests-summary.txt")"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
  rm -f "$OUT"/gpu-tests-shard*.txt
  wait $mc; cat "$OUT/memcheck-summary.txt"; grep -c "rel err" "$OUT"/memcheck-*flash*.txt'
