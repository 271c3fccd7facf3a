"""Rotary position embedding of q and k, and its backward (the inverse rotation).

q [B, Hq, N, D] and k [B, Hkv, N, D], row-major; cos, sin [max_positions, W] row-major (W =
D/2, or D with each value at its pair's first element: see plans.table); position
of (b, n) = positions[b, n] (or n). Pair i of a head row, (x1, x2), is rotated by angle_i:
(x1 cos - x2 sin, x2 cos + x1 sin). INTERLEAVED: pairs are (x[2i], x[2i+1]) (GPT-J);
otherwise (x[i], x[i + D/2]) (LLaMA). SIGN = -1 rotates back (the backward). A position
outside [0, max_positions) reads cos = sin = 0 (its rows come out 0): nothing is read out
of bounds.

A program takes BLOCK_N positions of one batch row, loads their cos and sin once and
rotates a run of head tiles with them: tile t < cdiv(Hq, HEADS) holds heads [t * HEADS,
(t + 1) * HEADS) of q, the later tiles those of k. A tile is HEADS pieces of BLOCK_N * D
contiguous elements, all loaded before any is stored.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, widen


@triton.jit
def _rotate(X, OUT, b, h0, H, N, D, offs_n, nmask, c, s, offs_i, HALF,
            HEADS: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Rotates positions offs_n of heads [h0, h0 + HEADS) (those < H) of X [B, H, N, D]."""
    offs_h = h0 + tl.arange(0, HEADS)
    if INTERLEAVED:
        i1 = 2 * offs_i
        i2 = 2 * offs_i + 1
    else:
        i1 = offs_i
        i2 = offs_i + HALF
    m = (offs_h < H)[:, None, None] & nmask[None, :, None] & (offs_i < HALF)[None, None, :]
    row = (((b * H + offs_h.to(tl.int64)) * N)[:, None] + offs_n[None, :]) * D  # [HEADS, BLOCK_N]
    p1 = X + row[:, :, None] + i1[None, None, :]
    p2 = X + row[:, :, None] + i2[None, None, :]
    x1 = widen(tl.load(p1, mask=m, other=0.0))
    x2 = widen(tl.load(p2, mask=m, other=0.0))
    o1 = OUT + row[:, :, None] + i1[None, None, :]
    o2 = OUT + row[:, :, None] + i2[None, None, :]
    tl.store(o1, (x1 * c - x2 * s).to(OUT.dtype.element_ty), mask=m)
    tl.store(o2, (x2 * c + x1 * s).to(OUT.dtype.element_ty), mask=m)


@kernel(inputs=5, outputs=2)
def rope_kernel(
    Q, K, COS, SIN, POS,
    N, Hq, Hkv, D, max_pos, table_width, tiles_per_program,
    QO, KO,
    BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, HEADS: tl.constexpr, HAS_POS: tl.constexpr,
    INTERLEAVED: tl.constexpr, SIGN: tl.constexpr, ALIGN: tl.constexpr, TABLE_STEP: tl.constexpr,
    TABLE_ALIGN: tl.constexpr,
):
    """Grid (B * cdiv(N, BLOCK_N), cdiv(tiles, tiles_per_program)), tiles = cdiv(Hq, HEADS)
    + cdiv(Hkv, HEADS): positions [n0, n0 + BLOCK_N) of batch row b, tiles [t0, t0 +
    tiles_per_program). Pair i's cos and sin: column i * TABLE_STEP of a table row of
    table_width (a multiple of TABLE_ALIGN)."""
    blocks_n = tl.cdiv(N, BLOCK_N)
    b = (tl.program_id(0) // blocks_n).to(tl.int64)
    offs_n = (tl.program_id(0) % blocks_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    D = aligned(D, ALIGN)
    HALF = D // 2
    nmask = offs_n < N
    if HAS_POS:
        pos = tl.load(POS + b * N + offs_n, mask=nmask, other=0).to(tl.int64)
    else:
        pos = offs_n.to(tl.int64)
    ok = nmask & (pos >= 0) & (pos < max_pos)
    pos = tl.where(ok, pos, 0)  # an out-of-range position reads nothing and is zeroed
    offs_i = tl.arange(0, BLOCK_I)
    cs = pos[:, None] * aligned(table_width, TABLE_ALIGN) + offs_i[None, :] * TABLE_STEP
    cm = ok[:, None] & (offs_i < HALF)[None, :]
    c = widen(tl.load(COS + cs, mask=cm, other=0.0))[None, :, :]
    s = (widen(tl.load(SIN + cs, mask=cm, other=0.0)) * SIGN)[None, :, :]
    tiles_q = tl.cdiv(Hq, HEADS)
    tiles = tiles_q + tl.cdiv(Hkv, HEADS)
    t0 = tl.program_id(1) * tiles_per_program
    for t in range(t0, tl.minimum(t0 + tiles_per_program, tiles)):
        if t < tiles_q:
            _rotate(Q, QO, b, t * HEADS, Hq, N, D, offs_n, nmask, c, s, offs_i, HALF, HEADS, INTERLEAVED)
        else:
            _rotate(K, KO, b, (t - tiles_q) * HEADS, Hkv, N, D, offs_n, nmask, c, s, offs_i, HALF, HEADS,
                    INTERLEAVED)
