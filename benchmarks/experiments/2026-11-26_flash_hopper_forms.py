"""What Triton 3.6 reaches on Hopper for the flash forward (issue 22), outside ato's kernel:
a minimal forward (no options, [B, H, N, D] contiguous, N a multiple of the blocks) in the
forms of the results file (ptr, tma, ptrs, ptrs+tail, ptrs+tail+lse; FORMS=a,b picks some),
against ato's fa_fwd_kernel and SDPA's cuDNN backend in the same process, with each form's
registers and device time. Each form's o is checked against SDPA's. argv: tiles
"BLOCK_M,BLOCK_N,warps,stages" (default: two a head size).

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python3 benchmarks/experiments/2026-11-26_flash_hopper_forms.py
"""
import itertools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import ato_torch


@triton.jit
def _step(acc, m_i, l_i, q, k, v, qk_scale, rows, cols, MASK: tl.constexpr):
    # input_precision given: jax-triton's compile options carry no default for it
    s = tl.dot(q, tl.trans(k), input_precision="tf32") * qk_scale
    if MASK:
        s = tl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="tf32")
    return acc, m_new, l_i


@triton.jit
def fwd_kernel(Q, K, V, qk_scale, N, O, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
               CAUSAL: tl.constexpr, TMA: tl.constexpr, WS: tl.constexpr, PTRS: tl.constexpr = False,
               TAIL: tl.constexpr = False, LSE: tl.constexpr = False):
    # PTRS: k/v pointer tensors advanced each step, from runtime strides (ato's form); TAIL: a
    # masked loop over keys past the last full block (empty here), as ato's kernel has; LSE:
    # the log-sum-exp stored too (into O's last column block: timing only)
    if CAUSAL:
        pid = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        pid = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    row0 = bh * N
    first = pid * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    total = tl.num_programs(1) * N
    r32 = tl.program_id(1) * N  # descriptor coordinates are int32
    if TMA:
        dq = tl.make_tensor_descriptor(Q, [total, D], [D, 1], [BLOCK_M, D])
        dk = tl.make_tensor_descriptor(K, [total, D], [D, 1], [BLOCK_N, D])
        dv = tl.make_tensor_descriptor(V, [total, D], [D, 1], [BLOCK_N, D])
        q = dq.load([r32 + first, 0])
    else:
        q = tl.load(Q + (row0 + rows)[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = first if CAUSAL else N
    k_ptrs = K + row0 * D + offs_n[:, None] * D + offs_d[None, :]
    v_ptrs = V + row0 * D + offs_n[:, None] * D + offs_d[None, :]
    for start in tl.range(0, hi, BLOCK_N, warp_specialize=WS):
        if PTRS:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
            k_ptrs += BLOCK_N * D
            v_ptrs += BLOCK_N * D
        elif TMA:
            k = dk.load([r32 + start, 0])
            v = dv.load([r32 + start, 0])
        else:
            k = tl.load(K + (row0 + start + offs_n)[:, None] * D + offs_d[None, :])
            v = tl.load(V + (row0 + start + offs_n)[:, None] * D + offs_d[None, :])
        acc, m_i, l_i = _step(acc, m_i, l_i, q, k, v, qk_scale, rows, start + offs_n, False)
    if CAUSAL:
        for start in range(first, first + BLOCK_M, BLOCK_N):
            if TMA:
                k = dk.load([r32 + start, 0])
                v = dv.load([r32 + start, 0])
            else:
                k = tl.load(K + (row0 + start + offs_n)[:, None] * D + offs_d[None, :])
                v = tl.load(V + (row0 + start + offs_n)[:, None] * D + offs_d[None, :])
            acc, m_i, l_i = _step(acc, m_i, l_i, q, k, v, qk_scale, rows, start + offs_n, True)
    if TAIL:
        for start in range(hi // BLOCK_N * BLOCK_N + (N - hi), N, BLOCK_N):
            keys = start + offs_n
            k = tl.load(k_ptrs, mask=(keys < N)[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=(keys < N)[:, None], other=0.0)
            acc, m_i, l_i = _step(acc, m_i, l_i, q, k, v, qk_scale, rows, keys, True)
            k_ptrs += BLOCK_N * D
            v_ptrs += BLOCK_N * D
    if LSE:
        lse = m_i + tl.math.log2(l_i)
        tl.store(O + (row0 + rows) * D, lse.to(O.dtype.element_ty))
    o = (acc / l_i[:, None]).to(O.dtype.element_ty)
    tl.store(O + (row0 + rows)[:, None] * D + offs_d[None, :], o)


def minimal(q, k, v, causal, tma, ws, bm, bn, warps, stages, **flags):
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    compiled = fwd_kernel[(N // bm, B * H)](q, k, v, D ** -0.5 * 1.4426950408889634, N, o, BLOCK_M=bm, BLOCK_N=bn,
                                            D=D, CAUSAL=causal, TMA=tma, WS=ws, num_warps=warps, num_stages=stages,
                                            **flags)
    minimal.resources = f"regs {compiled.n_regs} spills {compiled.n_spills}"
    return o


def device_us(fn):
    """Device time of one call, all its kernels (torch.profiler): no host time."""
    from ato_cli.bench import device_kernels
    return sum(us for _, us in device_kernels(fn, lambda out: torch.cuda.synchronize()).values())


def main():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    print(f"GPU {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"bf16, do_bench medians")
    shapes = [(4, 32, 4096, 128), (16, 16, 1024, 64)]
    # (name, TMA, WS, flags): warp_specialize gives the same PTX on sm_90 (Triton 3.6), not timed
    forms = [("ptr", False, False, {}), ("tma", True, False, {}), ("ptrs", False, False, {"PTRS": True}),
             ("ptrs+tail", False, False, {"PTRS": True, "TAIL": True}),
             ("ptrs+tail+lse", False, False, {"PTRS": True, "TAIL": True, "LSE": True})]
    if os.environ.get("FORMS"):
        forms = [f for f in forms if f[0] in os.environ["FORMS"].split(",")]
    tiles = {128: [(128, 128, 8, 3), (128, 64, 8, 3)], 64: [(128, 64, 8, 3), (128, 128, 8, 3)]}
    if len(sys.argv) > 1:
        tiles = {D: [tuple(map(int, t.split(","))) for t in sys.argv[1:]] for D in tiles}
    for (B, H, N, D), causal in itertools.product(shapes, (False, True)):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        flop = 4 * B * H * N * N * D / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t_cudnn = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               warmup=25, rep=200, return_mode="median")
        t_ato = do_bench(lambda: ato_torch.flash_attention(q, k, v, causal=causal), warmup=25, rep=200,
                         return_mode="median")
        label = f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}"
        d_ato = device_us(lambda: ato_torch.flash_attention(q, k, v, causal=causal))
        print(f"{label:30s} cuDNN {t_cudnn * 1e3:8.1f} us {flop / t_cudnn / 1e9:6.0f} TFLOP/s | ato "
              f"{t_ato * 1e3:8.1f} us {flop / t_ato / 1e9:6.0f} TFLOP/s ({t_ato / t_cudnn:.2f}x cuDNN; device time "
              f"{d_ato:.1f} us)", flush=True)
        for (form, tma, ws, flags), (bm, bn, warps, stages) in itertools.product(forms, tiles[D]):
            name = f"  {form} {bm},{bn},{warps},{stages}"
            try:
                o = minimal(q, k, v, causal, tma, ws, bm, bn, warps, stages, **flags)
                err = float((o.float() - ref.float()).norm() / ref.float().norm())
                t = do_bench(lambda: minimal(q, k, v, causal, tma, ws, bm, bn, warps, stages, **flags), warmup=25,
                             rep=200, return_mode="median")
                d = device_us(lambda: minimal(q, k, v, causal, tma, ws, bm, bn, warps, stages, **flags))
                print(f"{name:30s} {t * 1e3:8.1f} us {flop / t / 1e9:6.0f} TFLOP/s ({t / t_cudnn:.2f}x cuDNN, "
                      f"{t / t_ato:.2f}x ato; device {d / d_ato:.2f}x ato's)  err {err:.1e}  {minimal.resources}",
                      flush=True)
            except Exception as exc:
                print(f"{name:30s} {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                      flush=True)


if __name__ == "__main__":
    main()
