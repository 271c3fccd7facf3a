# Issue 25 (session 39): softcap on the Gluon forward and backward. One device command from the
# repository root, .whl carried; outputs under $OUT: every flash softcap GPU test (the Hopper
# softcap cases, the options and varlen ones that now run the Gluon kernels at D 128) in 4
# processes; memcheck of the softcap cases; the timing against plain causal and the portable
# softcap, alone on the GPU.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
SHARD_TIMEOUT=260 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "flash and softcap" 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
timeout 100 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
  --backward --softcap > "$OUT/memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|softcap" "$OUT/memcheck.txt" | cut -c1-250
timeout 120 python3 benchmarks/experiments/2026-11-27_flash_hopper_softcap_time.py 2>&1 | tee "$OUT/softcap-time.txt"
