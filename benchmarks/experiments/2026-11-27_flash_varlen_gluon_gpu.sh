# Issue 25 (session 39): packed sequences (flash_attention_varlen) on the Gluon kernels (VARLEN).
# One device command from the repository root, .whl carried; outputs under $OUT: every varlen GPU
# test (the new Gluon cases and the portable ones) in 4 processes, memcheck of the varlen script
# (its D 128 cases and broken cu_seqlens run the Gluon kernels), then `ato bench --op
# flash_varlen` with the Gluon kernels and with ATO_PORTABLE=1 (the portable ones), alone on the GPU.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
SHARD_TIMEOUT=240 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh "varlen" 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -12
rm -f "$OUT"/gpu-tests-shard*.txt
timeout 120 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-25_flash_varlen_memcheck.py \
  > "$OUT/varlen-memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|D128|D128|128 " "$OUT/varlen-memcheck.txt" | cut -c1-200 | tail -8
timeout 100 python3 -m ato_cli.main bench --out "$OUT/gluon" --op flash_varlen > /dev/null 2>&1
ATO_PORTABLE=1 timeout 80 python3 -m ato_cli.main bench --out "$OUT/portable" --op flash_varlen > /dev/null 2>&1
cat "$OUT"/gluon/*.txt | cut -c1-150; grep "varlen ato_torch\|varlen ato_jax" "$OUT"/portable/*.txt | cut -c1-150
