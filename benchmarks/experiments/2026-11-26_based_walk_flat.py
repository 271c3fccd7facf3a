"""Based's causal state walks with one flat loop over the sequence's chunks (start states
stored at each segment's first chunk, the finite flags read per chunk) instead of a loop per
segment, so that Triton's pipeliner can prefetch across segments: kernels._walk_quad
replaced, in this process only, by _walk_quad_flat below. Not a test.

Usage on the GPU machine (repository root, after ``source benchmarks/tools/gpu_env.sh``),
one process per form (Triton keys its cache on the walk's first compile):
    python benchmarks/experiments/2026-11-26_based_walk_flat.py base 64,128,4,1
    python benchmarks/experiments/2026-11-26_based_walk_flat.py flat 64,128,4,1 64,128,4,2 ...
Each setting is plans.WALK as features,chunk,warps,stages; B8 H16 N4096 d16 Dv64 bf16,
forward and forward+backward do_bench medians (us), per-kernel device time, and o, S, z, dq,
dk, dv compared bit for bit with the base form's first setting (saved in /tmp).
Run on b63c505 (plans.WALK_WAVES a float then; a Waves pair since).
"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import ato_torch
from ato_cli.bench import device_kernels
from ato_core.ops import based
from ato_core.ops.based import kernels as kern
from ato_core.ops.based import plans


@triton.jit
def _walk_quad_flat(x_base, y_base, rh, gh, fin, SS, ZS, SF, ZF, S0, Z0, bh, nseg, N, seg_len, t, d, Dv, F, q2,
                    offs_d, offs_v, dmask, vmask, write_z, sxn, sxd, syn, syd, DP: tl.constexpr, FT: tl.constexpr,
                    BV: tl.constexpr, CHUNK: tl.constexpr, EXACT: tl.constexpr, BWD: tl.constexpr,
                    REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr,
                    PRECISION: tl.constexpr):
    """kernels._walk_quad in one loop over the chunks (seg_len a multiple of CHUNK)."""
    a, b, r2, m = kern._quad_features(t, d, DP, FT)
    E1t, E2t, _, _ = kern._quad_tile(t, d, DP, FT, DOT_BF16, True)
    w = kern._pair_weight(t, d, FT) * q2
    S = tl.zeros([FT, BV], dtype=tl.float32)
    M = tl.zeros([FT, BV], dtype=tl.float32)
    z = tl.zeros([FT], dtype=tl.float32)
    nchunks = tl.cdiv(N, CHUNK)
    for i in range(0, nchunks):
        if REVERSE:
            c0 = (nchunks - 1 - i) * CHUNK
            first = ((c0 + CHUNK) % seg_len == 0) | (c0 + CHUNK >= N)
        else:
            c0 = i * CHUNK
            first = c0 % seg_len == 0
        seg = c0 // seg_len
        if first:
            kern._walk_rows(S * w[:, None], z * w, SS, ZS, bh * nseg + seg, r2, r2 < F, offs_v, vmask, Dv, F,
                            write_z, S0, Z0, bh, HAS_INIT)
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < N
        y, wr = kern._state_rows(y_base, rh, gh, rows, rmask, offs_v, vmask, syn, syd, BWD, ALIGN)
        if x_base.dtype.element_ty == tl.float32:
            p = kern._pair_products(x_base, rows, rmask, a, b, m, sxn, sxd, ALIGN)
        else:
            xt = tl.load(kern._tile_t(x_base, rows, offs_d, sxn, sxd, ALIGN), mask=dmask[:, None] & rmask[None, :],
                         other=0.0)
            p = kern._mm(E1t, xt, DOT_BF16, PRECISION) * kern._mm(E2t, xt, DOT_BF16, PRECISION)
            if tl.load(fin + seg) == 0:
                p = kern._pair_products(x_base, rows, rmask, a, b, m, sxn, sxd, ALIGN)
        h, r = kern._mm_split(p, y, EXACT, DOT_BF16, PRECISION)
        S += tl.where(vmask[None, :], h, 0.0)
        if EXACT:
            M += tl.where(vmask[None, :], r, 0.0)
        z += tl.sum(p * wr[None, :], axis=1)
    kern._walk_rows((S + M) * w[:, None], z * w, SF, ZF, bh, r2, r2 < F, offs_v, vmask, Dv, F, write_z, S0, Z0, bh,
                    False)


def main():
    form = sys.argv[1]
    if form == "flat":
        kern._walk_quad = _walk_quad_flat
    B, H, N, d, Dv = 8, 16, 4096, 16, 64
    print(f"GPU {torch.cuda.get_device_name()}; walk form {form}; based_attention causal B{B} H{H} N{N} d{d} Dv{Dv} "
          "bf16, do_bench medians (us)")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    v, do = (torch.randn(B, H, N, Dv, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_path = "/tmp/based_walk_base.pt"
    plans.WALK_WAVES = 0.0
    for setting in sys.argv[2:]:
        plans.WALK = plans.StateSettings(*map(int, setting.split(",")))
        for fn in (plans.forward_plan, plans.backward_plan):
            fn.cache_clear()
        based.BASED_ATTENTION.cached_forward.cache_clear()
        try:
            fwd = do_bench(lambda: ato_torch.based_attention(q, k, v), warmup=10, rep=100, return_mode="median")

            def fb():
                return torch.autograd.grad(ato_torch.based_attention(*leaves), leaves, do)

            fwdbwd = do_bench(fb, warmup=10, rep=100, return_mode="median")
            o, (S, z) = ato_torch.based_attention(*leaves, output_final_state=True)
            got = [o, S, z, *torch.autograd.grad(o, leaves, do)]
            if not os.path.exists(ref_path):
                torch.save(got, ref_path)
            ref = torch.load(ref_path)
            same = "".join("=" if torch.equal(x, y) else "x" for x, y in zip(got, ref))
            print(f"{form} {setting:12s} | fwd {fwd * 1e3:8.1f} | fwd+bwd {fwdbwd * 1e3:8.1f} | o,S,z,dq,dk,dv bitwise "
                  f"vs base: {same}", flush=True)
            per = device_kernels(fb, lambda out: torch.cuda.synchronize())
            print("    " + ", ".join(f"{name.replace('based_', '').replace('_kernel', '')[:24]} {us:.1f}"
                                     for name, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1])), flush=True)
        except Exception as exc:
            print(f"{form} {setting:12s} | {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
