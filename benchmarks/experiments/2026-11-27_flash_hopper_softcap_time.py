"""Issue 25: softcap on the Gluon kernels (flash_attention/hopper.py, SOFTCAP) against plain
causal on the same kernels and against softcap on the portable kernels (plans._gluon_applies
refusing it), ato_torch, B4 H32 N4096 D128 bf16 causal, softcap 50, forward and
forward+backward (triton do_bench medians, one process, an sm_90 GPU). The target: softcap at
most 1.05x plain causal.

    python3 benchmarks/experiments/2026-11-27_flash_hopper_softcap_time.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def main():
    import torch
    from triton.testing import do_bench

    import ato_torch
    from ato_core.ops.flash_attention import plans
    from helpers import clear_plans

    B, H, N, D = 4, 32, 4096, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
    print("GPU", torch.cuda.get_device_name(), flush=True)

    def timed(label, **kw):
        def fwd():
            return ato_torch.flash_attention(q, k, v, causal=True, **kw)

        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def fwd_bwd():
            for t in leaves:
                t.grad = None
            ato_torch.flash_attention(*leaves, causal=True, **kw).backward(do)

        f = do_bench(fwd, warmup=100, rep=500, return_mode="median") * 1e3
        fb = do_bench(fwd_bwd, warmup=50, rep=500, return_mode="median") * 1e3
        return label, f, fb

    rows = [timed("plain causal (Gluon)"), timed("softcap 50 (Gluon)", softcap=50.0)]
    saved = plans._gluon_applies
    plans._gluon_applies = lambda q, D, Nk, target, options, others: options.softcap is None and saved(
        q, D, Nk, target, options, others)
    clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
    try:
        rows.append(timed("softcap 50 (portable)", softcap=50.0))
    finally:
        plans._gluon_applies = saved
        clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
    _, f0, fb0 = rows[0]
    flops = 4 * B * H * N * N * D / 2
    for label, f, fb in rows:
        print(f"{label:22s} fwd {f:8.1f} us ({flops / f / 1e6:4.0f} TF/s, {f / f0:.3f}x plain)   fwd+bwd {fb:8.1f} us "
              f"({3.5 * flops / fb / 1e6:4.0f} TF/s, {fb / fb0:.3f}x plain)", flush=True)


if __name__ == "__main__":
    main()
