"""Issue 22: dQ's (--dkdv: dK / dV's) persistent Gluon kernel (plans.HOPPER_BWD_PERSISTENT, written on a CPU machine in
session 47) against one item a program, ato_torch, bf16 D128, one process on an sm_90 GPU: dq bit
for bit alike, then the backward's time (torch.autograd.grad of a retained forward: the delta,
dK / dV and dQ launches; do_bench medians of 3 alternating rounds, each side's plan cache cleared
and its dQ kernel checked by the profiler). PERSISTENT_MAX_TILES is lifted on the persistent side,
so the long items are measured too. Run it under a timeout: a wrong ring or Q phase waits forever.

    timeout 400 python3 benchmarks/experiments/2026-11-28_flash_persistent_dq.py

--dkdv: dK / dV's persistent kernel instead (plans.HOPPER_DKDV_PERSISTENT), which only
2026-11-28_flash_persistent_dkdv.patch has (its _dkdv_consumer called, not inlined: inlined into the
item loop it spilled; results flash_gluon.txt 33), run in a patched copy:

    bash benchmarks/tools/in_copy.sh benchmarks/experiments/2026-11-28_flash_persistent_dkdv.patch \
        timeout 400 python3 benchmarks/experiments/2026-11-28_flash_persistent_dq.py --dkdv
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "benchmarks", "tools")]

SHAPES = [  # B, Hq, Hkv, N, causal
    (16, 16, 16, 1024, True), (16, 16, 16, 1024, False), (8, 16, 16, 2048, False), (4, 32, 32, 4096, True),
    (4, 32, 32, 4096, False), (2, 32, 8, 8192, True), (1, 32, 32, 16384, True)]
FLAG, KERNEL = ("HOPPER_DKDV_PERSISTENT", "fa_bwd_dkdv") if "--dkdv" in sys.argv else ("HOPPER_BWD_PERSISTENT", "fa_bwd_dq")
FORMS = {"persistent": {FLAG: True, "PERSISTENT_MAX_TILES": 10 ** 9}, "one item": {FLAG: False}}
if "--dkdv" in sys.argv:  # dQ one item a program on both sides (PERSISTENT_MAX_TILES would move it)
    FORMS = {form: {**values, "HOPPER_BWD_PERSISTENT": False} for form, values in FORMS.items()}


def main():
    import torch
    from triton.testing import do_bench

    import ato_torch
    from ab import launched
    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    print("GPU", torch.cuda.get_device_name(), flush=True)
    for B, Hq, Hkv, N, causal in SHAPES:
        label = f"B{B} Hq{Hq} Hkv{Hkv} N{N} D128 bf16 {'causal' if causal else 'full'}"
        print(f"({label}: starting)", flush=True)  # a hang shows here
        g = torch.Generator(device="cuda").manual_seed(N)
        q = torch.randn(B, Hq, N, 128, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
        k, v = (torch.randn(B, Hkv, N, 128, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
                for _ in range(2))
        do = torch.randn_like(q)
        held = {}

        def bwd():  # o is the current form's: its backward plan is memoised on its forward plan
            return torch.autograd.grad(held["o"], (q, k, v), do, retain_graph=True)

        grads, times = {}, {f: [] for f in FORMS}
        for r in range(3):
            for form in (list(FORMS) if r % 2 == 0 else list(reversed(list(FORMS)))):
                with plan_settings("flash_attention", plans, [plans.backward_plan], **FORMS[form]):
                    held["o"] = ato_torch.flash_attention(q, k, v, causal=causal)
                    if r == 0:
                        print(f"  {form}: {launched(bwd, KERNEL)}", flush=True)
                        grads[form] = bwd()
                    times[form].append(do_bench(bwd, warmup=10, rep=100, return_mode="median") * 1e3)
        same = all(torch.equal(a, b) for a, b in zip(grads["persistent"], grads["one item"]))
        best = {f: min(t) for f, t in times.items()}
        print(f"  {label} (mean key tiles {plans.mean_key_tiles(N, N, causal, None):.1f}): backward one item "
              f"{' '.join(f'{t:8.1f}' for t in times['one item'])} us, persistent "
              f"{' '.join(f'{t:8.1f}' for t in times['persistent'])} us; persistent / one item "
              f"{best['persistent'] / best['one item']:.3f}; dq, dk, dv bits equal: {same}", flush=True)


if __name__ == "__main__":
    main()
