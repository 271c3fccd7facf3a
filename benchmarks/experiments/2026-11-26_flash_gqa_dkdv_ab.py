"""flash_attention's dk/dv kernel, A/B in one process: OLD (a loop over the G query heads of the
kv head around three query-block loops; 1672 bytes of stack a thread at G 4 on sm_90) against NEW
(one loop over (head, block) per range; 40 bytes). B2 Hq32 N8192 D128 bf16 causal, Hkv 8 (GQA)
and 32 (MHA): per-kernel device time of one forward+backward, forward+backward do_bench medians
(us) in alternating rounds (argv[3], default 2; argv[4] the Hkv list, default 8,32), dq, dk, dv against OLD's (MHA keeps the order of the sums: bit for
bit; GQA sums the heads in another order). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_gqa_dkdv_ab.py .ab_old .
(.ab_old: a copy of the tree before, git archive d4f57e4.)
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch", "ato_cli.bench") for name, path in (("old", sys.argv[1]),
                                                                               ("new", sys.argv[2]))}
B, Hq, N, D = 2, 32, 8192, 128
print(f"GPU {torch.cuda.get_device_name()}; B{B} Hq{Hq} N{N} D{D} bf16 causal; us")
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
for Hkv in [int(h) for h in (sys.argv[4] if len(sys.argv) > 4 else "8,32").split(",")]:
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            for _ in range(2))
    do = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
    ref, times = None, {name: [] for name in forms}
    for r in range(ROUNDS):
        for name in (list(forms) if r % 2 == 0 else list(reversed(list(forms)))):
            ato, bench = forms[name]

            def fb():
                return torch.autograd.grad(ato.flash_attention(q, k, v, causal=True), (q, k, v), do)
            times[name].append(do_bench(fb, warmup=25, rep=200, return_mode="median") * 1e3)
            got = fb()
            ref = ref or got
            same = " ".join("=" if torch.equal(a, b_) else f"{float((a.float() - b_.float()).norm() / b_.float().norm()):.1e}"
                            for a, b_ in zip(got, ref))
            per = bench.device_kernels(fb, lambda out: torch.cuda.synchronize())
            kern = ", ".join(f"{n.replace('fa_', '').replace('_kernel', '')} {us:.1f}"
                             for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]) if "fa_" in n)
            print(f"  round {r} Hkv {Hkv:2d} {name}: {kern} | dq, dk, dv vs old: {same}", flush=True)
    for name, ts in times.items():
        print(f"  Hkv {Hkv:2d} {name} fwd+bwd: " + " / ".join(f"{t:8.1f}" for t in ts), flush=True)
