"""Based's block kernels (output pass, dq, dk/dv) compiled with a register cap (Triton's
maxnreg) so that more programs fit an SM: they hold 230 registers a thread (2 programs of 4
warps an SM), and compiled for sm_90 they spill 16 bytes at 168 and 144 at 128. torch side
only (ato_torch.launcher._jit_launch patched, this process only); causal B8 H16 N4096 d16 Dv64
bf16: forward and forward+backward do_bench medians (us), per-kernel device time of one
forward+backward, o, dq, dk, dv bit for bit against the uncapped run (saved in /tmp). Not a
test. On the GPU machine, one process per cap:
    python3 benchmarks/experiments/2026-11-26_based_maxnreg.py none
    python3 benchmarks/experiments/2026-11-26_based_maxnreg.py 168 [kernel names ...]
--walk F,C,W,S first sets plans.WALK (features, chunk, warps, stages); W below is
based_state_walk_kernel based_bwd_state_walk_kernel (each "none" run saves the bits the capped runs
after it are compared with: the chunk changes the sums). Run in session 28 (results:
NVIDIA_H100_80GB_HBM3-based-walk.txt section 6; every cap slower):
    ... --walk 64,128,4,1 none; --walk 64,128,4,1 168 W; --walk 64,64,4,1 168 W; --walk 64,32,4,1 128 W
"""
import os
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops.based import plans
from ato_torch import launcher

args = sys.argv[1:]
if args[0] == "--walk":
    plans.WALK = plans.StateSettings(*map(int, args[1].split(",")))
    args = args[2:]
cap = None if args[0] == "none" else int(args[0])
names = args[1:] or ["based_fwd_kernel", "based_bwd_dq_kernel", "based_bwd_dkdv_kernel"]
jit_launch = launcher._jit_launch


def capped(kernel, launch, args):
    if cap is None or launch.name not in names:
        return jit_launch(kernel, launch, args)
    return kernel[launch.grid](*args, **launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages,
                               enable_fp_fusion=launch.fp_fusion, maxnreg=cap)


launcher._jit_launch = capped
B, H, N, d, Dv = 8, 16, 4096, 16, 64
g = torch.Generator(device="cuda").manual_seed(0)
q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
leaves = [t.clone().requires_grad_() for t in (q, k, v)]


def fb():
    return torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do)


fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")
fwdbwd = do_bench(fb, warmup=10, rep=100, return_mode="median")
got = [ato_torch.based_attention(*leaves).detach(), *fb()]
ref_path = "/tmp/based_maxnreg_none.pt"
if cap is None:
    torch.save(got, ref_path)
same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, torch.load(ref_path))) \
    if os.path.exists(ref_path) else "?"
print(f"GPU {torch.cuda.get_device_name()} walk {','.join(map(str, plans.WALK))} maxnreg {cap} on {','.join(n.replace('based_', '').replace('_kernel', '') for n in names)}"
      f" | fwd {fwd * 1e3:7.1f} | fwd+bwd {fwdbwd * 1e3:7.1f} | o,dq,dk,dv bitwise vs uncapped: {same}", flush=True)
per = device_kernels(fb, lambda out: torch.cuda.synchronize())
print("    " + ", ".join(f"{n.replace('based_', '').replace('_kernel', '')} {us:.1f}"
                         for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])), flush=True)
