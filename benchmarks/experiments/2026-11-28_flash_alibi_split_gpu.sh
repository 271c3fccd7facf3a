# Issues 25 / 22: ALiBi split into a key and a row term under causal (hopper._softmax, _dkdv_tile,
# _dq_tile) and the fused-dQ form of session 38: the ALiBi timing against plain causal, then the
# Hopper GPU tests (the Gluon forward's _load_rows of session 37 too). One device command from the
# repository root, .whl carried; outputs under $OUT.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 150 python3 benchmarks/experiments/2026-11-27_flash_hopper_alibi_time.py > "$OUT/alibi-time.txt" 2>&1
grep -v "^\s*$" "$OUT/alibi-time.txt" | tail -12
SHARD_TIMEOUT=${SHARD_TIMEOUT:-400} bash benchmarks/tools/gpu_tier_sharded.sh hopper 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -20
