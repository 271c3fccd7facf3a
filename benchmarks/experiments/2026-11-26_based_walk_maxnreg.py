"""Based's causal state walks (plans.WALK) under a register cap (Triton's maxnreg) so that more
walk programs fit an SM: uncapped they hold 255 registers (2 programs an SM: 1.94 waves at B8
H16 N4096); compiled for sm_90 on the CPU machine, a cap of 168 leaves 560 bytes of stack at
64-row chunks of 128 rows, 144 at 64-row chunks, 24 at 32; 128 leaves 776 / 328 / 168. torch
side only (ato_torch.launcher._jit_launch patched, this process only), causal B8 H16 N4096
d16 Dv64 bf16, the session's tree (the block kernels capped at 168): forward and
forward+backward do_bench medians (us), per-kernel device time, o, dq, dk, dv bit for bit
against the first setting with chunk 128 uncapped (saved in /tmp). Not a test. On the GPU
machine, one process per setting:
    python3 benchmarks/experiments/2026-11-26_based_walk_maxnreg.py 64,128,4,1 none
    python3 benchmarks/experiments/2026-11-26_based_walk_maxnreg.py 64,64,4,1 168
Prepared in session 27 and not run there (no device time left): settings to try first
"64,128,4,1 none", "64,128,4,1 168", "64,64,4,1 168", "64,32,4,1 128".
"""
import os
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops.based import plans
from ato_torch import launcher

plans.WALK = plans.StateSettings(*map(int, sys.argv[1].split(",")))
cap = None if sys.argv[2] == "none" else int(sys.argv[2])
walks = ("based_state_walk_kernel", "based_bwd_state_walk_kernel")
jit_launch = launcher._jit_launch


def capped(kernel, launch, args):
    if cap is None or launch.name not in walks:
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
ref_path = "/tmp/based_walk_maxnreg_ref.pt"
if not os.path.exists(ref_path):
    torch.save(got, ref_path)
same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, torch.load(ref_path)))
per = device_kernels(fb, lambda out: torch.cuda.synchronize())
print(f"walk {sys.argv[1]} maxnreg {cap} | fwd {fwd * 1e3:7.1f} | fwd+bwd {fwdbwd * 1e3:7.1f} | o,dq,dk,dv bitwise vs "
      f"the first: {same} | " + ", ".join(f"{n.replace('based_', '').replace('_kernel', '')} {us:.1f}"
                                          for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])
                                          if "walk" in n), flush=True)
