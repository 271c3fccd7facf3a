"""Tuning of the transformer ops on the GPU, then their bench table with the winners (not a
test). On the GPU machine, after ``source benchmarks/gpu_env.sh``: python benchmarks/ops_sweep.py
[--no-ce] (--no-ce: keep cross_entropy's settings), or ... --rope / --ce (only that sweep).

Sweeps the layer_norm backward (programs per SM x warps; timed as forward+backward,
16384 x 4096 bf16) and cross_entropy (programs per SM x vocabulary piece x warps;
loss+gradient, T8192 V128256 bf16, and the loss alone), prints every point, sets the
fastest, then runs ``ato bench --op transformer_ops`` in this process and writes its table
to $OUT. The winners then go into ato_core/norms.py (BWD_PROGRAMS_PER_SM, BWD_WARPS) and
ato_core/cross_entropy.py (PROGRAMS_PER_SM, BLOCK_V, WARPS).
"""

import os
import sys

import torch

import ato_torch
from ato_cli import bench
from ato_core import cross_entropy as ce
from ato_core import norms


def rope_sweep():
    """rope forward, B8 N4096 Hq32 Hkv8 D128 bf16: elements per program x warps, beside Liger."""
    from ato_core import rope

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(8, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(8, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    cos, sin = (torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
        args = bench.liger_rope_args(q, k, cos, sin)
        ms = bench._bench_torch(lambda: LigerRopeFunction.apply(*args), False)
        print(f"rope fwd Liger: {ms * 1e3:7.1f} us", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"Liger rope not timed: {exc}")
    best = None
    for elements in (2048, 4096, 8192, 16384):
        for warps in (2, 4, 8):
            rope.ROPE_ELEMENTS, rope.ROPE_WARPS = elements, warps
            rope.plan.cache_clear()
            ms = bench._bench_torch(lambda: ato_torch.rope(q, k, cos, sin), False)
            print(f"rope fwd elements/program {elements:5d} warps {warps}: {ms * 1e3:7.1f} us", flush=True)
            best = min(best or (ms, elements, warps), (ms, elements, warps))
    print(f"best rope: elements/program {best[1]} warps {best[2]}: {best[0] * 1e3:.1f} us", flush=True)


def main():
    if "--rope" in sys.argv:
        return rope_sweep()
    if "--ce" in sys.argv:
        return ce_sweep()
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    x, dy = (torch.randn(16384, 4096, device="cuda", dtype=bf, generator=g) for _ in range(2))
    w, b = (torch.randn(4096, device="cuda", dtype=bf, generator=g) for _ in range(2))
    best = None
    for per_sm in (1, 2, 4, 8):
        for warps in (4, 8, 16):
            norms.BWD_PROGRAMS_PER_SM, norms.BWD_WARPS = per_sm, warps
            norms.backward_plan.cache_clear()
            ms = bench._bench_torch(bench._torch_fwd_bwd(lambda a, ww, bb: ato_torch.layer_norm(a, ww, bb), (x, w, b), dy), False)
            print(f"layer_norm fwd+bwd programs/SM {per_sm:2d} warps {warps:2d}: {ms * 1e3:7.1f} us", flush=True)
            best = min(best or (ms, per_sm, warps), (ms, per_sm, warps))
    norms.BWD_PROGRAMS_PER_SM, norms.BWD_WARPS = best[1], best[2]
    norms.backward_plan.cache_clear()
    print(f"best layer_norm backward: programs/SM {best[1]} warps {best[2]}: {best[0] * 1e3:.1f} us", flush=True)
    del x, dy
    if "--no-ce" in sys.argv:
        return _bench_table()
    ce_sweep()
    _bench_table()


def ce_sweep():
    """cross_entropy, T8192 V128256 bf16: loss+gradient and the loss alone (programs per SM x
    vocabulary piece x warps), beside Liger; sets the fastest by loss+gradient."""
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(8192, 128256, device="cuda", dtype=torch.bfloat16, generator=g)
    tgt = torch.randint(0, 128256, (8192,), device="cuda", generator=g)
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        lig = LigerCrossEntropyLoss()
        ms = bench._bench_torch(bench._torch_fwd_bwd(lambda a: lig(a, tgt), (logits,)), False)
        print(f"cross_entropy loss+grad Liger: {ms * 1e3:7.1f} us", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"Liger cross_entropy not timed: {exc}")

    def loss_only():
        with torch.no_grad():
            return ato_torch.cross_entropy(logits, tgt)
    best = None
    for per_sm in (0.75, 1, 2):
        for block, warps in ((8192, 16), (8192, 32), (16384, 32)):
            ce.PROGRAMS_PER_SM, ce.BLOCK_V, ce.WARPS = per_sm, block, warps
            ce.forward_plan.cache_clear()
            ce.backward_plan.cache_clear()
            ms = bench._bench_torch(bench._torch_fwd_bwd(lambda a: ato_torch.cross_entropy(a, tgt), (logits,)), False)
            label = f"programs/SM {per_sm} BLOCK_V {block:5d} warps {warps:2d}"
            print(f"cross_entropy loss+grad {label}: {ms * 1e3:7.1f} us", flush=True)
            print(f"cross_entropy loss only {label}: {bench._bench_torch(loss_only, False) * 1e3:7.1f} us", flush=True)
            best = min(best or (ms, per_sm, block, warps), (ms, per_sm, block, warps))
    ce.PROGRAMS_PER_SM, ce.BLOCK_V, ce.WARPS = best[1:]
    ce.forward_plan.cache_clear()
    ce.backward_plan.cache_clear()
    print(f"best cross_entropy: programs/SM {best[1]} BLOCK_V {best[2]} warps {best[3]}: "
          f"{best[0] * 1e3:.1f} us", flush=True)


def _bench_table():
    torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name()
    settings = (f"norms.BWD_PROGRAMS_PER_SM={norms.BWD_PROGRAMS_PER_SM} BWD_WARPS={norms.BWD_WARPS} "
                f"cross_entropy.PROGRAMS_PER_SM={ce.PROGRAMS_PER_SM} BLOCK_V={ce.BLOCK_V} WARPS={ce.WARPS}")
    bench.write_table(bench.transformer_ops_rows(False), os.environ.get("OUT", "/tmp/out"), gpu, "transformer_ops",
                      [f"GPU {gpu}; {bench._versions()}",
                       f"command: python benchmarks/ops_sweep.py (ato bench --op transformer_ops with {settings})"])


if __name__ == "__main__":
    main()
