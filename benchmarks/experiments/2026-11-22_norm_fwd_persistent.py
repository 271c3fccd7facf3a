"""Why the norm forward is one program per row (an experiment, not a test): ato's rms_norm
forward (norm_fwd_kernel, grid (M,)) beside stripped-down RMSNorm (and, --multi, LayerNorm) forwards at 16384 x 4096
bf16, by device time (CUPTI):

- ``fwd_rows``: ato's layout (one row a program) at 4, 8 and 16 warps, with and without an
  evict-first hint on the row's load;
- ``fwd_multi`` (with --multi): R rows a program as one tile, the weight loaded once for them;
- ``fwd_persistent``: what made the backward faster (NVIDIA_H100_80GB_HBM3-norm-bwd-sweep.txt):
  programs per SM x warps, each walking its rows with their loads pipelined through shared
  memory (tl.range num_stages).

On an H100 (NVIDIA_H100_80GB_HBM3-norm-fwd-persistent.txt) none beat one row a program at
8 warps (90.6-90.9 us, 2.95 TB/s: 98% of the GPU's copy rate) by more than noise: 2 rows at 16
warps 90.4-90.6 us; the persistent forms took 95 us and more.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
python benchmarks/experiments/2026-11-22_norm_fwd_persistent.py [--multi]
"""

import sys

import torch
import triton
import triton.language as tl

import ato_torch
from ato_cli import bench


@triton.jit
def fwd_persistent(X, W, Y, RSTD, M, eps, rows_per_program, N: tl.constexpr, BLOCK_N: tl.constexpr,
                   STAGES: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    w = tl.load(W + offs).to(tl.float32)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for r in tl.range(first, last, num_stages=STAGES):
        row = r.to(tl.int64)
        if EVICT:
            h = tl.load(X + row * N + offs, eviction_policy="evict_first").to(tl.float32)
        else:
            h = tl.load(X + row * N + offs).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, 0) / N + eps)
        tl.store(Y + row * N + offs, (h * rstd * w).to(Y.dtype.element_ty))
        tl.store(RSTD + row, rstd)


@triton.jit
def fwd_rows(X, W, Y, RSTD, M, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    if EVICT:
        h = tl.load(X + row * N + offs, eviction_policy="evict_first").to(tl.float32)
    else:
        h = tl.load(X + row * N + offs).to(tl.float32)
    w = tl.load(W + offs).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, 0) / N + eps)
    tl.store(Y + row * N + offs, (h * rstd * w).to(Y.dtype.element_ty))
    tl.store(RSTD + row, rstd)


@triton.jit
def fwd_multi(X, W, Y, RSTD, M, eps, N: tl.constexpr, BLOCK_N: tl.constexpr, R: tl.constexpr, LN: tl.constexpr):
    """R rows a program as one [R, BLOCK_N] tile (the weight loaded once for them)."""
    rows = tl.program_id(0).to(tl.int64) * R + tl.arange(0, R)
    offs = tl.arange(0, BLOCK_N)
    rmask = rows < M
    idx = rows[:, None] * N + offs[None, :]
    h = tl.load(X + idx, mask=rmask[:, None], other=0.0).to(tl.float32)
    w = tl.load(W + offs).to(tl.float32)
    if LN:
        mean = tl.sum(h, 1) / N
        h = h - mean[:, None]
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, 1) / N + eps)
    tl.store(Y + idx, (h * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty), mask=rmask[:, None])
    tl.store(RSTD + rows, rstd, mask=rmask)


def main():
    M, N = 16384, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.empty_like(x)
    rstd = torch.empty(M, device="cuda", dtype=torch.float32)
    ref = ato_torch.rms_norm(x, w)
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def dev(fn, calls=50):
        ks = bench.device_kernels(fn, lambda o: torch.cuda.synchronize(), calls)
        return sum(t for _, t in ks.values())
    print(f"ato rms_norm fwd: {dev(lambda: ato_torch.rms_norm(x, w)):.1f} us")
    for warps in (4, 8, 16):
        for ev in (False, True):
            f = lambda: fwd_rows[(M,)](x, w, y, rstd, M, 1e-6, N=N, BLOCK_N=N, EVICT=ev, num_warps=warps)
            t = dev(f)
            d = (y.float() - ref.float()).abs().max().item()
            print(f"rows warps {warps} evict {ev}: {t:.1f} us  max|diff| {d:.3g}", flush=True)
    res = []
    for p in (1, 2, 4, 8):
        G = sms * p
        rpp = triton.cdiv(M, G)
        G = triton.cdiv(M, rpp)
        for warps in (4, 8, 16):
            for st in (1, 2, 3, 4):
                f = lambda: fwd_persistent[(G,)](x, w, y, rstd, M, 1e-6, rpp, N=N, BLOCK_N=N, STAGES=st, EVICT=False,
                                                 num_warps=warps)
                try:
                    t = dev(f)
                except Exception as e:
                    print(p, warps, st, "failed", str(e)[:60]); continue
                res.append((t, p, warps, st))
                print(f"persistent {p}/SM warps {warps} stages {st}: {t:.1f} us", flush=True)
    print("best", sorted(res)[:4])
    if "--multi" not in sys.argv[1:]:
        return
    b = torch.zeros(N, device="cuda", dtype=torch.bfloat16)
    for rep in range(2):
        print(f"ato rms_norm fwd: {dev(lambda: ato_torch.rms_norm(x, w), 100):.1f} us; "
              f"layer_norm {dev(lambda: ato_torch.layer_norm(x, w, b), 100):.1f}", flush=True)
        for ln in (False, True):
            for R in (1, 2, 4):
                for warps in (4, 8, 16, 32):
                    if R * N // (32 * warps) > 64:
                        continue
                    f = lambda: fwd_multi[(triton.cdiv(M, R),)](x, w, y, rstd, M, 1e-6, N=N, BLOCK_N=N, R=R, LN=ln,
                                                               num_warps=warps)
                    t = dev(f, 100)
                    d = (y.float() - ref.float()).abs().max().item() if not ln else float("nan")
                    print(f"{'ln ' if ln else 'rms'} rows {R} warps {warps}: {t:.1f} us  max|diff| {d:.3g}", flush=True)


if __name__ == "__main__":
    main()
