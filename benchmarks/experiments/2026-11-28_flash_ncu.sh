source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
X="--metrics $M"
timeout 120 ncu --nvtx --nvtx-include "profile/" $X python3 benchmarks/experiments/2026-11-28_flash_ncu.py ato_fwd_full > $OUT/probe.txt 2>&1 || X=""
grep -q "gmma_cycles_active" $OUT/probe.txt || X=""
echo "metrics: ${X:-none}"
for w in ato_fwd_full cudnn_fwd_full ato_fwd_causal cudnn_fwd_causal ato_bwd_full cudnn_bwd_full; do
  timeout 150 ncu --nvtx --nvtx-include "profile/" $S $X --print-details all python3 benchmarks/experiments/2026-11-28_flash_ncu.py $w > $OUT/ncu-$w.txt 2>&1 || \
  timeout 150 ncu --nvtx --nvtx-include "profile/" $S $X python3 benchmarks/experiments/2026-11-28_flash_ncu.py $w > $OUT/ncu-$w.txt 2>&1
  echo "$w rc $?"; grep -E "^  [a-zA-Z_].*\(|Duration|gmma|pipe_xu|issue_active|pipe_fma|pipe_alu|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu-$w.txt | head -40
done
