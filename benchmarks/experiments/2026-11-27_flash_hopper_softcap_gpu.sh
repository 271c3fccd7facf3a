# Issue 25 (session 39): softcap on the Gluon forward and backward. One device command from the
# repository root, .whl carried; outputs under $OUT: every flash softcap GPU test (the Hopper
# softcap cases, the options and varlen ones that now run the Gluon kernels at D 128) in 4
# processes; memcheck of the softcap cases; the timing against plain causal and the portable
# softcap, alone on the GPU.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
python3 -m pytest -q --collect-only tests/test_gpu.py -k "flash and softcap" 2>/dev/null | grep '::' > "$OUT/ids.txt"
mapfile -t ids < "$OUT/ids.txt"
pids=()
for ((s = 0; s < 4; s++)); do
  mine=()
  for ((i = s; i < ${#ids[@]}; i += 4)); do mine+=("${ids[i]}"); done
  timeout 260 python3 -m pytest -v -rfE "${mine[@]}" > "$OUT/tests-$s.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "${#ids[@]} tests"; cat "$OUT"/tests-*.txt | grep -E "PASSED|FAILED|ERROR" | grep -c PASSED
cat "$OUT"/tests-*.txt | grep -E "^(FAILED|ERROR)|^E " | cut -c1-300 | head -30
for s in 0 1 2 3; do tail -1 "$OUT/tests-$s.txt"; done
timeout 100 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
  --backward --softcap > "$OUT/memcheck.txt" 2>&1
grep -E "ERROR SUMMARY|softcap" "$OUT/memcheck.txt" | cut -c1-250
timeout 120 python3 benchmarks/experiments/2026-11-27_flash_hopper_softcap_time.py 2>&1 | tee "$OUT/softcap-time.txt"
