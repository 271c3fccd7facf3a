# Issue 22: the first GPU run of the fused-dQ backward (plans.HOPPER_FUSED_DQ, off by default):
# the launch-by-launch comparison with the dK / dV + dQ kernels (errors, bits over 3 runs, time)
# under a timeout, since a wrong turn count hangs; then its GPU tests (gpu_tier_sharded.sh -k fused_dq, 4 processes);
# then (BENCH=1) issue 25's options table. One device command from the repository root, .whl
# carried; outputs under $OUT.
# The fused form is gone from hopper.py since session 38 (measured slower; results README);
# it runs at commit f7500f4.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 200 python3 benchmarks/experiments/2026-11-27_flash_bwd_fused_dq.py > "$OUT/fused-dq.txt" 2>&1
echo "rc $?" >> "$OUT/fused-dq.txt"
grep -v "^\s*$" "$OUT/fused-dq.txt" | tail -24
SHARD_TIMEOUT=200 HEAVY_K="" bash benchmarks/tools/gpu_tier_sharded.sh fused_dq 4 > /dev/null 2>&1
grep -c PASSED "$OUT/gpu-tests-summary.txt"; grep -v PASSED "$OUT/gpu-tests-summary.txt" | tail -20
if [ "${BENCH:-0}" = 1 ]; then
  timeout 240 python3 -m ato_cli.main bench --out "$OUT/options" --op flash_options | tail -40
fi
