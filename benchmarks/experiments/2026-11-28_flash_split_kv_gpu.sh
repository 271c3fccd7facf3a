#!/usr/bin/env bash
# The first device run of the Gluon forward's split K / V barriers (plans.HOPPER_SPLIT_KV, off), one
# device command (about 7 minutes; give it 600 s): its GPU test (28: against the reference, torch == JAX,
# and bit for bit the joint barriers' results, both forms, with dropout's 2-stage ring too) beside memcheck
# --split-kv with and without --dropout, then the timing (2026-11-28_flash_split_kv_time.py). If the bits hold and the
# split is faster, set HOPPER_SPLIT_KV = True (and, where a ring of 2 then keeps up with 3, think about
# what the freed stage buys), then run the hopper tier and `ato bench --op flash_options`.
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-28_flash_split_kv_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
mem=benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py
SHARD_TIMEOUT=330 bash benchmarks/tools/tier_with_memcheck.sh "split_kv" 6 "$mem --split-kv" "$mem --split-kv --dropout"
timeout 240 python3 benchmarks/experiments/2026-11-28_flash_split_kv_time.py 2>&1 | grep -v Warn \
   | tee "$OUT/split_kv.txt"
