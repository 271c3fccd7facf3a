"""Tile sweep of flash_attention's kernels on the GPU (not a test; prints timings).

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``: python benchmarks/tools/fa_sweep.py
[D,...]. For the bench shapes (bf16, B4 N4096, H32 at D128 and H64 at D64), causal and not,
times each kernel of the plan alone (do_bench median), built with each candidate Tiles
(the plans' settings argument), and prints the kernel's own TFLOP/s (forward: 2 matmuls; dK/dV: 4; dQ: 3,
each 2*N^2*D per head, halved when causal). The winners go into
ato_core/ops/flash_attention/plans.py (_GPU_TILES).
"""

import sys

import torch
from triton.testing import do_bench

from ato_core.ops.flash_attention import plans as fa
from ato_core.ops.flash_attention.plans import Tiles
from ato_core.launch import Plan
from ato_torch import launcher as tlaunch
from ato_torch.launcher import spec

FWD = [Tiles(128, 64, 4, 3), Tiles(128, 64, 8, 3), Tiles(128, 128, 8, 2), Tiles(128, 128, 8, 3),
       Tiles(64, 64, 4, 3), Tiles(128, 64, 8, 4)]
DKDV = [Tiles(32, 128, 4, 3), Tiles(64, 128, 8, 3), Tiles(32, 128, 4, 5), Tiles(64, 64, 4, 3),
        Tiles(64, 128, 8, 2), Tiles(32, 128, 8, 3)]
DQ = [Tiles(128, 32, 4, 3), Tiles(128, 64, 8, 3), Tiles(64, 64, 4, 3), Tiles(128, 32, 8, 3),
      Tiles(128, 64, 8, 2)]
MATMULS = {"fa_fwd_kernel": 2, "fa_bwd_dkdv_kernel": 4, "fa_bwd_dq_kernel": 3}


def _time(launch, env, target):
    sub = Plan((launch,), tuple(b.name for b in launch.outputs))
    return do_bench(lambda: tlaunch.run_plan(sub, env, target), warmup=10, rep=60, return_mode="median")


def main(dims, shapes=None, which=(0, 1, 2), cands=None):
    """Sweeps the bench shapes of head dims ``dims``, or ``shapes`` [(B, H, N, D)], for the kernels
    ``which`` (0 forward, 1 dK/dV, 2 dQ) over ``cands`` (default FWD, DKDV, DQ)."""
    cands = cands or (FWD, DKDV, DQ)
    for B, H, N, D in shapes or [(4, 4096 // D, 4096, D) for D in dims]:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        target = tlaunch.target_for(q)
        for causal in (False, True):
            unit = 2 * B * H * N * N * D * (0.5 if causal else 1.0)
            fplan = fa.forward_plan(spec(q), spec(k), spec(v), causal=causal, softmax_scale=None, target=target)
            o, lse = tlaunch.run_plan(fplan, {"q": q, "k": k, "v": v}, target)[:2]
            bplan = fa.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, softmax_scale=None,
                                     has_dlse=False, target=target)
            env = {"q": q, "k": k, "v": v, "do": do, "o": o, "lse": lse}
            delta, lse2 = tlaunch.run_plan(Plan(bplan.launches[:1], ("delta", "lse2")), env, target)
            env.update(delta=delta, lse2=lse2)
            print(f"B{B} N{N} D{D} H{H} causal={causal}: {bplan.launches[0].name} {_time(bplan.launches[0], env, target) * 1e3:.1f} us",
                  flush=True)
            cfg = fa.config(D, "bfloat16", target)
            default = fa.Settings(cfg.fwd, cfg.dkdv, cfg.dq)

            def retiled(kind, tiles):
                """The launch of kernel ``kind`` (0 forward, 1 dK/dV, 2 dQ) in a plan built with ``tiles``."""
                s = default._replace(**{("fwd", "dkdv", "dq")[kind]: tiles})
                if kind == 0:
                    return fa.forward_plan(spec(q), spec(k), spec(v), causal=causal, softmax_scale=None, target=target,
                                           settings=s).launches[0]
                return fa.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, softmax_scale=None,
                                        has_dlse=False, target=target, settings=s).launches[kind]

            for kind, launch in ((0, fplan.launches[0]), (1, bplan.launches[1]), (2, bplan.launches[2])):
                if kind not in which:
                    continue
                best = None
                for tiles in cands[kind]:
                    try:
                        ms = _time(retiled(kind, tiles), env, target)
                    except Exception as exc:  # e.g. out of shared memory
                        print(f"  {launch.name:20s} {tiles}: {type(exc).__name__} {str(exc)[:80]}", flush=True)
                        continue
                    tf = MATMULS[launch.name] * unit / ms / 1e9
                    best = min(best or (ms, tiles), (ms, tiles), key=lambda x: x[0])
                    print(f"  {launch.name:20s} m{tiles.m:<3d} n{tiles.n:<3d} w{tiles.warps} s{tiles.stages}: "
                          f"{ms * 1e3:8.1f} us {tf:6.0f} TFLOP/s", flush=True)
                if best:
                    print(f"  best {launch.name}: {best[1]} {best[0] * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main([int(d) for d in sys.argv[1].split(",")] if len(sys.argv) > 1 else [128, 64])
