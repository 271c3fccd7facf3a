"""Rotary position embedding of q and k, and its backward (the inverse rotation).

q [B, Hq, N, D] and k [B, Hkv, N, D], row-major; cos, sin [max_positions, D/2]; position
of (b, n) = positions[b, n] (or n). Pair i of a head row, (x1, x2), is rotated by angle_i:
(x1 cos - x2 sin, x2 cos + x1 sin). INTERLEAVED: pairs are (x[2i], x[2i+1]) (GPT-J);
otherwise (x[i], x[i + D/2]) (LLaMA). SIGN = -1 rotates back (the backward). A position
outside [0, max_positions) reads cos = sin = 0 (its rows come out 0): nothing is read out
of bounds.
"""

import triton
import triton.language as tl

from .common import aligned


@triton.jit
def _rotate_heads(X, OUT, b, n, H, N, D, c, s, offs_h, offs_i, HALF, BLOCK_H: tl.constexpr,
                  INTERLEAVED: tl.constexpr):
    imask = offs_i < HALF
    if INTERLEAVED:
        i1 = 2 * offs_i
        i2 = 2 * offs_i + 1
    else:
        i1 = offs_i
        i2 = offs_i + HALF
    for h0 in range(0, H, BLOCK_H):
        heads = h0 + offs_h
        m = (heads < H)[:, None] & imask[None, :]
        row = ((b * H + heads.to(tl.int64)) * N + n) * D
        x1 = tl.load(X + row[:, None] + i1[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(X + row[:, None] + i2[None, :], mask=m, other=0.0).to(tl.float32)
        tl.store(OUT + row[:, None] + i1[None, :], (x1 * c - x2 * s).to(OUT.dtype.element_ty), mask=m)
        tl.store(OUT + row[:, None] + i2[None, :], (x2 * c + x1 * s).to(OUT.dtype.element_ty), mask=m)


@triton.jit
def rope_kernel(
    Q, K, COS, SIN, POS,
    N, Hq, Hkv, D, max_pos,
    QO, KO,
    BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, HAS_POS: tl.constexpr, INTERLEAVED: tl.constexpr,
    SIGN: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*N,). Every head of q and k at one (b, n)."""
    pid = tl.program_id(0)
    b = (pid // N).to(tl.int64)
    n = (pid % N).to(tl.int64)
    D = aligned(D, ALIGN)
    HALF = D // 2
    if HAS_POS:
        pos = tl.load(POS + b * N + n).to(tl.int64)
    else:
        pos = n
    ok = (pos >= 0) & (pos < max_pos)
    pos = tl.where(ok, pos, 0)  # an out-of-range position reads row 0 and is zeroed below
    offs_i = tl.arange(0, BLOCK_I)
    imask = offs_i < HALF
    c = tl.load(COS + pos * HALF + offs_i, mask=imask, other=0.0).to(tl.float32)
    s = tl.load(SIN + pos * HALF + offs_i, mask=imask, other=0.0).to(tl.float32)
    c = tl.where(ok, c, 0.0)[None, :]
    s = (tl.where(ok, s, 0.0) * SIGN)[None, :]
    offs_h = tl.arange(0, BLOCK_H)
    _rotate_heads(Q, QO, b, n, Hq, N, D, c, s, offs_h, offs_i, HALF, BLOCK_H, INTERLEAVED)
    _rotate_heads(K, KO, b, n, Hkv, N, D, c, s, offs_h, offs_i, HALF, BLOCK_H, INTERLEAVED)
