#!/usr/bin/env bash
# Session 45's prepared forward measurements in one device command (about 6 minutes on an H100):
# the per-item kernel's phases and clock, the same for the persistent form (in the tree since
# session 46), and the A/Bs of Q by TMA in the producer and of a stale row maximum (FlashAttention
# 4's conditional rescale), each patch applied to a copy of the tree under /tmp (tools/in_copy.sh).
# Run once, at 32f0a8f (results flash_gluon.txt 30); both patches are against that tree.
# Usage (repository root, .whl carried): bash benchmarks/experiments/2026-11-28_flash_phases_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh
root=$PWD
run_in_copy() { bash benchmarks/tools/in_copy.sh "$@"; }
echo "== per-item kernel: phases and clock"
timeout 150 python3 benchmarks/experiments/2026-11-28_flash_phases.py 2>&1 | grep -v Warn
echo "== persistent form (in the tree since session 46): phases and clock"
timeout 150 python3 benchmarks/experiments/2026-11-28_flash_phases.py --persistent 2>&1 | grep -v Warn
echo "== Q by TMA in the producer (2026-11-28_flash_q_tma.patch) against the kernel before it"
run_in_copy benchmarks/experiments/2026-11-28_flash_q_tma.patch \
  timeout 200 python3 benchmarks/experiments/2026-11-28_flash_q_tma.py "$root/ato_core/ops/flash_attention/hopper.py" 2>&1 | grep -v Warn
echo "== a stale row maximum, the accumulator rescaled only when one grows by more than 2^8 (2026-11-28_flash_stale_max.patch)"
run_in_copy benchmarks/experiments/2026-11-28_flash_stale_max.patch \
  timeout 200 python3 benchmarks/experiments/2026-11-28_flash_q_tma.py "$root/ato_core/ops/flash_attention/hopper.py" 2>&1 | grep -v Warn
