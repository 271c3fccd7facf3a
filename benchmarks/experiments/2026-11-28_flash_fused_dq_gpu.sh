# Issue 22: the first GPU run of the fused-dQ backward experiment (2026-11-27_flash_bwd_fused_dq.py:
# errors against the Gluon backward, bits over 3 runs, time, ordered and atomic), under a
# timeout since a wrong turn count hangs; then (BENCH=1) issue 25's options table with ALiBi on
# the Gluon kernels. One device command from the repository root, .whl carried; outputs under $OUT.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 240 python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py > "$OUT/fused-dq.txt" 2>&1
echo "rc $?" >> "$OUT/fused-dq.txt"
cat "$OUT/fused-dq.txt" | grep -v "^\s*$" | tail -20
if [ "${BENCH:-0}" = 1 ]; then
  timeout 300 python3 -m ato_cli.main bench --out "$OUT/options" --op flash_options | tail -40
fi
