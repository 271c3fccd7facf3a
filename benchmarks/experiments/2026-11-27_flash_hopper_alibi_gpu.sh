# Issue 25 (session 37): ALiBi on the Gluon forward and backward. One device command from the
# repository root, .whl carried; outputs under $OUT: the Hopper tests with ALiBi and every
# flash options test, in 5 processes (no timing beside them); memcheck with ALiBi; then the
# timing against plain causal and the portable ALiBi, alone on the GPU.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
python3 -m pytest -q --collect-only tests/test_gpu.py -k "hopper or options_gpu" 2>/dev/null | grep '::' \
  | grep -E -- '-(h|bh)\]|options_gpu' > "$OUT/ids.txt"
mapfile -t ids < "$OUT/ids.txt"
pids=()
for ((s = 0; s < 5; s++)); do
  mine=()
  for ((i = s; i < ${#ids[@]}; i += 5)); do mine+=("${ids[i]}"); done
  timeout 300 python3 -m pytest -v -rfE "${mine[@]}" > "$OUT/tests-$s.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "${#ids[@]} tests"; cat "$OUT"/tests-*.txt | grep -E "PASSED|FAILED|ERROR" | grep -c PASSED
cat "$OUT"/tests-*.txt | grep -E "^(FAILED|ERROR)|Error|^E " | head -30
for s in 0 1 2 3 4; do tail -1 "$OUT/tests-$s.txt"; done
timeout 100 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
    --backward > "$OUT/memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|alibi" "$OUT/memcheck.txt" | cut -c1-300
timeout 120 python3 benchmarks/experiments/2026-11-27_flash_hopper_alibi_time.py 2>&1 | tee "$OUT/alibi-time.txt"
