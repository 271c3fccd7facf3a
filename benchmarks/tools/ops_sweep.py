"""Tuning of the transformer ops on the GPU, then their bench table with the winners (not a
test). On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``: python benchmarks/tools/ops_sweep.py
[--no-ce] (--no-ce: keep cross_entropy's settings), or ... --fwd / --ce (only that sweep).

--fwd sweeps the launch settings of the rope and swiglu forwards, each beside Liger and, from
JAX, XLA. Otherwise: sweeps cross_entropy (ce.Settings by loss+gradient, T8192 V128256 bf16,
then the loss alone's grid), prints every point and the fastest, then runs
``ato bench --op transformer_ops`` (the plans' SETTINGS) in this process and writes its table to $OUT. The winners
then go into the plans' SETTINGS (ato_core/ops/<op>/plans.py). Each point is a plan built with
that settings value and run through ato_torch's launcher. The norm backward's settings are
swept by device time in benchmarks/tools/norm_kernels.py --bwd-sweep.
"""

import os
import sys

import torch

import ato_torch
from ato_cli import bench
from ato_core.ops.cross_entropy import plans as ce
from ato_core.ops.norms import plans as norms
from ato_torch.launcher import run_plan, spec, target_for


def _sweep(label, points, make):
    """Times make(point)() (ato bench's torch method) at every point (a settings value);
    prints each and the fastest; returns (us, point)."""
    best = None
    for point in points:
        us = bench._bench_torch(make(point), False) * 1e3
        print(f"{label} {tuple(point)}: {us:7.1f} us", flush=True)
        best = min(best or (us, point), (us, point))
    print(f"best {label} {tuple(best[1])}: {best[0]:.1f} us", flush=True)
    return best


def _runner(plan, arrays, target):
    return lambda: run_plan(plan, arrays, target)


def _peers(label, torch_peers, jax_peers, jax_ato):
    """Prints the peers' times (torch: ato bench's method; JAX: back-to-back jitted calls) and
    ato's at its current SETTINGS."""
    import jax

    for name, fn in torch_peers.items():
        try:
            print(f"{label} {name}: {bench._bench_torch(fn, False) * 1e3:7.1f} us", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"{label} {name} not timed: {exc}")
    for name, (fn, args) in {**jax_peers, "ato_jax": jax_ato}.items():
        print(f"{label} {name}: {bench._median_jax(jax.jit(fn), *args, reps=7, calls=50) * 1e3:7.1f} us", flush=True)


def fwd_sweep():
    """The forwards of the bench table: rope (positions per program x elements per tile x
    tiles per program x warps) and swiglu (elements per program x warps), each beside Liger
    and, from JAX, XLA's jitted version of the same math, timed in the same run. FWD_OPS
    (default rope,swiglu) picks them."""
    g = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    ops = os.environ.get("FWD_OPS", "rope,swiglu").split(",")
    if "rope" in ops:
        _rope_sweep(rnd)
    if "swiglu" in ops:
        _swiglu_sweep(rnd)


def _rope_sweep(rnd):
    import ato_jax
    from ato_core.ops.rope import plans as rope

    q, k = rnd(8, 32, 4096, 128), rnd(8, 8, 4096, 128)
    cos, sin = rnd(4096, 64), rnd(4096, 64)
    target = target_for(q)

    def make(pt):
        plan = rope.plan(spec(q), spec(k), spec(cos), spec(sin), None, interleaved=False, inverse=False, target=target,
                         settings=pt)
        return _runner(plan, {"q": q, "k": k, "cos": cos, "sin": sin}, target)
    pts = [rope.Settings(bn, el, t, w) for bn in (8, 16, 32) for el in (4096, 8192, 16384) for t in (1, 0)
           for w in (4, 8) if bn * 128 <= el]
    _sweep("rope fwd block_n/elements/tiles/warps", pts, make)
    args = bench.liger_rope_args(q, k, cos, sin)
    lr = bench.liger("liger_kernel.ops.rope:LigerRopeFunction")
    qj, kj, cj, sj = map(bench.to_jax_bf16, (q, k, cos, sin))
    _peers("rope fwd", {"ato_torch": lambda: ato_torch.rope(q, k, cos, sin), "Liger": lambda: lr.apply(*args)},
           {"jax jit (XLA)": (bench.xla_rope, (qj, kj, cj, sj))},
           (lambda a, b, c, d: ato_jax.rope(a, b, c, d), (qj, kj, cj, sj)))


