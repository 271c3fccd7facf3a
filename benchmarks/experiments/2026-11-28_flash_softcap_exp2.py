"""Issue 25: the softcap's tanh with its exponential on the FMA pipe (triton_helpers.exp2_fma,
ATO_CAP_EXP2=fma) against MUFU.EX2 (the default) in the Gluon kernels (hopper._capped): a
softcapped score then takes two MUFU operations, not three. Not kept: the variant is
2026-11-28_flash_softcap_exp2.patch (git apply it first); results flash_options-ab.txt. Times against plain causal in the
same process (tools/fa_option_time.py: B4 H32 N4096 D128 bf16 causal, softcap 50), and o's and
the gradients' error against float64 at B1 H4 N1024. Run alternately in two processes:

    for m in mufu fma mufu fma; do ATO_CAP_EXP2=$m python3 benchmarks/experiments/2026-11-28_flash_softcap_exp2.py; done
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from fa_option_time import inputs, report, timed  # noqa: E402


def errors(cap=50.0):
    """Relative L2 errors of o, dq, dk, dv against a float64 softcapped causal softmax."""
    import torch

    import ato_torch

    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(1, 4, 1024, 128, device="cuda", generator=g) * 2 for _ in range(4))
    x = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    o = ato_torch.flash_attention(*x, causal=True, softcap=cap)
    o.backward(do.to(torch.bfloat16))
    r = [t.detach().double().requires_grad_() for t in x]
    s = cap * torch.tanh(r[0] @ r[1].transpose(-1, -2) / (128 ** 0.5 * cap))
    s = s.masked_fill(torch.ones(1024, 1024, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    ro = torch.softmax(s, -1) @ r[2]
    ro.backward(do.to(torch.bfloat16).double())
    rel = [((a.double() - b).norm() / b.norm()).item() for a, b in zip((o, *(t.grad for t in x)),
                                                                        (ro, *(t.grad for t in r)))]
    return ", ".join(f"{n} {e:.2e}" for n, e in zip(("o", "dq", "dk", "dv"), rel))


def main():
    print("ATO_CAP_EXP2", os.environ.get("ATO_CAP_EXP2", "mufu"), "| error against float64:", errors(), flush=True)
    x = inputs()
    report([timed("plain causal (Gluon)", *x), timed("softcap 50 (Gluon)", *x, softcap=50.0)])


if __name__ == "__main__":
    main()
