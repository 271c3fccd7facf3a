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
def _rotate(X, OUT, b, h, H, N, D, offs_n, nmask, c, s, offs_i, HALF, INTERLEAVED: tl.constexpr):
    """Rotates rows offs_n of head h of X [B, H, N, D] (a contiguous [BLOCK_N, D] piece)."""
    imask = offs_i < HALF
    if INTERLEAVED:
        i1 = 2 * offs_i
        i2 = 2 * offs_i + 1
    else:
        i1 = offs_i
        i2 = offs_i + HALF
    m = nmask[:, None] & imask[None, :]
    row = ((b * H + h) * N + offs_n.to(tl.int64)) * D
    x1 = tl.load(X + row[:, None] + i1[None, :], mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(X + row[:, None] + i2[None, :], mask=m, other=0.0).to(tl.float32)
    tl.store(OUT + row[:, None] + i1[None, :], (x1 * c - x2 * s).to(OUT.dtype.element_ty), mask=m)
    tl.store(OUT + row[:, None] + i2[None, :], (x2 * c + x1 * s).to(OUT.dtype.element_ty), mask=m)


@triton.jit
def rope_kernel(
    Q, K, COS, SIN, POS,
    N, Hq, Hkv, D, max_pos,
    QO, KO,
    BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, HAS_POS: tl.constexpr, INTERLEAVED: tl.constexpr,
    SIGN: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B * (Hq + Hkv), cdiv(N, BLOCK_N)): BLOCK_N consecutive positions of one head of
    q (axis-0 index h < Hq) or k: a contiguous piece of memory, read and written whole."""
    bh = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = (bh // (Hq + Hkv)).to(tl.int64)
    h = (bh % (Hq + Hkv)).to(tl.int64)
    D = aligned(D, ALIGN)
    HALF = D // 2
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    if HAS_POS:
        pos = tl.load(POS + b * N + offs_n, mask=nmask, other=0).to(tl.int64)
    else:
        pos = offs_n.to(tl.int64)
    ok = nmask & (pos >= 0) & (pos < max_pos)
    pos = tl.where(ok, pos, 0)  # an out-of-range position reads nothing and is zeroed
    offs_i = tl.arange(0, BLOCK_I)
    cs = pos[:, None] * HALF + offs_i[None, :]
    cm = ok[:, None] & (offs_i < HALF)[None, :]
    c = tl.load(COS + cs, mask=cm, other=0.0).to(tl.float32)
    s = tl.load(SIN + cs, mask=cm, other=0.0).to(tl.float32) * SIGN
    if h < Hq:
        _rotate(Q, QO, b, h, Hq, N, D, offs_n, nmask, c, s, offs_i, HALF, INTERLEAVED)
    else:
        _rotate(K, KO, b, h - Hq, Hkv, N, D, offs_n, nmask, c, s, offs_i, HALF, INTERLEAVED)
