"""Issue 22: D64 on the Gluon forward again, now that it has a persistent form (session 44 found the
one-item-a-program kernel 1.61-1.86x cuDNN at B16 H16 N1024 D64 against the portable kernel's 1.22x,
results flash_gluon.txt 28; a program's fixed cost is about 6 key tiles, which the persistent
form hides). ato_torch, bf16, one process on an sm_90 GPU, three forms of the forward by
plans.HOPPER_FORWARD_HEAD_DIMS / HOPPER_PERSISTENT / PERSISTENT_MAX_TILES (each side's plan cache
cleared, its kernel checked by the profiler): the portable kernel, the Gluon kernel one item a
program, the persistent Gluon kernel; the backward portable in all three (D64 is not in
HOPPER_HEAD_DIMS). Forward and forward+backward, do_bench medians of 3 alternating rounds, cuDNN
(SDPA) in the same rounds; o's and lse's error against an fp32 reference for each form.

    python3 benchmarks/experiments/2026-11-28_flash_d64_persistent.py [--backward]

--backward: the backward's two forms instead (the forward as plans choose it: persistent at D 64 where
items are long): the portable dK / dV and dQ kernels against the Gluon ones (plans.HOPPER_HEAD_DIMS
(64, 128); session 44 measured them only at N 1024, 1.25x the portable backward's time).
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "benchmarks", "tools")]

SHAPES = [(16, 16, 1024, False), (16, 16, 1024, True), (4, 64, 4096, False), (4, 64, 4096, True),
          (1, 32, 16384, True)]
FORMS = {"portable": {"HOPPER_FORWARD_HEAD_DIMS": (128,)},
         "one item": {"HOPPER_FORWARD_HEAD_DIMS": (64, 128), "HOPPER_PERSISTENT": False},
         "persistent": {"HOPPER_FORWARD_HEAD_DIMS": (64, 128), "HOPPER_PERSISTENT": True,
                        "PERSISTENT_MAX_TILES": 10 ** 9}}
if "--backward" in sys.argv:
    FORMS = {"portable bwd": {"HOPPER_HEAD_DIMS": (128,)}, "Gluon bwd": {"HOPPER_HEAD_DIMS": (64, 128)}}


def main():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import ato_torch
    from ab import launched
    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    def settings(form):
        return plan_settings("flash_attention", plans, [plans.forward_plan, plans.backward_plan], **FORMS[form])

    def bench(f):
        return do_bench(f, warmup=10, rep=80, return_mode="median") * 1e3

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, H, N, causal in SHAPES:
        label = f"B{B} H{H} N{N} D64 bf16 {'causal' if causal else 'full'}"
        print(f"({label}: starting)", flush=True)  # a hang shows here
        g = torch.Generator(device="cuda").manual_seed(N + causal)
        q, k, v, do = (torch.randn(B, H, N, 64, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        ref = None
        if B * 2 * N * N <= 2 ** 30:  # an fp32 reference of the first 2 heads
            qf, kf, vf = (t[:, :2].float() for t in (q, k, v))
            s = qf @ kf.transpose(-1, -2) / math.sqrt(64)
            if causal:
                s = s.masked_fill(torch.ones(N, N, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
            ref = (torch.softmax(s, -1) @ vf, torch.logsumexp(s, -1))
            del s

        def fwd():
            return ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)

        def fwd_bwd():
            o = ato_torch.flash_attention(qg, kg, vg, causal=causal)
            return torch.autograd.grad(o, (qg, kg, vg), do)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def cudnn_fb():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            return torch.autograd.grad(o, (qg, kg, vg), do)

        times = {n: [] for n in [*(f"{f} {p}" for f in FORMS for p in ("fwd", "fwd+bwd")), "cuDNN fwd",
                                 "cuDNN fwd+bwd"]}
        for r in range(3):
            for form in (list(FORMS) if r % 2 == 0 else list(reversed(list(FORMS)))):
                with settings(form):
                    if r == 0:
                        ran = launched(fwd, "fa_fwd") + launched(fwd_bwd, "fa_bwd")
                        o, lse = fwd()
                        err = ""
                        if ref is not None:
                            eo = ((o[:, :2].float() - ref[0]).abs().max() / ref[0].abs().max()).item()
                            el = (lse[:, :2] - ref[1]).abs().max().item()
                            err = f", o max err {eo:.2e} of max |o|, lse max err {el:.2e}"
                        print(f"  {label} {form}: {ran}{err}", flush=True)
                    times[f"{form} fwd"].append(bench(fwd))
                    times[f"{form} fwd+bwd"].append(bench(fwd_bwd))
            times["cuDNN fwd"].append(bench(cudnn))
            times["cuDNN fwd+bwd"].append(bench(cudnn_fb))
        best = {n: min(t) for n, t in times.items()}
        for n, t in times.items():
            base = best["cuDNN fwd+bwd" if "fwd+bwd" in n else "cuDNN fwd"]
            print(f"  {label} {n:22s} {' '.join(f'{x:8.1f}' for x in t)} us  best {best[n]:8.1f} "
                  f"({best[n] / base:.3f}x cuDNN)", flush=True)


if __name__ == "__main__":
    main()
