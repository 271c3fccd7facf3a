"""Issue 22: what limits the Gluon flash kernels against cuDNN's (Nsight Compute). One call of
WHICH on B4 H32 N4096 D128 bf16, after two warm-up calls, inside an NVTX range "profile" for
ncu to select. Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:

    for w in ato_fwd_full ato_fwd_causal ato_bwd_full cudnn_fwd_full cudnn_fwd_causal cudnn_bwd_full; do
      ncu --nvtx --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats \\
          --section SchedulerStats --section Occupancy --metrics <pipe metrics> \\
          python3 benchmarks/experiments/2026-11-28_flash_ncu.py $w; done

WHICH: {ato,cudnn}_{fwd,bwd}_{full,causal} (bwd: the forward outside the range, the backward in it).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import ato_torch

which = sys.argv[1]
lib, pass_, mask = which.split("_")
causal = mask == "causal"
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(4, 32, 4096, 128, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
               for _ in range(4))


def forward():
    if lib == "ato":
        return ato_torch.flash_attention(q, k, v, causal=causal)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


for step in range(3):
    if step == 2:
        torch.cuda.synchronize()
        if pass_ == "fwd":
            torch.cuda.nvtx.range_push("profile")
    o = forward()
    if pass_ == "bwd":
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("profile")
        o.backward(do)
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    q.grad = k.grad = v.grad = None
print(which, "done", flush=True)
