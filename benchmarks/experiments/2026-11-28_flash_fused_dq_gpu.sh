# Issue 22: the first GPU run of the fused-dQ backward (plans.HOPPER_FUSED_DQ, off by default):
# the launch-by-launch comparison with the dK / dV + dQ kernels (errors, bits over 3 runs, time)
# under a timeout, since a wrong turn count hangs; then its GPU tests (-k fused_dq, 4 processes);
# then (BENCH=1) issue 25's options table. One device command from the repository root, .whl
# carried; outputs under $OUT.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 200 python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py > "$OUT/fused-dq.txt" 2>&1
echo "rc $?" >> "$OUT/fused-dq.txt"
grep -v "^\s*$" "$OUT/fused-dq.txt" | tail -24
mapfile -t ids < <(python3 -m pytest -q --collect-only tests/test_gpu.py -k fused_dq 2>/dev/null | grep '::')
pids=()
for ((s = 0; s < 4; s++)); do
  mine=()
  for ((i = s; i < ${#ids[@]}; i += 4)); do mine+=("${ids[i]}"); done
  timeout 200 python3 -m pytest -v -rfE "${mine[@]}" > "$OUT/fused-tests-$s.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "${#ids[@]} tests:"; cat "$OUT"/fused-tests-*.txt | grep -E "PASSED|FAILED|ERROR" | grep '::' | grep -c PASSED
cat "$OUT"/fused-tests-*.txt | grep -E "^(FAILED|ERROR)|^E " | head -20
if [ "${BENCH:-0}" = 1 ]; then
  timeout 240 python3 -m ato_cli.main bench --out "$OUT/options" --op flash_options | tail -40
fi
