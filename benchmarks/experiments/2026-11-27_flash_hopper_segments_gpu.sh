# Issue 25 (session 39): segment ids on the Gluon forward (the backward portable). One device
# command from the repository root, .whl carried; outputs under $OUT: the flash options GPU tests
# with segment ids (those at D 128 run the Gluon forward) in 4 processes; memcheck of the segment-id case; the timing
# against plain causal and the portable forward, alone on the GPU.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
SHARD_TIMEOUT=260 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "options_gpu and (segments or all_bnhd)" 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
timeout 100 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
  --backward --segments > "$OUT/memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|segment" "$OUT/memcheck.txt" | cut -c1-250
timeout 120 python3 benchmarks/experiments/2026-11-27_flash_hopper_segments_time.py 2>&1 | tee "$OUT/segments-time.txt"
