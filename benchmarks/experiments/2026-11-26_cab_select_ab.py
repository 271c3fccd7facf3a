"""curvature_block_mask's select kernel with the values a row may not keep set to -2^31 (each
counting pass then compares without the mask) against the tree before, A/B in one process at the
bench shape (B1 H32 N32768 D128 bf16, blocks of 64, keep 0.1, causal and not): per kernel device
time (us, 10 calls) and the whole mask (do_bench median), 3 alternating rounds; masks equal.
Then NEW at settings, causal: ELEMENTS,WARPS of its select (plans.CAB_SELECT_ELEMENTS and
CAB_SELECT_WARPS: the plans of 994d008; the plans after it take ELEMENTS a warp, ELEMENTS,MAX_WARPS), or
dot:BM,BN,BK,WARPS,STAGES of An @ An (plans.CAB_DOT_TILES). Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_cab_select_ab.py OLD NEW [SETTING ...]
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch", "ato_cli.bench") for name, path in (("old", sys.argv[1]),
                                                                              ("new", sys.argv[2]))}
g = torch.Generator(device="cuda").manual_seed(1)
q, k = (torch.randn(1, 32, 32768, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
print(f"GPU {torch.cuda.get_device_name()}; B1 H32 N32768 D128 bf16, blocks of 64, keep 0.1 (us)")
for causal in (True, False):
    masks = {f: forms[f][0].curvature_block_mask(q, k, block_size=64, keep=0.1, causal=causal) for f in forms}
    if causal:
        masks_causal = masks["new"]
    print(f"  causal {causal}: masks equal {bool(torch.equal(masks['old'], masks['new']))}")
    for r in range(3):
        for f in (("old", "new") if r % 2 == 0 else ("new", "old")):
            ato, bench = forms[f]

            def call():
                return ato.curvature_block_mask(q, k, block_size=64, keep=0.1, causal=causal)
            ms = do_bench(call, return_mode="median") * 1e3
            per = bench.device_kernels(call, lambda out: torch.cuda.synchronize(), calls=10)
            print(f"    {f}: mask {ms:6.1f}  " + ", ".join(f"{n.replace('_kernel', '')} {us:.1f}" for n, (c, us) in
                                                       sorted(per.items(), key=lambda kv: -kv[1][1])), flush=True)

plans = sys.modules["ato_core.ops.block_sparse.plans"]  # NEW's, loaded last
ops = sys.modules["ato_core.ops"].OPS
ato, bench = forms["new"]
for setting in sys.argv[3:]:
    if setting.startswith("dot:"):
        plans.CAB_DOT_TILES["gpu"] = tuple(map(int, setting[4:].split(",")))
    elif hasattr(plans, "CAB_SELECT_MAX_WARPS"):
        plans.CAB_SELECT_ELEMENTS["gpu"], plans.CAB_SELECT_MAX_WARPS = map(int, setting.split(","))
    else:
        plans.CAB_SELECT_ELEMENTS["gpu"], plans.CAB_SELECT_WARPS = map(int, setting.split(","))
    plans.curvature_plan.cache_clear()
    ops["curvature_block_mask"].cached_forward.cache_clear()

    def call():
        return ato.curvature_block_mask(q, k, block_size=64, keep=0.1)
    same = bool(torch.equal(call(), masks_causal))
    per = bench.device_kernels(call, lambda out: torch.cuda.synchronize(), calls=10)
    print(f"  {setting}: select {per['cab_select_kernel'][1]:.1f} us, An @ An {per['cab_curvature_kernel'][1]:.1f} us, "
          f"mask equal {same}", flush=True)
