"""max_l2_coarsen, blocks of one tile: the winner's row stored from the tile by the threads that
hold it (a masked store) instead of read again at the program's end (the tree), a program a block
(experiments/2026-11-29_coarsen_store.patch) or programs looping over blocks with the next
blocks' loads in flight (..._coarsen_store_loop.patch: plans.COARSEN_PROGRAMS_PER_SM,
COARSEN_STAGES, WARPS). Not kept: both slower (results block_sparse-sweep). A first form, the row
summed out of the tile as integer bits, took 157 us against the tree's 77 at the bench shape.
Per-kernel device time (CUPTI, us), the share of the copy rate measured in the same process;
x_coarse and index against the first setting's (bit for bit). Each form in a process of its own,
2 rounds. Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_coarsen_store.py
(the patches apply to the tree at commit a894de5, before the Gluon coarsening).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

# (programs an SM, stages, warps); (0, 1, 4): a program a block
SETTINGS = {"tree": ((0, 1, 4),), "store": ((0, 1, 4), (0, 1, 2)),
            "store, loop": ((4, 1, 4), (4, 2, 4), (3, 3, 4), (2, 3, 4), (8, 2, 4), (4, 3, 8))}
FORMS = (("store, loop", ("benchmarks/experiments/2026-11-29_coarsen_store_loop.patch",)),
         ("store", ("benchmarks/experiments/2026-11-29_coarsen_store.patch",)), ("tree", ()))
SHAPES = (((1, 32, 32768, 128), 64, "bfloat16"), ((1, 32, 131072, 128), 64, "bfloat16"),
          ((2, 8, 4000, 72), 64, "float16"), ((1, 32, 32768, 256), 256, "bfloat16"))

if "--inner" in sys.argv:
    import torch

    import ato_torch
    from ato_cli import bench
    from ato_core.ops import OPS
    from ato_core.ops.block_sparse import plans

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    per = bench.device_kernels(lambda: dst.copy_(src), lambda out: torch.cuda.synchronize(), calls=20)
    copy = 2 * src.numel() / bench._device_ms(per) / 1e6
    del src, dst
    print(f"    copy 1 GiB {copy:.0f} GB/s (device)")
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = [(torch.randn(*s, device="cuda", generator=g).to(getattr(torch, dt)), bs) for s, bs, dt in SHAPES]
    refs = {}
    for pps, stages, warps in SETTINGS[sys.argv[-1]]:
        plans.COARSEN_PROGRAMS_PER_SM, plans.COARSEN_STAGES, plans.WARPS = pps, stages, warps
        plans.coarsen_plan.cache_clear()
        OPS["max_l2_coarsen"].cached_forward.cache_clear()
        cells = []
        for j, (x, bs) in enumerate(xs):
            try:
                xc, idx = ato_torch.max_l2_coarsen(x, bs)
                per = bench.device_kernels(lambda: ato_torch.max_l2_coarsen(x, bs),
                                           lambda out: torch.cuda.synchronize(), calls=20)
                us = bench._device_ms(per) * 1e3
                gbs = (x.numel() + xc.numel()) * x.element_size() / us / 1e3
                rx, ri = refs.setdefault(j, (xc, idx))
                same = torch.equal(xc.view(torch.int16), rx.view(torch.int16)) and torch.equal(idx, ri)
                flag = "" if same else " DIFFERENT"
                cells.append(f"{tuple(x.shape)} bs{bs} {us:6.1f} us {gbs / copy:.2f} of copy{flag}")
            except Exception as e:
                cells.append(f"{tuple(x.shape)} failed: {type(e).__name__}: {str(e)[:100]}")
        print(f"    programs/SM {pps} stages {stages} warps {warps}: " + " | ".join(cells), flush=True)
else:
    import torch

    from patched_tree import alternate_forms

    print(f"GPU {torch.cuda.get_device_name()}; max_l2_coarsen device us")
    alternate_forms("benchmarks/experiments/2026-11-29_coarsen_store.py", FORMS)
