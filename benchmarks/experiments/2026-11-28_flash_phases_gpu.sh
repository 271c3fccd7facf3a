#!/usr/bin/env bash
# Session 45's prepared forward measurements in one device command (about 6 minutes on an H100):
# the per-item kernel's phases and clock, the same for the persistent form (its patch applied to a
# copy of the tree), and the A/Bs of Q by TMA in the producer and of a stale row maximum (FlashAttention
# 4's conditional rescale; each patch applied likewise). The
# device's work tree stays as carried: each patch goes to a copy under /tmp.
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-28_flash_phases_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh
root=$PWD
run_in_copy() {  # run_in_copy PATCH COMMAND...: COMMAND in a copy of the tree with PATCH applied
  local patch=$1; shift
  local copy; copy=$(mktemp -d /tmp/ato-copy-XXXX)
  cp -r "$root"/ato_core "$root"/ato_torch "$root"/ato_jax "$root"/ato_cli "$root"/benchmarks "$root"/tests "$copy"/
  (cd "$copy" && git apply "$root/$patch" && PYTHONPATH=/tmp/site:$copy "$@")
}
echo "== per-item kernel: phases and clock"
timeout 150 python3 benchmarks/experiments/2026-11-28_flash_phases.py 2>&1 | grep -v Warn
echo "== persistent form (2026-11-28_flash_persistent_tma.patch): phases and clock"
run_in_copy benchmarks/experiments/2026-11-28_flash_persistent_tma.patch \
  timeout 150 python3 benchmarks/experiments/2026-11-28_flash_phases.py --persistent 2>&1 | grep -v Warn
echo "== Q by TMA in the producer (2026-11-28_flash_q_tma.patch) against the kernel before it"
run_in_copy benchmarks/experiments/2026-11-28_flash_q_tma.patch \
  timeout 200 python3 benchmarks/experiments/2026-11-28_flash_q_tma.py "$root/ato_core/ops/flash_attention/hopper.py" 2>&1 | grep -v Warn
echo "== a stale row maximum, the accumulator rescaled only when one grows by more than 2^8 (2026-11-28_flash_stale_max.patch)"
run_in_copy benchmarks/experiments/2026-11-28_flash_stale_max.patch \
  timeout 200 python3 benchmarks/experiments/2026-11-28_flash_q_tma.py "$root/ato_core/ops/flash_attention/hopper.py" 2>&1 | grep -v Warn
