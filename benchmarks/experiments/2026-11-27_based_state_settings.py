"""Based's segment state passes (plans.STATE: features, chunk, warps, stages), which the
bidirectional forward and backward use (and the causal passes below their walk thresholds):
at FT 128 they compile to 255 registers and 480 bytes of stack (sm_90), and the bidirectional
forward at B8 H16 N4096 ran 1.13x the causal one (based.txt, session 28). Per setting: do_bench
medians (us) of bidirectional B8 H16 N4096 forward and forward+backward and causal B2 H16
N16384 forward+backward (its backward's segments), per-kernel device time of the
bidirectional forward+backward, bits against the first setting. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-27_based_state_settings.py 128,64,4,1 64,64,4,1 ...
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops import based
from ato_core.ops.based import plans


def inputs(B, H, N, d=16, Dv=64):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    return [t.clone().requires_grad_() for t in (q, k, v)], do


print(f"GPU {torch.cuda.get_device_name()}; based_attention d16 Dv64 bf16, us")
bi, bi_do = inputs(8, 16, 4096)
ca, ca_do = inputs(2, 16, 16384)
first = None
for setting in sys.argv[1:]:
    plans.STATE = plans.StateSettings(*map(int, setting.split(",")))
    for fn in (plans.forward_plan, plans.backward_plan):
        fn.cache_clear()
    based.BASED_ATTENTION.cached_forward.cache_clear()

    def fb(leaves, do, causal):
        return torch.autograd.grad(ato_torch.based_attention(*leaves, causal=causal), leaves, do)
    try:
        fwd = do_bench(lambda: ato_torch.based_attention(*bi, causal=False), warmup=10, rep=100, return_mode="median")
        bi_fb = do_bench(lambda: fb(bi, bi_do, False), warmup=10, rep=100, return_mode="median")
        ca_fb = do_bench(lambda: fb(ca, ca_do, True), warmup=10, rep=100, return_mode="median")
        got = [ato_torch.based_attention(*bi, causal=False).detach(), *fb(bi, bi_do, False), *fb(ca, ca_do, True)]
        first = first or got
        same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, first))
        print(f"{setting:12s} | bidir fwd {fwd * 1e3:7.1f} fwd+bwd {bi_fb * 1e3:7.1f} | causal B2 N16384 fwd+bwd "
              f"{ca_fb * 1e3:7.1f} | bits vs first (bidir o,dq,dk,dv, causal dq,dk,dv): {same}", flush=True)
        per = device_kernels(lambda: fb(bi, bi_do, False), lambda out: torch.cuda.synchronize())
        print("    " + ", ".join(f"{n.replace('based_', '').replace('_kernel', '')} {us:.1f}"
                                 for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:8]), flush=True)
    except Exception as exc:
        print(f"{setting:12s} | {type(exc).__name__}: {str(exc)[:300]}", flush=True)
