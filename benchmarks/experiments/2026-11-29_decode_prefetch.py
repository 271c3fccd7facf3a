"""decode_attention's split kernel with each tile's block ids loaded a tile ahead (so Triton's
pipeliner can double-buffer the K / V gathers: experiments/2026-11-29_decode_prefetch.patch)
against the tree (the ids loaded in the tile: one K / V buffer, every copy awaited at the tile's
start), at several (plans.TOKENS, plans.STAGES). Batches: the no-sharing bench rows (N 8192;
B64 bs16 and bs64, B8, B1), the tails alone (B64 N256) and the shared-prefix bench batch. Per-
kernel device time (CUPTI, us), torch's SDPA on the same keys laid out contiguously in the same
process; each form in a process of its own, 2 alternating rounds. Not a test. On the GPU machine:
python3 benchmarks/experiments/2026-11-29_decode_prefetch.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]

SETTINGS = {"tree": ((64, 2), (32, 3)), "prefetch": ((64, 3), (64, 4), (32, 3), (32, 4), (32, 5))}

if "--inner" in sys.argv:
    import torch
    import torch.nn.functional as F

    from ato_cli import bench
    from ato_core.ops import OPS
    from ato_core.ops.decode import plans
    from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule
    from decode_kernels import row

    batches = {}
    (B, Hq, Hkv, D, BS, P, T), shared = bench.shared_prefix_batch()
    batches["shared"] = (shared, DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
        shared[3].cpu().numpy(), shared[4].cpu().numpy(), block_size=BS))))
    batches["tails B64 N256"] = (bench.paged_batch(64, 16, N=256), None)
    sdpa = []
    for b, bs in ((64, 16), (64, 64), (8, 16), (1, 16)):
        args = bench.paged_batch(b, bs)
        batches[f"B{b} bs{bs}"] = (args, None)
        q, kc, vc, table, _ = args
        k, v = (c[table.long()].reshape(b, 8192, 8, 128).transpose(1, 2).contiguous() for c in (kc, vc))
        per = bench.device_kernels(lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True),
                                   lambda out: torch.cuda.synchronize(), calls=50)
        sdpa.append(f"B{b} bs{bs} {bench._device_ms(per) * 1e3:.1f}")
        del k, v
    print(f"    SDPA contiguous: {' | '.join(sdpa)}")
    refs = {}
    for tokens, stages in SETTINGS[sys.argv[-1]]:
        plans.TOKENS, plans.STAGES = tokens, stages
        plans.decode_plan.cache_clear()
        OPS["decode_attention"].cached_forward.cache_clear()
        print(f"    tokens {tokens} stages {stages}: " + row(batches, refs, "the first setting's"), flush=True)
else:
    import torch

    from patched_tree import alternate_forms

    print(f"GPU {torch.cuda.get_device_name()}; Hq32 Hkv8 D128 bf16; device us (kernels: split, combine, chunk)")
    alternate_forms("benchmarks/experiments/2026-11-29_decode_prefetch.py",
                    (("prefetch", ("benchmarks/experiments/2026-11-29_decode_prefetch.patch",)), ("tree", ())))
