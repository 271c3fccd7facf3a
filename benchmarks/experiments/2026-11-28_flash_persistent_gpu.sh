# Issues 22 / 25: the first GPU run of the Gluon forward's persistent form (plans.HOPPER_PERSISTENT,
# off): bits and time against the program-per-item form under a timeout (a hang: a wrong phase),
# then its GPU tests (-k persistent) and memcheck of its cases. One device command from the
# repository root, .whl carried; outputs under $OUT. Runs at f458a51 (the form was removed after
# this measurement: results flash_gluon.txt, section 19).
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 180 python3 benchmarks/experiments/2026-11-28_flash_persistent.py > "$OUT/persistent.txt" 2>&1
echo "rc $?" >> "$OUT/persistent.txt"
grep -v "^\s*$" "$OUT/persistent.txt" | tail -14
SHARD_TIMEOUT=200 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh persistent 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -8
rm -f "$OUT"/gpu-tests-shard*.txt
timeout 150 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
  --persistent > "$OUT/persistent-memcheck.txt" 2>&1
tail -4 "$OUT/persistent-memcheck.txt"