def _swiglu_sweep(rnd):
    import ato_jax
    from ato_core.ops.swiglu import plans as swiglu

    ga, up = rnd(16384, 7168), rnd(16384, 7168)
    target = target_for(ga)

    def make(pt):
        plan = swiglu.forward_plan(spec(ga), spec(up), target=target, settings=pt)
        return _runner(plan, {"gate": ga, "up": up}, target)
    pts = [swiglu.SETTINGS._replace(fwd_block=b, fwd_warps=w) for b in (256, 512, 1024, 2048, 4096)
           for w in (1, 2, 4, 8, 16) if 64 * w <= b <= 512 * w]
    _sweep("swiglu fwd (block, warps, bwd block, bwd warps)", pts, make)
    ls = bench.liger("liger_kernel.ops.swiglu:LigerSiLUMulFunction")
    gj, uj = bench.to_jax_bf16(ga), bench.to_jax_bf16(up)
    _peers("swiglu fwd", {"ato_torch": lambda: ato_torch.swiglu(ga, up), "Liger": lambda: ls.apply(ga, up)},
           {"jax jit (XLA)": (bench.xla_swiglu, (gj, uj))}, (lambda a, c: ato_jax.swiglu(a, c), (gj, uj)))


def main():
    if "--fwd" in sys.argv:
        return fwd_sweep()
    if "--ce" in sys.argv:
        return ce_sweep()
    if "--no-ce" in sys.argv:
        return _bench_table()
    ce_sweep()
    _bench_table()


def ce_sweep():
    """cross_entropy, T8192 V128256 bf16, beside Liger: the launch settings (ce.Settings) by
    loss+gradient, then the loss alone's programs per SM at the winner; the fastest set."""
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(8192, 128256, device="cuda", dtype=torch.bfloat16, generator=g)
    tgt = torch.randint(0, 128256, (8192,), device="cuda", generator=g)
    LigerCE = bench.liger("liger_kernel.transformers.cross_entropy:LigerCrossEntropyLoss")
    if LigerCE is None:
        print("Liger cross_entropy not timed: liger_kernel is not importable")
    else:
        lig = LigerCE()
        ms = bench._bench_torch(bench._torch_fwd_bwd(lambda a: lig(a, tgt), (logits,)), False)
        print(f"cross_entropy loss+grad Liger: {ms * 1e3:7.1f} us", flush=True)

    target = target_for(logits)
    dloss = torch.ones((), device="cuda")

    def make(settings, grad=True):
        kw = dict(ignore_index=-100, reduction="mean", label_smoothing=0.0, grad=grad, target=target,
                  settings=settings)
        fwd = ce.forward_plan(spec(logits), spec(tgt), **kw)
        arrays = {"logits": logits, "targets": tgt}
        if not grad:
            return _runner(fwd, arrays, target)
        bwd = ce.backward_plan(spec(logits), spec(dloss), target=target, settings=settings)

        def run():
            loss, dlogits = run_plan(fwd, arrays, target)
            return run_plan(bwd, {"dlogits": dlogits, "dloss": dloss}, target)
        return run

    S = ce.Settings
    _, best = _sweep("cross_entropy loss+grad (programs/SM, loss programs/SM, BLOCK_V, warps, VEC)",
                     [S(1, 1, 16384, 32, 16), S(1, 1, 16384, 32, 8), S(1, 1, 32768, 32, 16), S(1, 1, 8192, 32, 16),
                      S(2, 2, 16384, 16, 16)], make)
    _sweep("cross_entropy loss only (programs/SM, loss programs/SM, BLOCK_V, warps, VEC)",
           [best._replace(loss_programs_per_sm=p) for p in (1, 1.5, 2, 3)], lambda s: make(s, grad=False))


def _bench_table():
    torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name()
    settings = f"norms BWD_SETTINGS={tuple(norms.BWD_SETTINGS)} cross_entropy SETTINGS={tuple(ce.SETTINGS)}"
    bench.write_table(bench.transformer_ops_rows(False), os.environ.get("OUT", "/tmp/out"), gpu, "transformer_ops",
                      [f"GPU {gpu}; {bench._versions()}",
                       f"command: python benchmarks/tools/ops_sweep.py (ato bench --op transformer_ops with {settings})"])


if __name__ == "__main__":
    main()
