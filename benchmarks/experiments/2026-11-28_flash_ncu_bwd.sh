# The backward kernels of benchmarks/experiments/2026-11-28_flash_ncu.py (the autograd thread launches them, outside
# the NVTX range): by kernel name, the third call's for ato, every bprop kernel of the three calls for cuDNN.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
M=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --metrics $M"
timeout 200 ncu --kernel-name regex:"fa_bwd_(dkdv|dq)_hopper" --launch-skip 4 --launch-count 2 $S \
    python3 benchmarks/experiments/2026-11-28_flash_ncu.py ato_bwd_full > $OUT/ncu-ato_bwd_full.txt 2>&1; echo "ato rc $?"
timeout 200 ncu --kernel-name regex:"bprop" --launch-count 6 $S \
    python3 benchmarks/experiments/2026-11-28_flash_ncu.py cudnn_bwd_full > $OUT/ncu-cudnn_bwd_full.txt 2>&1; echo "cudnn rc $?"
for w in ato_bwd_full cudnn_bwd_full; do
  grep -E "^  [a-zA-Z_].*Context|Duration|pipe_xu|issue_active|pipe_fma|pipe_alu|Hgmma|Registers Per Thread  |Achieved Occupancy  |Warp Cycles Per Issued" $OUT/ncu-$w.txt | head -80
done
