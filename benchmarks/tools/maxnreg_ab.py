"""A register cap (Triton's maxnreg, Launch.maxnreg) tried on one family's kernels at its bench
shape, torch side (ato_torch.launcher._jit_launch patched in this process only; not a test).
Prints the forward (+ backward) do_bench median, each kernel's device time of one call, and
whether the results have the bits of the "none" run (the plans' own caps; saved in /tmp).
One process per cap, since the launcher keeps each launch's binary:

    python3 benchmarks/tools/maxnreg_ab.py FAMILY none
    python3 benchmarks/tools/maxnreg_ab.py FAMILY 168 [kernel names ...]   (default: every kernel)

FAMILY: based, decode, block_sparse, coarsen, coarsen_d72, linear_attention, layer_norm. Candidates (registers holding
them to 2 programs an SM or fewer): benchmarks/results/sm90-resources.txt, whose tool
(sm90_resources.py --maxnreg N) shows what a cap costs in stack before a GPU run. Written in
session 27 (from experiments/2026-11-26_based_maxnreg.py); run in session 28 on decode, linear_attention,
layer_norm and block_sparse (results: NVIDIA_H100_80GB_HBM3-maxnreg-ab.txt; every cap slower); in
session 54 on max_l2_coarsen (NVIDIA_H200-block_sparse-sweep.txt 43).
"""
import os
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_cli import bench
from ato_torch import launcher


def _rand(*shape, g):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)


def _fwd_bwd(fn, inputs, do):
    leaves = [t.clone().requires_grad_() for t in inputs]

    def run():
        out = fn(*leaves)
        return [out.detach(), *torch.autograd.grad(out, leaves, do)]

    return run


def family(name):
    """(shape label, a call returning the tensors to compare) at the family's bench shape."""
    g = torch.Generator(device="cuda").manual_seed(0)
    if name == "based":
        q, k = (_rand(8, 16, 4096, 16, g=g) for _ in range(2))
        v, do = (_rand(8, 16, 4096, 64, g=g) for _ in range(2))
        return "causal B8 H16 N4096 d16 Dv64", _fwd_bwd(ato_torch.based_attention, (q, k, v), do)
    if name == "linear_attention":
        q, k, v, do = (_rand(8, 16, 4096, 64, g=g) for _ in range(4))
        return "causal B8 H16 N4096 D64", _fwd_bwd(lambda *a: ato_torch.linear_attention(*a, causal=True), (q, k, v),
                                                   do)
    if name == "block_sparse":
        q, k, v, do = (_rand(1, 32, 32768, 128, g=g) for _ in range(4))
        mask = bench.random_block_mask(1, 32, 512, 0.1, "cuda")
        return "B1 H32 N32768 D128 block 64, 10% kept", _fwd_bwd(
            lambda *a: ato_torch.block_sparse_attention(*a, mask, block_size=64), (q, k, v), do)
    if name == "decode":
        (_, _, _, _, bs, _, _), (q, kc, vc, table, lens) = bench.shared_prefix_batch()
        sched = ato_torch.decode_schedule(table, lens, block_size=bs)
        return "B64 Hq32 Hkv8 prefix 4096+256 D128, shared-prefix schedule and seq-first", lambda: [
            ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched),
            ato_torch.decode_attention(q, kc, vc, table, lens)]
    if name in ("coarsen", "coarsen_d72"):  # max_l2_coarsen alone, blocks of 64
        D, dtype = (128, torch.bfloat16) if name == "coarsen" else (72, torch.float16)
        x = torch.randn(1, 32, 32768, D, device="cuda", generator=g).to(dtype)
        return f"B1 H32 N32768 D{D} {str(dtype)[6:]} block 64", lambda: list(ato_torch.max_l2_coarsen(x, 64))
    if name == "layer_norm":
        x, do = (_rand(16384, 4096, g=g) for _ in range(2))
        w, b = (_rand(4096, g=g) for _ in range(2))
        return "M16384 N4096", _fwd_bwd(ato_torch.layer_norm, (x, w, b), do)
    raise SystemExit(f"FAMILY: expected one of based, decode, block_sparse, coarsen, coarsen_d72, linear_attention, "
                     f"layer_norm, got {name!r}")


def main():
    name, cap, names = sys.argv[1], (None if sys.argv[2] == "none" else int(sys.argv[2])), set(sys.argv[3:])
    jit_launch = launcher._jit_launch

    def capped(kernel, launch, args):
        if cap is None or (names and launch.name not in names):
            return jit_launch(kernel, launch, args)
        return kernel[launch.grid](*args, **launch.constexprs, num_warps=launch.num_warps,
                                   num_stages=launch.num_stages, enable_fp_fusion=launch.fp_fusion, maxnreg=cap)

    launcher._jit_launch = capped
    shape, call = family(name)
    got = call()
    ref_path = f"/tmp/maxnreg_ab_{name}.pt"
    if cap is None:
        torch.save(got, ref_path)
    same = "".join("=" if torch.equal(a, b) else "x" for a, b in zip(got, torch.load(ref_path))) \
        if os.path.exists(ref_path) else "?"
    ms = do_bench(call, warmup=10, rep=100, return_mode="median")
    per = bench.device_kernels(call, lambda out: torch.cuda.synchronize())
    print(f"GPU {torch.cuda.get_device_name()}; {name} {shape}; maxnreg {cap} on {','.join(sorted(names)) or 'all'}"
          f" | {ms * 1e3:8.1f} us | bits vs none: {same}", flush=True)
    print("    " + ", ".join(f"{n} {us:.1f}" for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:8]),
          flush=True)


if __name__ == "__main__":
    main()
