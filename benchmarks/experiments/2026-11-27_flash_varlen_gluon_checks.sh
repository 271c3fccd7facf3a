# Issue 25 (session 39): the checks of packed sequences on the Gluon kernels after the first run
# (2026-11-27_flash_varlen_gluon_gpu.sh): the Gluon varlen tests and the Hopper tests with lengths
# (their programs past q_len now skip every tile), 4 processes; memcheck of the varlen script (D 128
# cases and broken cu_seqlens on the Gluon kernels) and of the Hopper script's backward cases.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
python3 -m pytest -q --collect-only tests/test_gpu.py -k "hopper_gpu or varlen_hopper" 2>/dev/null | grep '::' \
  | grep -E "varlen|-(both|kv|q)(-|\])" > "$OUT/ids.txt"
mapfile -t ids < "$OUT/ids.txt"
pids=()
for ((s = 0; s < 4; s++)); do
  mine=()
  for ((i = s; i < ${#ids[@]}; i += 4)); do mine+=("${ids[i]}"); done
  timeout 240 python3 -m pytest -v -rfE "${mine[@]}" > "$OUT/tests-$s.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "${#ids[@]} tests"; cat "$OUT"/tests-*.txt | grep -E "PASSED|FAILED|ERROR" | grep -c PASSED
cat "$OUT"/tests-*.txt | grep -E "^(FAILED|ERROR)|^E " | cut -c1-300 | head -30
timeout 200 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-25_flash_varlen_memcheck.py \
  > "$OUT/varlen-memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|D128|broken" "$OUT/varlen-memcheck.txt" | cut -c1-200
timeout 120 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
  --backward > "$OUT/hopper-memcheck.txt" 2>&1
grep -E "ERROR SUMMARY" "$OUT/hopper-memcheck.txt"; grep -c "rel err" "$OUT/hopper-memcheck.txt"
