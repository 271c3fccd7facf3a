#!/usr/bin/env bash
# The first device run of dK / dV's persistent kernel (experiments/2026-11-28_flash_persistent_dkdv.patch,
# not in the tree: its consumer is a called function, results flash_gluon.txt 33), in a patched copy, one
# device command (about 5 minutes): memcheck of the backward's cases with it, then the A/B against one
# item a program (2026-11-28_flash_persistent_dq.py --dkdv: dq, dk, dv bit for bit, backward time).
# If it is correct and faster, apply the patch, add its GPU test (as test_flash_attention_hopper_persistent_dq_gpu)
# and run the hopper tier. Session 48 (NVIDIA_H200-flash_gluon.txt 34): it hangs at the first case (the noinline
# consumer's mbarrier.arrive compiles to a CTA-wide bar.sync 0 under Triton 3.6). Usage (repository root, .whl carried):
#   bash benchmarks/experiments/2026-11-28_flash_persistent_dkdv_gpu.sh
set -uo pipefail
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
bash benchmarks/tools/in_copy.sh benchmarks/experiments/2026-11-28_flash_persistent_dkdv.patch bash -c '
  MEMCHECK_TIMEOUT=240 bash benchmarks/tools/memcheck.sh \
     "benchmarks/experiments/2026-11-27_flash_hopper_memcheck.py --backward --persistent-dkdv"
  grep -c "rel err" "$OUT"/memcheck-*persistent-dkdv*.txt
  timeout 300 python3 benchmarks/experiments/2026-11-28_flash_persistent_dq.py --dkdv 2>&1 | grep -v Warn \
     | tee "$OUT/persistent_dkdv.txt"'
