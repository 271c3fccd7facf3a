"""Device time of flash_attention in two versions of ato_torch imported into ONE process, in
alternating rounds, with SDPA's flash backend as the peer (not a test). Settles whether a few
per cent between two benches in separate leases is the code or the lease.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-23_flash_ab.py OLD_DIR [ROUNDS]
"""
import os, statistics, sys
import torch
import torch.nn.functional as F
from triton.testing import do_bench

from benchmarks.tools.ab import alternate, load



B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()


def fwd_bwd(f, causal):
    def run():
        o = f(q, k, v, causal)
        torch.autograd.grad(o, (q, k, v), do)
    return run


def sdpa(q, k, v, causal):
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


versions = {"old": load(os.path.abspath(sys.argv[1])), "new": load(os.getcwd())}
fns = {}
for causal in (False, True):
    for name, ato in versions.items():
        fns[(name, causal, "fwd")] = lambda ato=ato, c=causal: ato.flash_attention(q, k, v, causal=c)
        fns[(name, causal, "fwd+bwd")] = fwd_bwd(lambda a, b, c, cz, ato=ato: ato.flash_attention(a, b, c, causal=cz), causal)
    fns[("sdpa", causal, "fwd")] = lambda c=causal: sdpa(q, k, v, c)
    fns[("sdpa", causal, "fwd+bwd")] = fwd_bwd(sdpa, causal)
for fn in fns.values():
    fn()
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
res = alternate(fns, rounds, lambda fn: do_bench(fn, warmup=25, rep=200, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16; do_bench medians (ms), "
      f"{rounds} alternating rounds, old = {sys.argv[1]}: median of rounds (min) and TFLOP/s")
for causal in (False, True):
    for mode in ("fwd", "fwd+bwd"):
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1) * (3.5 if mode == "fwd+bwd" else 1)
        line = [f"{'causal' if causal else 'full':6s} {mode:8s}"]
        for name in ("old", "new", "sdpa"):
            t = res[(name, causal, mode)]
            m = statistics.median(t)
            line.append(f"{name} {m:.4f} ({min(t):.4f}) {flops / m / 1e9:.0f}")
        o, n = statistics.median(res[("old", causal, mode)]), statistics.median(res[("new", causal, mode)])
        line.append(f"new/old {n / o:.3f}")
        print(" | ".join(line))
