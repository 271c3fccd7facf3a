# Issue 22: the hung GPU-tier tests alone, then the stress script in three processes at once.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
for t in "test_flash_attention_hopper_gpu[causal-float16-3x2x2x1x1x128xbhnd]" "test_flash_attention_cross_framework_bitwise_gpu[full-2x8x8x2048x2048x128]"; do
  timeout 150 python3 -m pytest -q -x "tests/test_gpu.py::$t" 2>&1 | tail -2; echo "rc $?"
done
# three processes at once, as the sharded tier runs them
for i in 0 1 2; do timeout 300 python3 benchmarks/experiments/2026-11-27_flash_hopper_stress.py 600 > $OUT/conc$i.txt 2>&1 & done
wait
tail -n 20 $OUT/conc*.txt
