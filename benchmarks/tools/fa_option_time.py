"""Timing of flash_attention's options against plain causal on the same kernels: ato_torch, B4
H32 N4096 D128 bf16 causal, forward and forward+backward (triton do_bench medians, one process,
a GPU). The helpers of benchmarks/experiments/*_flash_hopper_*_time.py."""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
B, H, N, D = 4, 32, 4096, 128
DROPOUT = {"dropout_p": 0.1, "seed": 7}  # the experiments' dropout: p 0.1, an int seed


def inputs():
    """q, k, v, do: [B, H, N, D] bf16 on the GPU (seed 0); prints the GPU's name."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    print("GPU", torch.cuda.get_device_name(), flush=True)
    return tuple(torch.randn(B, H, N, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))


def timed(label, q, k, v, do, **kw):
    """(label, forward us, forward+backward us) of ato_torch.flash_attention(causal=True, **kw)."""
    from triton.testing import do_bench

    import ato_torch

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


def timed_forms(x, forms, run, prefix="fa_"):
    """Each (label, plans settings, flash_attention options) of ``forms`` under those settings
    (helpers.plan_settings: the plans cleared on the way in and out): the kernels run(kw) launches
    whose names start with ``prefix`` printed (torch.profiler: the toggle took effect), run(kw)'s
    result kept and timed()'s row on x = inputs(). Returns (rows, {label: result})."""
    from ab import launched
    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    rows, results = [], {}
    for label, settings, kw in forms:
        with plan_settings("flash_attention", plans, [], **settings):
            print(f"  {label}: {launched(lambda: run(kw), prefix)}", flush=True)
            results[label] = run(kw)
            rows.append(timed(label, *x, **kw))
    return rows, results


@contextlib.contextmanager
def patched(module, name, value):
    """module.name = value inside (the flash plans cleared on the way in and out)."""
    from ato_core.ops.flash_attention import plans
    from helpers import clear_plans

    saved = getattr(module, name)
    setattr(module, name, value)
    clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
    try:
        yield
    finally:
        setattr(module, name, saved)
        clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)


def report(rows):
    """One line a row: times, TF/s (plain causal's FLOPs) and the ratio to the first row."""
    _, f0, fb0 = rows[0]
    flops = 4 * B * H * N * N * D / 2
    for label, f, fb in rows:
        print(f"{label:24s} fwd {f:8.1f} us ({flops / f / 1e6:4.0f} TF/s, {f / f0:.3f}x plain)   fwd+bwd {fb:8.1f} us "
              f"({3.5 * flops / fb / 1e6:4.0f} TF/s, {fb / fb0:.3f}x plain)", flush=True)
