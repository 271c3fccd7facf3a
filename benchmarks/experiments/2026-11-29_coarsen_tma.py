"""max_l2_coarsen: the Gluon kernel (block_sparse/hopper.py: persistent programs, a TMA ring of
STAGES tiles) at (programs an SM, STAGES) against the portable kernel (a program a block), in a
process of its own, 2 rounds; then curvature_block_mask's device time by kernel (q and k in one
Gluon launch, or a portable launch each). Sections 44-45 of NVIDIA_H200-block_sparse-sweep.txt ran
this script at earlier forms: with settings (programs an SM, STAGES, the winner's row from the
ring or read again from x, warps), and forms of the tile's reductions, "key" (one int64 max over
(norm bits, row)) against "reductions" (the maximum, the first row at it, a NaN check, each a
reduction across the warps: kernels._tile_winner with KEYS False, as the portable kernel runs it).
Per-kernel device time (CUPTI, us), the share of the copy rate measured in the same process;
x_coarse and index against the form's portable kernel's (bit for bit). Settings through
tests/helpers.plan_settings. Not a test. On the GPU machine:
python3 benchmarks/experiments/2026-11-29_coarsen_tma.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools"), os.path.join(ROOT, "tests")]

# (programs an SM, stages); None: the portable kernel
SETTINGS = (None, (4, 2))  # sections 44-46 swept (3, 4), (4, 3), (4, 2), (2, 6) and more
# (hopper.py's _tile_winner(..., True) made False: section 45's "reductions"). Section 48 ran ("tree", ()) and
# ("evict_last", ("benchmarks/experiments/2026-11-29_coarsen_evict_last.patch",)) at commit c965a6f: the patch,
# the coarse rows and indices stored with L2's evict_last priority, is in the tree since.
FORMS = (("tree", ()),)
SHAPES = (((1, 32, 32768, 128), 64, "bfloat16"), ((1, 32, 131072, 128), 64, "bfloat16"),
          ((1, 32, 32768, 128), 128, "bfloat16"), ((1, 32, 32768, 256), 256, "bfloat16"),
          ((2, 8, 4000, 64), 16, "float16"))

if "--inner" in sys.argv:
    import torch

    import ato_torch
    from ato_cli import bench
    from ato_core.ops.block_sparse import plans
    from helpers import plan_settings

    KEYS = ("PROGRAMS_PER_SM", "STAGES")

    def use(setting, op="max_l2_coarsen"):
        """The plans at ``setting`` inside the block (None: the portable kernel; plan_settings)."""
        if setting is None:
            return plan_settings(op, plans, [], _hopper_coarsen=lambda *a: False)
        return plan_settings(op, plans, [], HOPPER_COARSEN={**plans.HOPPER_COARSEN, **dict(zip(KEYS, setting))})

    def device_us(fn):
        return bench._device_ms(bench.device_kernels(fn, lambda out: torch.cuda.synchronize(), calls=20)) * 1e3

    def copy_rate():
        """GB/s of a 1 GiB device copy (read and write)."""
        src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return 2 * src.numel() / device_us(lambda: dst.copy_(src)) / 1e3

    copy = copy_rate()
    print(f"    copy 1 GiB {copy:.0f} GB/s (device)")
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = [(torch.randn(*s, device="cuda", generator=g).to(getattr(torch, dt)), bs) for s, bs, dt in SHAPES]
    refs = {}
    for setting in SETTINGS:
        cells = []
        with use(setting):
            for j, (x, bs) in enumerate(xs):
                try:
                    xc, idx = ato_torch.max_l2_coarsen(x, bs)
                    us = device_us(lambda: ato_torch.max_l2_coarsen(x, bs))
                    gbs = (x.numel() + xc.numel()) * x.element_size() / us / 1e3
                    rx, ri = refs.setdefault(j, (xc, idx))
                    differ = (int((idx != ri).sum())
                              + int((xc.view(torch.int16) != rx.view(torch.int16)).any(-1).sum()))
                    flag = f" {differ} DIFFER" if differ else ""
                    cells.append(f"{tuple(x.shape)} bs{bs} {us:6.1f} us {gbs / copy:.2f}{flag}")
                except Exception as e:
                    cells.append(f"{tuple(x.shape)} bs{bs} failed: {type(e).__name__}: {str(e)[:100]}")
        label = "portable" if setting is None else "gluon " + " ".join(f"{k} {v}" for k, v in zip(KEYS, setting))
        print(f"    {label}: " + " | ".join(cells), flush=True)

    q = torch.randn(1, 32, 32768, 128, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(1, 8, 32768, 128, device="cuda", generator=g).to(torch.bfloat16)
    first = None
    for setting in (None, SETTINGS[1]):
        with use(setting, "curvature_block_mask"):
            mask = ato_torch.curvature_block_mask(q, k)
            per = bench.device_kernels(lambda: ato_torch.curvature_block_mask(q, k),
                                       lambda out: torch.cuda.synchronize(), calls=20)
        first = mask if first is None else first
        parts = ", ".join(f"{name} {us:.1f}" for name, (_, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))
        label = "portable" if setting is None else f"gluon {setting}"
        print(f"    curvature_block_mask B1 Hq32 Hkv8 N32768 D128 bf16 block 64 keep 0.1 causal, {label}: total "
              f"{bench._device_ms(per) * 1e3:.1f} us ({parts}); mask equal {torch.equal(mask, first)}", flush=True)
else:
    import torch

    from patched_tree import alternate_forms

    print(f"GPU {torch.cuda.get_device_name()}; max_l2_coarsen device us")
    alternate_forms("benchmarks/experiments/2026-11-29_coarsen_tma.py", FORMS)
