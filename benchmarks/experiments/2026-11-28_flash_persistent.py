"""Issues 22 / 25: the Gluon forward's persistent form (plans.HOPPER_PERSISTENT, written on a CPU
machine in session 38) against its program-per-item form, ato_torch, bf16 D128, one process on an
sm_90 GPU: o and lse bit for bit alike (the same tiles in the same order), then the forward's time
(triton do_bench medians) of each. Run it under a timeout: a wrong ring or Q phase waits forever. Runs at f458a51 (the form was
removed after this measurement: results flash_gluon.txt, section 19).

    python3 benchmarks/experiments/2026-11-28_flash_persistent.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

SHAPES = [  # B, Hq, Hkv, N, causal, window
    (4, 32, 32, 4096, False, None), (2, 32, 8, 8192, False, None), (1, 32, 32, 16384, True, (4096, None)),
    (4, 32, 32, 4096, True, (1024, None)), (3, 16, 16, 1000, False, None)]


def main():
    import torch
    from triton.testing import do_bench

    import ato_torch
    from ato_core.ops.flash_attention import plans
    from helpers import clear_plans

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, Hq, Hkv, N, causal, window in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(N)
        q = torch.randn(B, Hq, N, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, N, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        label = f"B{B} Hq{Hq} Hkv{Hkv} N{N} {'causal' if causal else 'full'}" + (f" window {window}" if window else "")
        print(f"({label}: starting)", flush=True)  # a hang shows here
        got, times = {}, {}
        for persistent in (False, True):
            plans.HOPPER_PERSISTENT = persistent
            clear_plans("flash_attention", plans.forward_plan, plans.backward_plan)
            call = lambda: ato_torch.flash_attention(q, k, v, causal=causal, window_size=window,  # noqa: E731
                                                     return_lse=True)
            got[persistent] = call()
            torch.cuda.synchronize()
            times[persistent] = do_bench(call, warmup=25, rep=200) * 1e3
        same = all(torch.equal(a, b) for a, b in zip(got[False], got[True]))
        print(f"{label}: per item {times[False]:8.1f} us, persistent {times[True]:8.1f} us "
              f"({times[False] / times[True]:.3f}x faster); o, lse bits equal: {same}", flush=True)
    plans.HOPPER_PERSISTENT = False


if __name__ == "__main__":
    main()
