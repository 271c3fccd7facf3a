"""The final state's error against the float64 sum, B2 H4 N8192 d16 Dv64, fp16 and bf16, exact
and rounded (exact_state), Based's segments + scan against the causal state walk (plans.WALK
64,128,4,1), rows split into the constant, linear and quadratic parts. Not a test (on the GPU
machine, after ``source benchmarks/tools/gpu_env.sh``); results: NVIDIA_H200-based-walk.txt 11.
"""
import torch

import ato_torch
from ato_core import reference as ref
from ato_core.ops import OPS
from ato_core.ops.based import plans


def clear():
    for fn in (plans.forward_plan, plans.backward_plan):
        fn.cache_clear()
    OPS["based_attention"].cached_forward.cache_clear()


g = torch.Generator(device="cuda").manual_seed(6)
for dt in (torch.float16, torch.bfloat16):
    q, k = (torch.randn(2, 4, 8192, 16, device="cuda", generator=g).to(dt) for _ in range(2))
    v = torch.randn(2, 4, 8192, 64, device="cuda", generator=g).to(dt)
    fk = ref.taylor_feature_map(k.double())
    S_want, z_want = fk.transpose(-1, -2) @ v.double(), fk.sum(2)
    rel = lambda a, b: float((a.double() - b).norm() / b.norm())  # noqa: E731
    for name, waves, walk in (("segments", float("inf"), None), ("walk", 0.0, (64, 128, 4, 1))):
        plans.WALK_WAVES = waves
        if walk:
            plans.WALK = plans.StateSettings(*walk)
        clear()
        for exact in (True, False):
            _, (S, z) = ato_torch.based_attention(q, k, v, output_final_state=True, exact_state=exact)
            F = S.shape[-2]
            rows = {"const": slice(0, 1), "lin": slice(1, 17), "quad": slice(17, F)}
            print(dt, name, "exact" if exact else "rounded", f"S {rel(S, S_want):.2e} z {rel(z, z_want):.2e}",
                  " ".join(f"{r} {rel(S[..., sl, :], S_want[..., sl, :]):.1e}" for r, sl in rows.items()), flush=True)
