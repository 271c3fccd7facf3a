"""Issue 25: where attention dropout's time goes, kernel by kernel: ato_torch forward + backward, B4 H32 N4096
D128 bf16 causal, plain and dropout 0.1 (an int seed and a seed tensor), each kernel's mean CUDA time over 20
calls by torch.profiler (after warm-up), and its ratio to the plain call's kernel of the same role.

    python3 benchmarks/experiments/2026-11-29_flash_dropout_kernel_times.py [--stages]
"""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import DROPOUT, inputs  # noqa: E402

CALLS = 20


def role(name):
    for r in ("fa_fwd", "fa_bwd_delta", "fa_bwd_dkdv", "fa_bwd_dq"):
        if name.startswith(r):
            return r
    return name


def kernel_times(x, **kw):
    import torch

    import ato_torch

    leaves = [t.detach().requires_grad_() for t in x[:3]]

    def step():
        o = ato_torch.flash_attention(*leaves, causal=True, **kw)
        torch.autograd.grad(o, leaves, x[3])

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            step()
        torch.cuda.synchronize()
    times, names = collections.defaultdict(float), {}
    for e in prof.events():
        if e.name.startswith("fa_") and e.device_type == torch.autograd.DeviceType.CUDA:
            times[role(e.name)] += e.device_time_total / CALLS
            names[role(e.name)] = e.name
    return times, names


def main():
    """The rows: plain, dropout with an int seed and a seed tensor, and (--stages) dropout with the
    backward's rings of 3 (plans.HOPPER_BWD_DROPOUT's STAGES; 2 by default). Ratios against the plain
    row (a first plain run warms the GPU up)."""
    import torch

    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    x = inputs()
    seed = torch.tensor(7, device="cuda")
    kernel_times(x)
    rows = [("plain", {}, {}), ("dropout, int seed", DROPOUT, {}),
            ("dropout, seed tensor", {"dropout_p": 0.1, "seed": seed}, {})]
    if "--stages" in sys.argv:
        rows.append(("dropout, int seed, bwd rings of 3", DROPOUT,
                     {"HOPPER_BWD_DROPOUT": {**plans.HOPPER_BWD_DROPOUT, "STAGES": 3}}))
    base = None
    for label, kw, settings in rows:
        with plan_settings("flash_attention", plans, [], **settings):
            times, names = kernel_times(x, **kw)
        base = base or times
        total = sum(times.values())
        print(f"{label}: {total:8.1f} us in all ({total / sum(base.values()):.3f}x plain)", flush=True)
        for r in ("fa_fwd", "fa_bwd_delta", "fa_bwd_dkdv", "fa_bwd_dq"):
            print(f"    {names.get(r, r):40s} {times[r]:8.1f} us  {times[r] / base[r]:.3f}x plain", flush=True)


if __name__ == "__main__":
    main()
