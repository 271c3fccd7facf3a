# Issue 22: the first GPU run of the Gluon backward (plans.HOPPER_BACKWARD, off by default):
# its GPU tests, the launch-by-launch comparison with the portable backward, memcheck, then (BENCH=1)
# flash_attention's bench with it on. One device command from the repository root, .whl carried;
# outputs under $OUT. (Its hopper_backward tests are since one with the forward's:
# test_gpu.test_flash_attention_hopper_gpu.)
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 240 python3 -m pytest -q -rfE tests/test_gpu.py -k "hopper_backward" > "$OUT/bwd-tests.txt" 2>&1
tail -5 "$OUT/bwd-tests.txt"
timeout 150 python3 benchmarks/experiments/2026-11-27_flash_gluon_bwd.py > "$OUT/bwd-probe.txt" 2>&1
cat "$OUT/bwd-probe.txt"
timeout 150 compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py \
    --backward > "$OUT/bwd-memcheck.txt" 2>&1
tail -15 "$OUT/bwd-memcheck.txt"
if [ "${BENCH:-0}" = 1 ]; then
  timeout 300 python3 -c "import sys; from ato_core.ops.flash_attention import plans; plans.HOPPER_BACKWARD = True
from ato_cli.main import main; sys.exit(main(sys.argv[1:]))" bench --out "$OUT/bench-gluon-bwd" --op flash_attention
fi
