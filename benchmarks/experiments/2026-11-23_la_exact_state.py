"""linear_attention's state pass with phi(k) unrounded (issue 18: _mm_exact, three bf16
products or tf32x3) against the version before it, both imported into ONE process in
alternating rounds (not a test). Causal and bidirectional ELU+1, B8 H16 N4096 D64, bf16 and
fp16: forward, forward+backward, and each version's final-state error against the float64
sum of the same inputs.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-23_la_exact_state.py OLD_DIR [ROUNDS]
"""
import os, statistics, sys
import torch
from triton.testing import do_bench

from benchmarks.tools.ab import alternate, load

B, H, N, D = 8, 16, 4096, 64
versions = {"old": load(os.path.abspath(sys.argv[1])), "new": load(os.getcwd())}
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
print(f"GPU {torch.cuda.get_device_name()}; linear_attention ELU+1 B{B} H{H} N{N} D{D}, do_bench medians (us), "
      f"{rounds} alternating rounds, old = {sys.argv[1]}: median of rounds (min); state error: relative L2 "
      f"of S_final against the float64 sum")
for dtype in (torch.bfloat16, torch.float16):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    fk = torch.nn.functional.elu(k.detach().double()) + 1
    S_want = fk.transpose(-1, -2) @ v.detach().double()
    fns, errs = {}, {}
    for name, ato in versions.items():
        for causal in (True, False):
            call = lambda ato=ato, causal=causal: ato.linear_attention(q, k, v, causal=causal, feature_map="elu")
            fns[(name, causal, "fwd")] = call
            fns[(name, causal, "fwd+bwd")] = lambda call=call: torch.autograd.grad(call(), (q, k, v), do)
        _, (S, _) = ato.linear_attention(q, k, v, causal=True, feature_map="elu", output_final_state=True)
        errs[name] = float((S.double() - S_want).norm() / S_want.norm())
    for fn in fns.values():
        fn()
    res = alternate(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median"))
    for causal in (True, False):
        for mode in ("fwd", "fwd+bwd"):
            o, n = res[("old", causal, mode)], res[("new", causal, mode)]
            print(f"{str(dtype)[6:]:8s} {'causal' if causal else 'bidir':6s} {mode:8s} | old {statistics.median(o) * 1e3:.1f} "
                  f"({min(o) * 1e3:.1f}) | new {statistics.median(n) * 1e3:.1f} ({min(n) * 1e3:.1f}) | "
                  f"new/old {statistics.median(n) / statistics.median(o):.3f}")
    print(f"{str(dtype)[6:]:8s} final state error: old {errs['old']:.2e}, new {errs['new']:.2e}")
