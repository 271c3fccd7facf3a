"""Based linear attention kernels: the Taylor feature map, the chunked passes (forward and
backward, causal and bidirectional) and the decoding step.

The feature map, with c = sqrt(scale) and x1 = c x:

    phi(x) = [1, x1, vec(x1 x1^T) / sqrt(2)]        (F = 1 + d + d^2 features)

so that phi(q) . phi(k) = 1 + s + s^2 / 2 with s = scale q . k.

The passes are those of linear_attention (ato_core/ops/linear_attention/kernels.py, which
derives the backward): per segment partial states, a scan over segments, then the output
(or gradient) passes from each segment's start state. Inside them states are packed
(_pair_weight): x_a x_b = x_b x_a, so one row per unordered pair, [Fp, Dv] with Fp = 1 + d
+ d (d // 2 + 1) (161 for d 16, not F = 273), which linear_attention's scan (la_scan_kernel, la_sum_kernel over Fp rows) combines.
based_pack_kernel and based_unpack_kernel convert from and to the public [F, Dv] (and [F])
fp32 layout, row 1 + d + a*d + b for the pair (a, b).

State passes: one program per (segment, tile of FT quadratic features, Dv tile); the
products x_a x_b come from two exact selector dots, already in the layout of the dot with
v. With enough B*H the causal passes walk instead (_walk): one program per (state row tile,
Dv tile, b*h) sums its rows over the whole sequence and writes each segment's start state,
with no partial states and no scan. Block kernels (output, dq, dk/dv): one program per block of BM rows and Dv tile, no
walk: the state term from the segment's start state, in feature tiles, plus the parallel
view over the segment's rows up to the block, s = scale q k^T and A = 1 + s + s^2/2
(masked on the diagonal block), as flash attention does. phi of a whole sequence never
exists anywhere.

Backward. With u_i = do_i / den_i and g_i = -(do_i . o_i) / den_i, the gradient of the
attention weights is P_ij = u_i . v_j + g_i, so ds_ij = P_ij (1 + s_ij) inside a segment, and
the state terms give dphi(q_i) = S_i u_i + z_i g_i, dphi(k_j) = R_j v_j + r_j,
dv_j = R_j^T phi(k_j) (R, r: reverse states). Each is a sum over Dv, so a program of one
Dv tile adds its part: dq and dk are summed over the tiles afterwards (based_sum_tiles_kernel)
when there is more than one; the g terms belong to tile 0. The chain rule through phi:
dx = c (w1 + (W2 + W2^T) x1 / sqrt(2)) for the gradient w = (w0, w1, W2) of phi(x).

Conventions as in linear_attention: input pointers, scalars, output pointers, constexprs;
(b, h, n, d) strides; int64 offsets; fp32 accumulation; DOT_BF16 / PRECISION choose the
dot operands.
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned
from ..linear_attention.kernels import (_finite_part, _head, _mm, _mm_exact, _program, _split, _tile,
                                        _walk_segment)

RSQRT2 = tl.constexpr(0.7071067811865476)


@triton.jit
def _features(x, c, rmask, DP: tl.constexpr, ROWS: tl.constexpr):
    """phi of a [ROWS, DP] tile (zero past d and on masked rows): (phi0 [ROWS], x1 [ROWS, DP],
    phi2 [ROWS, DP*DP]), fp32, elementwise: the feature-map kernels (the chunked ones: _phi)."""
    x1 = x.to(tl.float32) * c
    x2 = tl.reshape(x1[:, :, None] * x1[:, None, :], [ROWS, DP * DP]) * RSQRT2
    return tl.where(rmask, 1.0, 0.0), x1, x2


@triton.jit
def _features_grad(x1, w1, w2, c, DP: tl.constexpr, ROWS: tl.constexpr):
    """dx [ROWS, DP] of phi1 . w1 + phi2 . w2 at x1 = c x: c (w1 + (W2 + W2^T) x1 / sqrt(2))."""
    W = tl.reshape(w2, [ROWS, DP, DP])
    t = tl.sum(W * x1[:, None, :], axis=2) + tl.sum(W * x1[:, :, None], axis=1)
    return c * (w1 + t * RSQRT2)


@triton.jit
def _rows(d, DP: tl.constexpr):
    """Rows of the linear and quadratic tiles in the [F, ...] layout, with their masks."""
    a = tl.arange(0, DP)
    t = tl.arange(0, DP * DP)
    i = t // DP
    j = t % DP
    return 1 + a, a < d, 1 + d + i * d + j, (i < d) & (j < d)


@triton.jit
def _load_state(SS, ZS, sidx, F, Dv, d, offs_v, vmask, DP: tl.constexpr):
    """State sidx of SS ([.., F, Dv]) and ZS ([.., F]): (s0, s1, s2, z0, z1, z2)."""
    r1, m1, r2, m2 = _rows(d, DP)
    base = SS + sidx.to(tl.int64) * F * Dv
    s0 = tl.load(base + offs_v, mask=vmask, other=0.0)
    s1 = tl.load(base + r1[:, None] * Dv + offs_v[None, :], mask=m1[:, None] & vmask[None, :], other=0.0)
    s2 = tl.load(base + r2[:, None] * Dv + offs_v[None, :], mask=m2[:, None] & vmask[None, :], other=0.0)
    zb = ZS + sidx.to(tl.int64) * F
    return s0, s1, s2, tl.load(zb), tl.load(zb + r1, mask=m1, other=0.0), tl.load(zb + r2, mask=m2, other=0.0)


@triton.jit
def _store_state(SS, ZS, sidx, F, Dv, d, offs_v, vmask, s0, s1, s2, z0, z1, z2, write_z, DP: tl.constexpr):
    """Writes a state in the [F, Dv] layout; z only where ``write_z`` (Dv tile 0)."""
    r1, m1, r2, m2 = _rows(d, DP)
    base = SS + sidx.to(tl.int64) * F * Dv
    tl.store(base + offs_v, s0, mask=vmask)
    tl.store(base + r1[:, None] * Dv + offs_v[None, :], s1, mask=m1[:, None] & vmask[None, :])
    tl.store(base + r2[:, None] * Dv + offs_v[None, :], s2, mask=m2[:, None] & vmask[None, :])
    if write_z:
        zb = ZS + sidx.to(tl.int64) * F
        tl.store(zb, z0)
        tl.store(zb + r1, z1, mask=m1)
        tl.store(zb + r2, z2, mask=m2)


@triton.jit
def _weights(a, bt, scale, causal, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """(1 + s + s^2/2, s) of s = scale a bt on a block (bt: b^T, loaded so), zero where
    ``causal`` is false."""
    s = scale * _mm(a, bt, DOT_BF16, PRECISION)
    return tl.where(causal, 1.0 + s + 0.5 * s * s, 0.0), s


@triton.jit
def _tile_t(base, rows, cols, stride_n, stride_d, ALIGN: tl.constexpr):
    """_tile transposed: [cols, rows]. The block kernels load each operand in the orientation
    its dot takes (a tl.trans of a tensor that another dot also takes miscompiled, reading
    shared memory out of range: Triton 3.6, sm_90)."""
    return base + rows[None, :].to(tl.int64) * aligned(stride_n, ALIGN) + cols[:, None].to(tl.int64) * stride_d


@triton.jit
def _quad_features(t, d, DP: tl.constexpr, FT: tl.constexpr):
    """Quadratic feature tile t of the packed layout (_pair_weight), features j = t*FT + [0,
    FT): (a, b, their rows in the packed [Fp, ...] layout, their mask j < d (d // 2 + 1))."""
    j = t * FT + tl.arange(0, FT)
    o = j // d
    a = j % d
    b = (a + o) % d
    return a, b, 1 + d + j, j < d * (d // 2 + 1)


@triton.jit
def _pair_weight(t, d, FT: tl.constexpr):
    """The packed layout's weights of tile t [FT]. x_a x_b is symmetric in (a, b), so the
    chunked passes keep one row per unordered pair: feature j = o*d + a pairs a with b = (a
    + o) % d for the offsets o in [0, d // 2] (d (d // 2 + 1) rows, not d^2); offset d - o
    mirrors o, so its pairs are folded in with weight 2 (offset 0, and d/2 for an even d, hold
    each of theirs once: weight 1). A packed row is the weight times the public row (a, b)."""
    o = (t * FT + tl.arange(0, FT)) // d
    return tl.where((o == 0) | (2 * o == d), 1.0, 2.0)


@triton.jit
def _quad_tile(t, d, DP: tl.constexpr, FT: tl.constexpr, DOT_BF16: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """Quadratic feature tile t (_quad_features): the selectors E1, E2 [DP, FT] ((x E1)[:, j]
    = x[:, a], (x E2)[:, j] = x[:, b]; exact dots), or with TRANSPOSED E1^T, E2^T [FT, DP]
    (built as such: a transposed view of a dot operand in shared memory miscompiles in some
    layouts, Triton 3.6 on sm_90), the tile's rows in the [F, ...] layout and their mask."""
    a, b, rows, m = _quad_features(t, d, DP, FT)
    if TRANSPOSED:
        r = tl.arange(0, DP)[None, :]
        E1 = tl.where(a[:, None] == r, 1.0, 0.0)
        E2 = tl.where(b[:, None] == r, 1.0, 0.0)
    else:
        r = tl.arange(0, DP)[:, None]
        E1 = tl.where(a[None, :] == r, 1.0, 0.0)
        E2 = tl.where(b[None, :] == r, 1.0, 0.0)
    if DOT_BF16:
        E1 = E1.to(tl.bfloat16)
        E2 = E2.to(tl.bfloat16)
    return E1, E2, rows, m


@triton.jit
def _pair_products(x_base, rows, rmask, a, b, m, sn, sd, ALIGN: tl.constexpr):
    """x_a x_b [FT, rows] fp32 (the quadratic features a, b of _quad_features, mask m) of the
    rows x, transposed, both factors gathered from memory: exact for bf16 and fp16 inputs,
    and an infinite or NaN entry of x reaches only its own features."""
    mk = m[:, None] & rmask[None, :]
    xa = tl.load(_tile_t(x_base, rows, a, sn, sd, ALIGN), mask=mk, other=0.0).to(tl.float32)
    xb = tl.load(_tile_t(x_base, rows, b, sn, sd, ALIGN), mask=mk, other=0.0).to(tl.float32)
    return xa * xb


@triton.jit
def _state_program(H, d, Dv, nvt, ALIGN: tl.constexpr):
    """A state-pass program of grid (quadratic tiles * Dv tiles, segments, B*H): the programs
    of one segment are adjacent, so its rows are read from L2 after the first. Returns (bh,
    segment, quadratic tile, Dv tile, b, h, d, Dv)."""
    p = tl.program_id(0)
    s = tl.program_id(1)
    bh = tl.program_id(2)
    return bh, s, p // nvt, p % nvt, (bh // H).to(tl.int64), (bh % H).to(tl.int64), aligned(d, ALIGN), aligned(Dv, ALIGN)


@triton.jit
def _store_rows(base, zb, rows, m, offs_v, vmask, Dv, s, z, write_z):
    """Rows ``rows`` (mask m) of a state in the [F, Dv] layout: s [R, BV] at base, z [R] at
    zb where ``write_z`` (Dv tile 0)."""
    tl.store(base + rows[:, None] * Dv + offs_v[None, :], s, mask=m[:, None] & vmask[None, :])
    if write_z:
        tl.store(zb + rows, z, mask=m)


@triton.jit
def _state_rows(y_base, rh, gh, rows, rmask, offs_v, vmask, syn, syd, BWD: tl.constexpr, ALIGN: tl.constexpr):
    """The rows' values y [rows, BV] and weights w [rows] of a state: the forward's y = v
    (input dtype), w = 1; the backward's y = do / den, w = g (fp32)."""
    y = tl.load(_tile(y_base, rows, offs_v, syn, syd, ALIGN), mask=rmask[:, None] & vmask[None, :], other=0.0)
    if BWD:
        y = y.to(tl.float32) * tl.load(rh + rows, mask=rmask, other=0.0)[:, None]
        w = tl.load(gh + rows, mask=rmask, other=0.0)
    else:
        w = tl.where(rmask, 1.0, 0.0)
    return y, w


@triton.jit
def _quad_sums(x_base, y_base, rh, gh, start, end, t, d, offs_d, offs_v, dmask, vmask, sxn, sxd, syn, syd,
               DP: tl.constexpr, FT: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, GATHER: tl.constexpr,
               EXACT: tl.constexpr, BWD: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr,
               PRECISION: tl.constexpr):
    """Quadratic tile t of a state over the rows [start, end): sum p^T y [FT, BV] and sum p^T
    w [FT] with p = x_a x_b, unscaled (see _state_rows for y, w), and the sum of x - x (0
    when every x is finite, else NaN). The products: two exact selector dots, (E1^T x^T) * (E2^T x^T), in the layout the
    next dot takes (an infinite or NaN entry would spread to every feature: inf * 0, so
    _quad_partial then sums again with GATHER); with GATHER gathered from memory
    (_pair_products)."""
    a, b, _, m = _quad_features(t, d, DP, FT)
    E1t, E2t, _, _ = _quad_tile(t, d, DP, FT, DOT_BF16, True)
    acc = tl.zeros([FT, BV], dtype=tl.float32)
    accw = tl.zeros([FT], dtype=tl.float32)
    bad = tl.zeros([DP, CHUNK], dtype=tl.float32)  # x - x: 0, or NaN once an x is not finite
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        y, w = _state_rows(y_base, rh, gh, rows, rmask, offs_v, vmask, syn, syd, BWD, ALIGN)
        if GATHER:
            p = _pair_products(x_base, rows, rmask, a, b, m, sxn, sxd, ALIGN)
        else:
            xt = tl.load(_tile_t(x_base, rows, offs_d, sxn, sxd, ALIGN), mask=dmask[:, None] & rmask[None, :],
                         other=0.0)
            bad += xt.to(tl.float32) - xt.to(tl.float32)
            p = _mm(E1t, xt, DOT_BF16, PRECISION) * _mm(E2t, xt, DOT_BF16, PRECISION)
        if EXACT:
            acc += _mm_exact(p, y, DOT_BF16, PRECISION, 2)
        else:
            acc += _mm(p, y, DOT_BF16, PRECISION)
        accw += tl.sum(p * w[None, :], axis=1)
    return acc, accw, tl.sum(tl.sum(bad, axis=1), axis=0)


@triton.jit
def _quad_partial(x_base, y_base, rh, gh, start, end, t, d, q2, offs_d, offs_v, dmask, vmask, sxn, sxd, syn, syd,
                  DP: tl.constexpr, FT: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, EXACT: tl.constexpr,
                  BWD: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """Quadratic tile t of FT features over the rows [start, end) (_quad_sums), times q2 and
    the packed weights: (s2 [FT, BV], z2 [FT])."""
    # fp32 x gathered: a tf32 selector dot would round it. Else selector dots, and where an x
    # was not finite the rows again, gathered (branches outside the row loops: a branch
    # inside keeps them from pipelining)
    if x_base.dtype.element_ty == tl.float32:
        s2, z2, _ = _quad_sums(x_base, y_base, rh, gh, start, end, t, d, offs_d, offs_v, dmask, vmask, sxn, sxd, syn,
                               syd, DP, FT, BV, CHUNK, True, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
    else:
        s2, z2, nonfinite = _quad_sums(x_base, y_base, rh, gh, start, end, t, d, offs_d, offs_v, dmask, vmask, sxn,
                                       sxd, syn, syd, DP, FT, BV, CHUNK, False, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
        if nonfinite != 0:
            s2, z2, _ = _quad_sums(x_base, y_base, rh, gh, start, end, t, d, offs_d, offs_v, dmask, vmask, sxn, sxd,
                                   syn, syd, DP, FT, BV, CHUNK, True, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
    w = _pair_weight(t, d, FT) * q2
    return s2 * w[:, None], z2 * w


@triton.jit
def _quad_pass(x_base, y_base, rh, gh, base, zb, start, end, t, d, Dv, F, q2, offs_d, offs_v, dmask, vmask, write_z,
               sxn, sxd, syn, syd, DP: tl.constexpr, FT: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr,
               EXACT: tl.constexpr, BWD: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr,
               PRECISION: tl.constexpr):
    """_quad_partial's tile t, stored (every row of the tile below F: zeros past d)."""
    s2, z2 = _quad_partial(x_base, y_base, rh, gh, start, end, t, d, q2, offs_d, offs_v, dmask, vmask, sxn, sxd, syn,
                           syd, DP, FT, BV, CHUNK, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
    _, _, r2, _ = _quad_features(t, d, DP, FT)
    _store_rows(base, zb, r2, r2 < F, offs_v, vmask, Dv, s2, z2, write_z)


@triton.jit
def _linear_partial(x_base, y_base, rh, gh, start, end, c, offs_d, offs_v, dmask, vmask, sxn, sxd, syn, syd,
                    DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, BWD: tl.constexpr, ALIGN: tl.constexpr,
                    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """The constant and linear rows over the rows [start, end): (s0 [BV], s1 [DP, BV], z0,
    z1 [DP]), phi's scale c applied."""
    s0 = tl.zeros([BV], dtype=tl.float32)
    s1 = tl.zeros([DP, BV], dtype=tl.float32)
    z0 = tl.zeros([CHUNK], dtype=tl.float32)
    z1 = tl.zeros([DP], dtype=tl.float32)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        y, w = _state_rows(y_base, rh, gh, rows, rmask, offs_v, vmask, syn, syd, BWD, ALIGN)
        xt = tl.load(_tile_t(x_base, rows, offs_d, sxn, sxd, ALIGN), mask=dmask[:, None] & rmask[None, :],
                     other=0.0)
        s0 += tl.sum(y.to(tl.float32), axis=0)
        s1 += _mm(xt, y, DOT_BF16, PRECISION)
        z0 += w
        z1 += tl.sum(xt.to(tl.float32) * w[None, :], axis=1)
    return s0, s1 * c, tl.sum(z0, axis=0), z1 * c


@triton.jit
def _state_pass(x_base, y_base, rh, gh, SS, ZS, H, N, seg_len, d, Dv, F, nvt, nmain, c, sxn, sxd, syn, syd,
                DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr, EXACT: tl.constexpr,
                BWD: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """A state-pass program (see _state_program): the segment's sum phi(x) y^T and sum phi(x) w
    (_state_rows) on one Dv tile and one quadratic tile of the packed layout (_pair_weight):
    tiles [0, nmain) of FT features, then one of TT (the rest; none when TT is 0). The last
    tile's program also adds the constant and linear rows.
    Into SS [.., F, Dv] and ZS [.., F] (F packed; z on Dv tile 0). phi's scales (c, c^2 /
    sqrt(2)) are applied to the sums."""
    bh, s, t, vb, b, h, d, Dv = _state_program(H, d, Dv, nvt, ALIGN)
    offs_d = tl.arange(0, DP)
    offs_v = vb * BV + tl.arange(0, BV)
    dmask = offs_d < d
    vmask = offs_v < Dv
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    sidx = (bh * tl.num_programs(1) + s).to(tl.int64)
    base = SS + sidx * F * Dv
    zb = ZS + sidx * F
    q2 = c * c * RSQRT2
    if t < nmain:
        _quad_pass(x_base, y_base, rh, gh, base, zb, start, end, t, d, Dv, F, q2, offs_d, offs_v, dmask, vmask, vb == 0,
                   sxn, sxd, syn, syd, DP, FT, BV, CHUNK, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
    elif TT > 0:
        _quad_pass(x_base, y_base, rh, gh, base, zb, start, end, nmain * (FT // TT), d, Dv, F, q2, offs_d, offs_v,
                   dmask, vmask, vb == 0, sxn, sxd, syn, syd, DP, TT, BV, CHUNK, EXACT, BWD, ALIGN, DOT_BF16, PRECISION)
    if t == tl.num_programs(0) // nvt - 1:
        s0, s1, z0, z1 = _linear_partial(x_base, y_base, rh, gh, start, end, c, offs_d, offs_v, dmask, vmask, sxn,
                                         sxd, syn, syd, DP, BV, CHUNK, BWD, ALIGN, DOT_BF16, PRECISION)
        tl.store(base + offs_v, s0, mask=vmask)
        _store_rows(base, zb, 1 + offs_d, dmask, offs_v, vmask, Dv, s1, z1, vb == 0)
        if vb == 0:
            tl.store(zb, z0)


@kernel(inputs=2, outputs=2)
def based_state_kernel(
    K, V,
    H, N, seg_len, d, Dv, F, nvt, nmain, c,
    skb, skh, skn, skd, svb, svh, svn, svd,
    DS, DZ,
    DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, EXACT: tl.constexpr,
):
    """Grid (quadratic tiles * Dv tiles, segments, B*H). The segment's partial state sum
    phi(k) v^T and sum phi(k) on one tile of FT quadratic features and one Dv tile (z on Dv
    tile 0; quadratic tile 0 also the constant and linear rows). The products k_a k_b and k
    meet v unrounded (with EXACT: two bf16 terms; k is exact in one), and phi's scales are
    applied to the sums, so the state is exact but for fp32 sums."""
    bh = tl.program_id(2)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    _state_pass(_head(K, b, h, skb, skh, ALIGN), _head(V, b, h, svb, svh, ALIGN), K, K, DS, DZ, H, N, seg_len, d,
                Dv, F, nvt, nmain, c, skn, skd, svn, svd, DP, BV, FT, TT, CHUNK, EXACT, False, ALIGN, DOT_BF16, PRECISION)


@kernel(inputs=3, outputs=1)
def based_bwd_g_kernel(
    DO, O, RDEN,
    N, Dv, sdb, sdh, sdn, sdd, sob, soh, son, sod, H,
    G,
    ROWS: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, row blocks). g = -(do . o) / den, [B*H, N] fp32."""
    bh = tl.program_id(0)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    Dv = aligned(Dv, ALIGN)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    rmask = rows < N
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    o_base = _head(O, b, h, sob, soh, ALIGN)
    acc = tl.zeros([ROWS], dtype=tl.float32)
    for v0 in range(0, Dv, BV):
        offs_v = v0 + tl.arange(0, BV)
        m = rmask[:, None] & (offs_v < Dv)[None, :]
        do = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=m, other=0.0).to(tl.float32)
        o = tl.load(_tile(o_base, rows, offs_v, son, sod, ALIGN), mask=m, other=0.0).to(tl.float32)
        acc += tl.sum(do * o, axis=1)
    rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
    tl.store(G + bh.to(tl.int64) * N + rows, -acc * rden, mask=rmask)


@kernel(inputs=4, outputs=2)
def based_bwd_state_kernel(
    Q, DO, RDEN, G,
    H, N, seg_len, d, Dv, F, nvt, nmain, c,
    sqb, sqh, sqn, sqd, sdb, sdh, sdn, sdd,
    DR, DRZ,
    DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (quadratic tiles * Dv tiles, segments, B*H), as based_state_kernel. The segment's
    partial reverse state R = sum phi(q) u^T and r = sum phi(q) g (Dv tile 0), u = do / den."""
    bh = tl.program_id(2)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    _state_pass(_head(Q, b, h, sqb, sqh, ALIGN), _head(DO, b, h, sdb, sdh, ALIGN), RDEN + bh.to(tl.int64) * N,
                G + bh.to(tl.int64) * N, DR, DRZ, H, N, seg_len, d, Dv, F, nvt, nmain, c, sqn, sqd, sdn, sdd, DP, BV, FT,
                TT, CHUNK, False, True, ALIGN, DOT_BF16, PRECISION)


@triton.jit
def _mm_split(a, b, REST: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """(hi b, rest b) for fp32 a = hi + rest (_split; _mm_exact(a, b, TERMS=2) is their sum;
    an infinite or NaN a or b meets only hi). IEEE fp32 dots: (a b, 0). Without REST the
    second is 0 and costs nothing."""
    a = a.to(tl.float32)
    if DOT_BF16:
        hi, rest = _split(a, True)
        h = tl.dot(hi, b.to(tl.bfloat16))
    elif PRECISION == "tf32":
        b = b.to(tl.float32)
        hi, rest = _split(a, False)
        h = tl.dot(hi, b, input_precision="tf32")
    else:
        h = tl.dot(a, b.to(tl.float32), input_precision=PRECISION)
    r = tl.zeros(h.shape, dtype=tl.float32)
    if REST and PRECISION != "ieee":
        if DOT_BF16:
            r = tl.dot(rest.to(tl.bfloat16), _finite_part(b).to(tl.bfloat16))
        else:
            r = tl.dot(rest, _finite_part(b), input_precision="tf32")
    return h, r


@triton.jit
def _walk_rows(S, z, SS, ZS, idx, rows, m, offs_v, vmask, Dv, F, write_z, S0, Z0, bh, HAS_INIT: tl.constexpr):
    """Stores rows ``rows`` (mask m) of state idx of SS [.., F, Dv] (its dtype: the store
    rounds) and ZS [.., F] (where ``write_z``): S and z, plus the packed initial state S0,
    Z0 of bh with HAS_INIT."""
    if HAS_INIT:
        S += tl.load(S0 + bh * F * Dv + rows[:, None] * Dv + offs_v[None, :], mask=m[:, None] & vmask[None, :],
                     other=0.0)
        z += tl.load(Z0 + bh * F + rows, mask=m, other=0.0)
    _store_rows(SS + idx * F * Dv, ZS + idx * F, rows, m, offs_v, vmask, Dv, S, z, write_z)


@triton.jit
def _walk(x_base, y_base, rh, gh, fin, SS, ZS, R0, SF, ZF, S0, Z0, N, seg_len, d, Dv, F, nvt, nmain, c, sxn, sxd,
          syn, syd, DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr,
          EXACT: tl.constexpr, BWD: tl.constexpr, REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, ROW0: tl.constexpr,
          ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """A state walk's program, grid (row tiles * Dv tiles, B*H): the state pass and the
    causal scan in one. One tile of the packed layout's rows (quadratic tiles [0, nmain) of
    FT features, one of TT, then the constant and linear rows) is summed over the whole
    sequence, segment by segment (from the last with REVERSE), in registers. Writes each
    segment's start state to SS / ZS (row 0 also to R0, fp32, with ROW0) and the total from
    zero to SF / ZF; the start states add the packed S0 / Z0 with HAS_INIT (the public
    initial state is added to the total by based_unpack_kernel, keeping its asymmetric part).

    The start states take the products x_a x_b rounded to the dots' operand type (the block
    kernels read them in it); with EXACT the rest of each product is summed beside them
    (_mm_split) into the total only, so o is the same with or without the final state, and
    the final state is the fp32 sum of the unrounded features."""
    p = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    t = p // nvt
    vb = p % nvt
    d = aligned(d, ALIGN)
    Dv = aligned(Dv, ALIGN)
    nseg = tl.cdiv(N, seg_len)
    offs_d = tl.arange(0, DP)
    offs_v = vb * BV + tl.arange(0, BV)
    dmask = offs_d < d
    vmask = offs_v < Dv
    write_z = vb == 0
    q2 = c * c * RSQRT2
    if t < nmain:
        _walk_quad(x_base, y_base, rh, gh, fin, SS, ZS, SF, ZF, S0, Z0, bh, nseg, N, seg_len, t, d, Dv, F, q2, offs_d,
                   offs_v, dmask, vmask, write_z, sxn, sxd, syn, syd, DP, FT, BV, CHUNK, EXACT, BWD, REVERSE,
                   HAS_INIT, ALIGN, DOT_BF16, PRECISION)
    elif t < tl.num_programs(0) // nvt - 1:
        if TT > 0:  # (else no program has this t)
            _walk_quad(x_base, y_base, rh, gh, fin, SS, ZS, SF, ZF, S0, Z0, bh, nseg, N, seg_len, nmain * (FT // TT), d,
                       Dv, F, q2, offs_d, offs_v, dmask, vmask, write_z, sxn, sxd, syn, syd, DP, TT, BV, CHUNK, EXACT,
                       BWD, REVERSE, HAS_INIT, ALIGN, DOT_BF16, PRECISION)
    else:
        r1 = 1 + offs_d
        s0 = tl.zeros([BV], dtype=tl.float32)
        s1 = tl.zeros([DP, BV], dtype=tl.float32)
        z0 = tl.zeros([1], dtype=tl.float32)
        z1 = tl.zeros([DP], dtype=tl.float32)
        row0 = tl.arange(0, 1)
        for i in range(0, nseg):
            seg = _walk_segment(i, nseg, REVERSE)
            idx = bh * nseg + seg
            _walk_rows(s0[None, :], z0, SS, ZS, idx, row0, row0 == 0, offs_v, vmask, Dv, F, write_z, S0, Z0, bh,
                       HAS_INIT)
            if ROW0:
                s0i = s0
                if HAS_INIT:
                    s0i += tl.load(S0 + bh * F * Dv + offs_v, mask=vmask, other=0.0)
                tl.store(R0 + idx * Dv + offs_v, s0i, mask=vmask)
            _walk_rows(s1, z1, SS, ZS, idx, r1, dmask, offs_v, vmask, Dv, F, write_z, S0, Z0, bh, HAS_INIT)
            end = tl.minimum(seg * seg_len + seg_len, N)
            p0, p1, pz0, pz1 = _linear_partial(x_base, y_base, rh, gh, seg * seg_len, end, c, offs_d, offs_v, dmask,
                                               vmask, sxn, sxd, syn, syd, DP, BV, CHUNK, BWD, ALIGN, DOT_BF16,
                                               PRECISION)
            s0 += p0
            s1 += p1
            z0 += pz0
            z1 += pz1
        _walk_rows(s0[None, :], z0, SF, ZF, bh, row0, row0 == 0, offs_v, vmask, Dv, F, write_z, S0, Z0, bh, False)
        _walk_rows(s1, z1, SF, ZF, bh, r1, dmask, offs_v, vmask, Dv, F, write_z, S0, Z0, bh, False)


@triton.jit
def _walk_chunks(S, M, z, x_base, y_base, rh, gh, start, end, a, b, m, E1t, E2t, offs_d, offs_v, dmask, vmask, sxn,
                 sxd, syn, syd, CHUNK: tl.constexpr, GATHER: tl.constexpr, EXACT: tl.constexpr, BWD: tl.constexpr,
                 ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """_walk_quad's rows [start, end) added to S, M (EXACT) and z: the products from the
    selector dots, or gathered (_pair_products) with GATHER. One form a loop: a branch inside
    would join the forms' layouts, sending every product through shared memory."""
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        y, wr = _state_rows(y_base, rh, gh, rows, rmask, offs_v, vmask, syn, syd, BWD, ALIGN)
        if GATHER:
            p = _pair_products(x_base, rows, rmask, a, b, m, sxn, sxd, ALIGN)
        else:
            xt = tl.load(_tile_t(x_base, rows, offs_d, sxn, sxd, ALIGN), mask=dmask[:, None] & rmask[None, :],
                         other=0.0)
            p = _mm(E1t, xt, DOT_BF16, PRECISION) * _mm(E2t, xt, DOT_BF16, PRECISION)
        h, r = _mm_split(p, y, EXACT, DOT_BF16, PRECISION)
        # added as fp32 (the select keeps the compiler from accumulating the dots into S
        # and M in the tensor cores, whose adds into a large sum truncate: 30x the error
        # of the fp32 sum over 8192 rows on an H200)
        S += tl.where(vmask[None, :], h, 0.0)
        if EXACT:
            M += tl.where(vmask[None, :], r, 0.0)
        if BWD:
            z += tl.sum(p * wr[None, :], axis=1)
        else:  # (the forward's weights are 1, and p is 0 in masked rows)
            z += tl.sum(p, axis=1)
    return S, M, z


@triton.jit
def _walk_quad(x_base, y_base, rh, gh, fin, SS, ZS, SF, ZF, S0, Z0, bh, nseg, N, seg_len, t, d, Dv, F, q2, offs_d, offs_v,
               dmask, vmask, write_z, sxn, sxd, syn, syd, DP: tl.constexpr, FT: tl.constexpr, BV: tl.constexpr,
               CHUNK: tl.constexpr, EXACT: tl.constexpr, BWD: tl.constexpr, REVERSE: tl.constexpr,
               HAS_INIT: tl.constexpr, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """_walk's quadratic tile t of FT features. The products: selector dots (_quad_sums), or
    gathered (_pair_products) for fp32 x and in a segment with an infinite or NaN x (``fin``:
    based_finite_kernel's flags of x's segments)."""
    a, b, r2, m = _quad_features(t, d, DP, FT)
    E1t, E2t, _, _ = _quad_tile(t, d, DP, FT, DOT_BF16, True)
    w = _pair_weight(t, d, FT) * q2
    S = tl.zeros([FT, BV], dtype=tl.float32)
    M = tl.zeros([FT, BV], dtype=tl.float32)  # the products' rests (EXACT)
    z = tl.zeros([FT], dtype=tl.float32)
    for i in range(0, nseg):
        seg = _walk_segment(i, nseg, REVERSE)
        _walk_rows(S * w[:, None], z * w, SS, ZS, bh * nseg + seg, r2, r2 < F, offs_v, vmask, Dv, F, write_z, S0, Z0,
                   bh, HAS_INIT)
        start = seg * seg_len
        end = tl.minimum(start + seg_len, N)
        if x_base.dtype.element_ty == tl.float32:
            S, M, z = _walk_chunks(S, M, z, x_base, y_base, rh, gh, start, end, a, b, m, E1t, E2t, offs_d, offs_v,
                                   dmask, vmask, sxn, sxd, syn, syd, CHUNK, True, EXACT, BWD, ALIGN, DOT_BF16,
                                   PRECISION)
        elif tl.load(fin + seg) != 0:
            S, M, z = _walk_chunks(S, M, z, x_base, y_base, rh, gh, start, end, a, b, m, E1t, E2t, offs_d, offs_v,
                                   dmask, vmask, sxn, sxd, syn, syd, CHUNK, False, EXACT, BWD, ALIGN, DOT_BF16,
                                   PRECISION)
        else:
            S, M, z = _walk_chunks(S, M, z, x_base, y_base, rh, gh, start, end, a, b, m, E1t, E2t, offs_d, offs_v,
                                   dmask, vmask, sxn, sxd, syn, syd, CHUNK, True, EXACT, BWD, ALIGN, DOT_BF16,
                                   PRECISION)
    _walk_rows((S + M) * w[:, None], z * w, SF, ZF, bh, r2, r2 < F, offs_v, vmask, Dv, F, write_z, S0, Z0, bh, False)


@kernel(inputs=1, outputs=1)
def based_finite_kernel(X, H, N, seg_len, d, sxb, sxh, sxn, sxd, FIN, DP: tl.constexpr, ROWS: tl.constexpr,
                        ALIGN: tl.constexpr):
    """Grid (B*H, segments). FIN[bh * segments + segment] (int32) = 1 where every entry of x
    [B, H, N, d] in the segment's rows is finite, else 0: the state walks' choice of products."""
    bh = tl.program_id(0)
    seg = tl.program_id(1)
    x_base = _head(X, (bh // H).to(tl.int64), (bh % H).to(tl.int64), sxb, sxh, ALIGN)
    offs_d = tl.arange(0, DP)
    dmask = offs_d < aligned(d, ALIGN)
    end = tl.minimum(seg * seg_len + seg_len, N)
    bad = tl.zeros([ROWS, DP], dtype=tl.float32)  # x - x: 0, NaN once an x is not finite
    for r0 in range(seg * seg_len, end, ROWS):
        rows = r0 + tl.arange(0, ROWS)
        x = tl.load(_tile(x_base, rows, offs_d, sxn, sxd, ALIGN), mask=(rows < end)[:, None] & dmask[None, :],
                    other=0.0).to(tl.float32)
        bad += x - x
    tl.store(FIN + bh.to(tl.int64) * tl.num_programs(1) + seg, (tl.sum(tl.sum(bad, axis=1), axis=0) == 0).to(tl.int32))


@kernel(inputs=5, outputs=5)
def based_state_walk_kernel(
    K, V, FIN, S0, Z0,
    H, N, seg_len, d, Dv, F, nvt, nmain, c,
    skb, skh, skn, skd, svb, svh, svn, svd,
    SS, ZS, SF, ZF, R0,
    DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, EXACT: tl.constexpr,
    HAS_INIT: tl.constexpr, ROW0: tl.constexpr,
):
    """Grid (row tiles * Dv tiles, B*H): based_state_kernel and the causal scan in one walk
    (_walk): start states SS [.., nseg, F, Dv] (SS's dtype), ZS, row 0 R0 [.., nseg, Dv]
    (ROW0), the total from zero SF [.., F, Dv], ZF; F packed."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    _walk(_head(K, b, h, skb, skh, ALIGN), _head(V, b, h, svb, svh, ALIGN), K, K, FIN + bh.to(tl.int64) * tl.cdiv(N, seg_len),
          SS, ZS, R0, SF, ZF, S0, Z0, N,
          seg_len, d, Dv, F, nvt, nmain, c, skn, skd, svn, svd, DP, BV, FT, TT, CHUNK, EXACT, False, False, HAS_INIT,
          ROW0, ALIGN, DOT_BF16, PRECISION)


@kernel(inputs=7, outputs=5)
def based_bwd_state_walk_kernel(
    Q, DO, RDEN, G, FIN, S0, Z0,
    H, N, seg_len, d, Dv, F, nvt, nmain, c,
    sqb, sqh, sqn, sqd, sdb, sdh, sdn, sdd,
    SS, ZS, SF, ZF, R0,
    DP: tl.constexpr, BV: tl.constexpr, FT: tl.constexpr, TT: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
    HAS_INIT: tl.constexpr, ROW0: tl.constexpr,
):
    """Grid (row tiles * Dv tiles, B*H): based_bwd_state_kernel and the reverse scan in one
    walk from the last segment (_walk), outputs as based_state_walk_kernel's."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    _walk(_head(Q, b, h, sqb, sqh, ALIGN), _head(DO, b, h, sdb, sdh, ALIGN), RDEN + bh.to(tl.int64) * N,
          G + bh.to(tl.int64) * N, FIN + bh.to(tl.int64) * tl.cdiv(N, seg_len), SS, ZS, R0, SF, ZF, S0, Z0, N, seg_len, d, Dv, F, nvt, nmain, c, sqn, sqd, sdn, sdd,
          DP, BV, FT, TT, CHUNK, False, True, True, HAS_INIT, ROW0, ALIGN, DOT_BF16, PRECISION)


# Block kernels: one program per (b*h, block of BM rows, Dv tile), no walk. A causal block
# meets its segment's start state (the state term) and the segment's rows up to its own
# (the parallel view, block by block, as flash attention does): the segments are seg_len
# rows, a multiple of BM. The state is read in quadratic feature tiles of FT features.


@triton.jit
def _state_terms(x, y, gcol, rmask, SS, S0R, ZS, sidx, row0_stride, F, Dv, d, c, offs_v, vmask,
                 DP: tl.constexpr, FT: tl.constexpr, NMAIN: tl.constexpr, TT: tl.constexpr, FWD: tl.constexpr,
                 GRAD: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """Rows x [BM, DP] (raw q or k) against state sidx of SS [.., F, Dv] and ZS [.., F], one
    Dv tile. Returns (num, den, dx): with FWD num = phi(x) S [BM, BV] and den = phi(x) . z;
    with GRAD dx [BM, DP], the chain rule through phi of dphi(x) = S y + z gcol (y [BM, BV],
    gcol [BM]); zeros where not asked. S is read as [F, BV] for FWD and as S^T [BV, F] for
    GRAD (loaded so, not transposed in registers: see _quad_tile). SS may hold S in the dots'
    operand type; row 0, which meets phi's constant elementwise, is read in fp32 from S0R +
    sidx * row0_stride (SS itself when fp32: row0_stride F * Dv)."""
    offs_d = tl.arange(0, DP)
    m1 = offs_d < d
    base = SS + sidx.to(tl.int64) * F * Dv
    zb = ZS + sidx.to(tl.int64) * F
    z1 = tl.load(zb + 1 + offs_d, mask=m1, other=0.0)
    num = tl.zeros([x.shape[0], offs_v.shape[0]], dtype=tl.float32)
    den = tl.zeros([x.shape[0]], dtype=tl.float32)
    dx = tl.zeros([x.shape[0], DP], dtype=tl.float32)
    if FWD:
        x0 = tl.where(rmask, 1.0, 0.0)
        x1 = x.to(tl.float32) * c
        s1 = tl.load(base + (1 + offs_d)[:, None] * Dv + offs_v[None, :], mask=m1[:, None] & vmask[None, :],
                     other=0.0)
        s0 = tl.load(S0R + sidx.to(tl.int64) * row0_stride + offs_v, mask=vmask, other=0.0)
        num = x0[:, None] * s0[None, :] + _mm(x1, s1, DOT_BF16, PRECISION)
        den = x0 * tl.load(zb) + tl.sum(x1 * z1[None, :], axis=1)
    if GRAD:
        s1t = tl.load(base + (1 + offs_d)[None, :] * Dv + offs_v[:, None], mask=m1[None, :] & vmask[:, None],
                      other=0.0)
        dx = c * (_mm(y, s1t, DOT_BF16, PRECISION) + gcol[:, None] * z1[None, :])
    c2 = c * c * RSQRT2
    # the packed layout (_pair_weight): NMAIN tiles of FT features, then one of TT (if any)
    if PRECISION == "ieee":
        # FMA dots (fp32 inputs, one row): a runtime loop, which unrolled takes minutes to compile
        for t in range(0, NMAIN):
            num, den, dx = _state_tile(t, x, y, gcol, base, zb, Dv, d, c2, offs_v, vmask, num, den, dx, DP, FT, FWD,
                                       GRAD, DOT_BF16, PRECISION)
    else:
        for t in tl.static_range(NMAIN):  # unrolled: see _quad_tile
            num, den, dx = _state_tile(t, x, y, gcol, base, zb, Dv, d, c2, offs_v, vmask, num, den, dx, DP, FT, FWD,
                                       GRAD, DOT_BF16, PRECISION)
    if TT > 0:
        num, den, dx = _state_tile(NMAIN * (FT // TT), x, y, gcol, base, zb, Dv, d, c2, offs_v, vmask, num, den, dx,
                                   DP, TT, FWD, GRAD, DOT_BF16, PRECISION)
    return num, den, dx


@triton.jit
def _state_tile(t, x, y, gcol, base, zb, Dv, d, c2, offs_v, vmask, num, den, dx, DP: tl.constexpr, FT: tl.constexpr,
                FWD: tl.constexpr, GRAD: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """_state_terms' quadratic tile t, added to (num, den, dx)."""
    E1, E2, r2, m2 = _quad_tile(t, d, DP, FT, DOT_BF16)
    z2 = tl.load(zb + r2, mask=m2, other=0.0)
    xa = _mm(x, E1, DOT_BF16, PRECISION)
    xb = _mm(x, E2, DOT_BF16, PRECISION)
    if FWD:
        s2 = tl.load(base + r2[:, None] * Dv + offs_v[None, :], mask=m2[:, None] & vmask[None, :], other=0.0)
        x2 = xa * xb * c2
        num += _mm(x2, s2, DOT_BF16, PRECISION)
        den += tl.sum(x2 * z2[None, :], axis=1)
    if GRAD:
        E1t, E2t, _, _ = _quad_tile(t, d, DP, FT, DOT_BF16, True)
        s2t = tl.load(base + r2[None, :] * Dv + offs_v[:, None], mask=m2[None, :] & vmask[:, None], other=0.0)
        w2 = _mm(y, s2t, DOT_BF16, PRECISION) + gcol[:, None] * z2[None, :]
        dx += c2 * (_mm(w2 * xb, E1t, DOT_BF16, PRECISION) + _mm(w2 * xa, E2t, DOT_BF16, PRECISION))
    return num, den, dx


@triton.jit
def _block(H, N, d, Dv, seg_len, nseg_state, state_seg_mult, ALIGN: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, BM: tl.constexpr):
    """A block kernel's program of grid (B*H, row blocks, Dv tiles): (bh, b, h, d, Dv, Dv
    tile, its state's index bh * nseg_state + segment * state_seg_mult, the segment's first
    row, its first row, its rows and their mask, feature and Dv offsets and
    masks, 1.0 on Dv tile 0 else 0.0 (the g terms belong to tile 0))."""
    bh, blk, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    r0 = blk * BM
    seg = r0 // seg_len
    rows = r0 + tl.arange(0, BM)
    offs_d = tl.arange(0, DP)
    offs_v = vb * BV + tl.arange(0, BV)
    return (bh, b, h, d, Dv, vb, bh * nseg_state + seg * state_seg_mult, seg * seg_len, r0, rows, rows < N, offs_d, offs_v, offs_d < d, offs_v < Dv,
            (vb == 0).to(tl.float32))


@kernel(inputs=6, outputs=2)
def based_fwd_kernel(
    Q, K, V, SS, S0R, ZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, row0_stride, c, scale, eps,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, RDEN,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, BM: tl.constexpr, FT: tl.constexpr,
    NMAIN: tl.constexpr, TT: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, row blocks, Dv tiles). o = (phi(q) S + A v) / (phi(q) . z + rowsum A + eps)
    on BM rows and one Dv tile: S, z the segment's start state SS[bh * nseg_state + seg *
    state_seg_mult] (bidirectional: the total, state_seg_mult 0), its row 0 in fp32 at S0R
    (_state_terms); A = 1 + s + s^2/2 over the
    segment's rows up to each row (causal). Tile 0 writes 1/den to RDEN [B*H, N] fp32."""
    bh, b, h, d, Dv, vb, sidx, seg0, r0, rows, rmask, offs_d, offs_v, dmask, vmask, _ = _block(
        H, N, d, Dv, seg_len, nseg_state, state_seg_mult, ALIGN, DP, BV, BM)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=rmask[:, None] & dmask[None, :], other=0.0)
    num, den, _ = _state_terms(q, q, rows, rmask, SS, S0R, ZS, sidx, row0_stride, F, Dv, d, c, offs_v,
                               vmask, DP, FT, NMAIN, TT, True, False, DOT_BF16, PRECISION)
    if CAUSAL:
        for k0 in range(seg0, r0, BM):
            cols = k0 + tl.arange(0, BM)
            kt = tl.load(_tile_t(k_base, cols, offs_d, skn, skd, ALIGN), mask=dmask[:, None], other=0.0)
            v = tl.load(_tile(v_base, cols, offs_v, svn, svd, ALIGN), mask=vmask[None, :], other=0.0)
            A = _weights(q, kt, scale, True, DOT_BF16, PRECISION)[0]
            num += _mm(A, v, DOT_BF16, PRECISION)
            den += tl.sum(A, axis=1)
        kt = tl.load(_tile_t(k_base, rows, offs_d, skn, skd, ALIGN), mask=dmask[:, None] & rmask[None, :], other=0.0)
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=rmask[:, None] & vmask[None, :], other=0.0)
        A = _weights(q, kt, scale, (rows[:, None] >= rows[None, :]) & rmask[None, :], DOT_BF16, PRECISION)[0]
        num += _mm(A, v, DOT_BF16, PRECISION)
        den += tl.sum(A, axis=1)
    den = den + eps
    o_base = _head(O, b, h, sob, soh, ALIGN)
    tl.store(_tile(o_base, rows, offs_v, son, sod, ALIGN), (num / den[:, None]).to(O.dtype.element_ty),
             mask=rmask[:, None] & vmask[None, :])
    if vb == 0:
        tl.store(RDEN + bh.to(tl.int64) * N + rows, 1.0 / den, mask=rmask)


@kernel(inputs=8, outputs=1)
def based_bwd_dq_kernel(
    Q, K, V, DO, RDEN, G, SS, ZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, c, scale, tile_stride,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    DQ,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, BM: tl.constexpr, FT: tl.constexpr,
    NMAIN: tl.constexpr, TT: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, row blocks, Dv tiles). This tile's part of dq (at DQ + tile * tile_stride):
    the chain rule of dphi(q) = S u + z g (the segment's start state), plus scale * (P * (1 +
    s)) k over the segment's rows up to each row (causal)."""
    bh, b, h, d, Dv, vb, sidx, seg0, r0, rows, rmask, offs_d, offs_v, dmask, vmask, g_on = _block(
        H, N, d, Dv, seg_len, nseg_state, state_seg_mult, ALIGN, DP, BV, BM)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dm = rmask[:, None] & dmask[None, :]
    vm = rmask[:, None] & vmask[None, :]
    rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
    g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0) * g_on
    u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
    q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=dm, other=0.0)
    _, _, dq = _state_terms(q, u, g, rmask, SS, SS, ZS, sidx, 0, F, Dv, d, c, offs_v,
                            vmask, DP, FT, NMAIN, TT, False, True, DOT_BF16, PRECISION)
    if CAUSAL:
        for k0 in range(seg0, r0, BM):
            cols = k0 + tl.arange(0, BM)
            k = tl.load(_tile(k_base, cols, offs_d, skn, skd, ALIGN), mask=dmask[None, :], other=0.0)
            kt = tl.load(_tile_t(k_base, cols, offs_d, skn, skd, ALIGN), mask=dmask[:, None], other=0.0)
            vt = tl.load(_tile_t(v_base, cols, offs_v, svn, svd, ALIGN), mask=vmask[:, None], other=0.0)
            s = _weights(q, kt, scale, True, DOT_BF16, PRECISION)[1]
            P = _mm(u, vt, DOT_BF16, PRECISION) + g[:, None]
            dq += scale * _mm(P * (1.0 + s), k, DOT_BF16, PRECISION)
        k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
        kt = tl.load(_tile_t(k_base, rows, offs_d, skn, skd, ALIGN), mask=dmask[:, None] & rmask[None, :], other=0.0)
        vt = tl.load(_tile_t(v_base, rows, offs_v, svn, svd, ALIGN), mask=vmask[:, None] & rmask[None, :], other=0.0)
        causal = (rows[:, None] >= rows[None, :]) & rmask[None, :]
        s = _weights(q, kt, scale, causal, DOT_BF16, PRECISION)[1]
        P = _mm(u, vt, DOT_BF16, PRECISION) + g[:, None]
        dq += scale * _mm(tl.where(causal, P * (1.0 + s), 0.0), k, DOT_BF16, PRECISION)
    dq_base = _head(DQ + vb.to(tl.int64) * tile_stride, b, h, sgb, sgh, ALIGN)
    tl.store(_tile(dq_base, rows, offs_d, sgn, sgd, ALIGN), dq.to(DQ.dtype.element_ty), mask=dm)


@triton.jit
def _dkdv_block(k, v, qrows, qmask, causal, q_base, do_base, rden_base, g_base, g_on, dv, dk, offs_d, offs_v, dmask,
                vmask, scale, sqn, sqd, sdn, sdd, ALIGN: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """Adds what the query rows ``qrows`` give to dv and dk of the key block (k, v): A^T u and
    scale * (P^T * (1 + s^T)) q, zero where ``causal`` ([key, query]) is false."""
    qm = qmask[:, None] & dmask[None, :]
    q = tl.load(_tile(q_base, qrows, offs_d, sqn, sqd, ALIGN), mask=qm, other=0.0)
    qt = tl.load(_tile_t(q_base, qrows, offs_d, sqn, sqd, ALIGN), mask=dmask[:, None] & qmask[None, :], other=0.0)
    rden = tl.load(rden_base + qrows, mask=qmask, other=0.0)
    g = tl.load(g_base + qrows, mask=qmask, other=0.0) * g_on
    u = tl.load(_tile(do_base, qrows, offs_v, sdn, sdd, ALIGN), mask=qmask[:, None] & vmask[None, :],
                other=0.0).to(tl.float32) * rden[:, None]
    ut = tl.load(_tile_t(do_base, qrows, offs_v, sdn, sdd, ALIGN), mask=vmask[:, None] & qmask[None, :],
                 other=0.0).to(tl.float32) * rden[None, :]
    At, st = _weights(k, qt, scale, causal, DOT_BF16, PRECISION)
    dv += _mm(At, u, DOT_BF16, PRECISION)
    Pt = _mm(v, ut, DOT_BF16, PRECISION) + g[None, :]
    dk += scale * _mm(tl.where(causal, Pt * (1.0 + st), 0.0), q, DOT_BF16, PRECISION)
    return dv, dk


@kernel(inputs=9, outputs=2)
def based_bwd_dkdv_kernel(
    Q, K, V, DO, RDEN, G, RS, R0R, RZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, row0_stride, c, scale, tile_stride,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd,
    DK, DV,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, BM: tl.constexpr, FT: tl.constexpr,
    NMAIN: tl.constexpr, TT: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, row blocks, Dv tiles), rows of k and v. From the reverse state at the
    segment's end, RS[bh * nseg_state + seg * state_seg_mult] (bidirectional: the total), its
    row 0 in fp32 at R0R (_state_terms):
    dv = phi(k) R + A^T u (this tile) and this tile's part of dk (at DK + tile * tile_stride),
    the chain rule of dphi(k) = R v + r plus scale * (P^T * (1 + s^T)) q, with A and P over
    the segment's rows from each row on (causal)."""
    bh, b, h, d, Dv, vb, sidx, seg0, r0, rows, rmask, offs_d, offs_v, dmask, vmask, g_on = _block(
        H, N, d, Dv, seg_len, nseg_state, state_seg_mult, ALIGN, DP, BV, BM)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dm = rmask[:, None] & dmask[None, :]
    vm = rmask[:, None] & vmask[None, :]
    k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
    v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
    dv, _, dk = _state_terms(k, v, tl.zeros([BM], dtype=tl.float32) + g_on, rmask, RS, R0R, RZS,
                             sidx, row0_stride, F, Dv, d, c, offs_v, vmask, DP, FT, NMAIN, TT, True, True,
                             DOT_BF16, PRECISION)
    if CAUSAL:
        # the diagonal block, then the segment's later blocks (rows past N load as zeros: u
        # and g are 0 there, so they add nothing)
        causal = (rows[None, :] >= rows[:, None]) & rmask[None, :]  # [j, i]: i >= j
        dv, dk = _dkdv_block(k, v, rows, rmask, causal, q_base, do_base, RDEN + bh.to(tl.int64) * N, G + bh.to(tl.int64) * N,
                             g_on, dv, dk, offs_d, offs_v, dmask, vmask, scale, sqn, sqd, sdn, sdd, ALIGN, DOT_BF16,
                             PRECISION)
        for i0 in range(r0 + BM, tl.minimum(seg0 + seg_len, N), BM):
            qrows = i0 + tl.arange(0, BM)
            dv, dk = _dkdv_block(k, v, qrows, qrows < N, True, q_base, do_base, RDEN + bh.to(tl.int64) * N,
                                 G + bh.to(tl.int64) * N, g_on, dv, dk, offs_d, offs_v, dmask, vmask, scale, sqn, sqd,
                                 sdn, sdd, ALIGN, DOT_BF16, PRECISION)
    dk_base = _head(DK + vb.to(tl.int64) * tile_stride, b, h, sgkb, sgkh, ALIGN)
    dv_base = _head(DV, b, h, sgvb, sgvh, ALIGN)
    tl.store(_tile(dk_base, rows, offs_d, sgkn, sgkd, ALIGN), dk.to(DK.dtype.element_ty), mask=dm)
    tl.store(_tile(dv_base, rows, offs_v, sgvn, sgvd, ALIGN), dv.to(DV.dtype.element_ty), mask=vm)

@triton.jit
def _state_rows_tile(rows, Dv, d, R: tl.constexpr, BV: tl.constexpr):
    """A [R, BV] tile of a state of ``rows`` rows, program grid (B*H, row tiles, Dv tiles):
    (bh, its rows r, Dv offsets, the row mask, the tile mask, whether a row is quadratic (r >
    d), its quadratic index r - 1 - d (0 where not))."""
    bh = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * R + tl.arange(0, R)
    offs_v = tl.program_id(2) * BV + tl.arange(0, BV)
    rmask = r < rows
    quad = r > d
    return bh, r, offs_v, rmask, rmask[:, None] & (offs_v < Dv)[None, :], quad, tl.where(quad, r - 1 - d, 0)


@kernel(inputs=2, outputs=2)
def based_pack_kernel(S, Z, d, Dv, F, Fp, SP, ZP, R: tl.constexpr, BV: tl.constexpr):
    """Grid (B*H, packed row tiles, Dv tiles). A public state S [.., F, Dv], z [.., F] (fp32,
    row-major) in the packed layout (_pair_weight) [.., Fp, Dv], [.., Fp]: a packed row of
    weight 2 is the sum of the pair's two public rows. Only the symmetric part of a state
    meets phi(x) x^T, so the packed state gives what the public one gives (z on Dv tile 0)."""
    bh, r, offs_v, rmask, m, quad, j = _state_rows_tile(Fp, Dv, d, R, BV)
    o = j // d
    a = j % d
    b = (a + o) % d
    two = quad & (o != 0) & (2 * o != d)
    src1 = tl.where(quad, 1 + d + a * d + b, r)
    src2 = 1 + d + b * d + a
    Sb = S + bh * F * Dv + offs_v[None, :]
    val = tl.load(Sb + src1[:, None] * Dv, mask=m, other=0.0)
    val += tl.load(Sb + src2[:, None] * Dv, mask=m & two[:, None], other=0.0)
    tl.store(SP + bh * Fp * Dv + r[:, None] * Dv + offs_v[None, :], val, mask=m)
    if tl.program_id(2) == 0:
        z = tl.load(Z + bh * F + src1, mask=rmask, other=0.0)
        z += tl.load(Z + bh * F + src2, mask=rmask & two, other=0.0)
        tl.store(ZP + bh * Fp + r, z, mask=rmask)


@kernel(inputs=6, outputs=2)
def based_unpack_kernel(C, CZ, P, PZ, S0, Z0, nseg, d, Dv, F, Fp, SF, ZF, HAS_INIT: tl.constexpr,
                        REVERSE: tl.constexpr, R: tl.constexpr, BV: tl.constexpr):
    """Grid (B*H, public row tiles, Dv tiles). The public state [.., F, Dv], z [.., F] of a
    packed one: row (a, b) is its pair's packed row over the weight (_pair_weight). Without
    HAS_INIT from the packed total C, CZ; with it S0, Z0 (public) plus the segments' packed
    partials P [.., nseg, Fp, Dv], PZ over their weights, in the scan's order (REVERSE: last
    first), which is what the scan sums, so a pair's two rows keep S0's asymmetric part."""
    bh, r, offs_v, rmask, m, quad, j = _state_rows_tile(F, Dv, d, R, BV)
    a = j // d
    b = j % d
    o = (b - a + d) % d
    mirror = 2 * o > d
    o = tl.where(mirror, d - o, o)
    src = tl.where(quad, 1 + d + o * d + tl.where(mirror, b, a), r)
    w = tl.where(quad & (o != 0) & (2 * o != d), 2.0, 1.0)
    if HAS_INIT:
        S = tl.load(S0 + bh * F * Dv + r[:, None] * Dv + offs_v[None, :], mask=m, other=0.0)
        z = tl.load(Z0 + bh * F + r, mask=rmask, other=0.0)
        for i in range(0, nseg):
            if REVERSE:
                seg = nseg - 1 - i
            else:
                seg = i
            idx = bh * nseg + seg
            S += tl.load(P + idx * Fp * Dv + src[:, None] * Dv + offs_v[None, :], mask=m, other=0.0) / w[:, None]
            z += tl.load(PZ + idx * Fp + src, mask=rmask, other=0.0) / w
    else:
        S = tl.load(C + bh * Fp * Dv + src[:, None] * Dv + offs_v[None, :], mask=m, other=0.0) / w[:, None]
        z = tl.load(CZ + bh * Fp + src, mask=rmask, other=0.0) / w
    tl.store(SF + bh * F * Dv + r[:, None] * Dv + offs_v[None, :], S, mask=m)
    if tl.program_id(2) == 0:
        tl.store(ZF + bh * F + r, z, mask=rmask)


@kernel(inputs=1, outputs=1)
def based_sum_tiles_kernel(P, n, ntiles, Y, BLOCK: tl.constexpr):
    """Y = the sum of ntiles fp32 partials P[t] (n elements each), in Y's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for t in range(0, ntiles):
        acc += tl.load(P + t * n + offs, mask=mask, other=0.0)
    tl.store(Y + offs, acc.to(Y.dtype.element_ty), mask=mask)


@kernel(inputs=5, outputs=5)
def based_step_kernel(
    Q, K, V, S0, Z0,
    H, d, Dv, F, c, eps,
    sqb, sqh, sqd, skb, skh, skd, svb, svh, svd,
    O, S1, Z1, RDEN, O32,
    DP: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr, STORE_O32: tl.constexpr,
):
    """Grid (B*H, Dv tiles). One decoding step: S1 = S0 + phi(k) v^T, z1 = z0 + phi(k),
    o = phi(q) S1 / (phi(q) . z1 + eps), all in fp32 (no dot operands to round). With
    STORE_O32 also o in fp32 (O32), for the backward (as linear_attention_step)."""
    bh, vb, _, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    offs_d = tl.arange(0, DP)
    offs_v = vb * BV + tl.arange(0, BV)
    dmask = offs_d < d
    vmask = offs_v < Dv
    r1, m1, r2, m2 = _rows(d, DP)
    q1 = tl.load(_head(Q, b, h, sqb, sqh, ALIGN) + offs_d * sqd, mask=dmask, other=0.0).to(tl.float32) * c
    k1 = tl.load(_head(K, b, h, skb, skh, ALIGN) + offs_d * skd, mask=dmask, other=0.0).to(tl.float32) * c
    v = tl.load(_head(V, b, h, svb, svh, ALIGN) + offs_v * svd, mask=vmask, other=0.0).to(tl.float32)
    q2 = tl.reshape(q1[:, None] * q1[None, :], [DP * DP]) * RSQRT2
    k2 = tl.reshape(k1[:, None] * k1[None, :], [DP * DP]) * RSQRT2
    s0, s1, s2, z0, z1, z2 = _load_state(S0, Z0, bh, F, Dv, d, offs_v, vmask, DP)
    # (padding zeroed after the product: 0 * an infinite v would put NaN into o's sum)
    s0 += v
    s1 += tl.where(m1[:, None] & vmask[None, :], k1[:, None] * v[None, :], 0.0)
    s2 += tl.where(m2[:, None] & vmask[None, :], k2[:, None] * v[None, :], 0.0)
    z0 += 1.0
    z1 += k1
    z2 += k2
    den = z0 + tl.sum(q1 * z1, axis=0) + tl.sum(q2 * z2, axis=0) + eps
    o = (s0 + tl.sum(q1[:, None] * s1, axis=0) + tl.sum(q2[:, None] * s2, axis=0)) / den
    tl.store(O + bh.to(tl.int64) * Dv + offs_v, o.to(O.dtype.element_ty), mask=vmask)
    if STORE_O32:
        tl.store(O32 + bh.to(tl.int64) * Dv + offs_v, o, mask=vmask)
    _store_state(S1, Z1, bh, F, Dv, d, offs_v, vmask, s0, s1, s2, z0, z1, z2, vb == 0, DP)
    if vb == 0:
        tl.store(RDEN + bh, 1.0 / den)


@kernel(inputs=1, outputs=1)
def taylor_fwd_kernel(X, M, d, F, c, Y, DP: tl.constexpr, ROWS: tl.constexpr):
    """Grid (row blocks). phi of the rows of X ([M, d], row-major) into Y ([M, F])."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < M
    offs_d = tl.arange(0, DP)
    x = tl.load(X + rows[:, None] * d + offs_d[None, :], mask=rmask[:, None] & (offs_d < d)[None, :], other=0.0)
    x0, x1, x2 = _features(x, c, rmask, DP, ROWS)
    r1, m1, r2, m2 = _rows(d, DP)
    y = Y + rows[:, None] * F
    tl.store(Y + rows * F, x0.to(Y.dtype.element_ty), mask=rmask)
    tl.store(y + r1[None, :], x1.to(Y.dtype.element_ty), mask=rmask[:, None] & m1[None, :])
    tl.store(y + r2[None, :], x2.to(Y.dtype.element_ty), mask=rmask[:, None] & m2[None, :])


@kernel(inputs=2, outputs=1)
def taylor_bwd_kernel(X, DY, M, d, F, c, DX, DP: tl.constexpr, ROWS: tl.constexpr):
    """Grid (row blocks). dx of the rows of X from dy = dphi ([M, F])."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < M
    offs_d = tl.arange(0, DP)
    dm = rmask[:, None] & (offs_d < d)[None, :]
    x = tl.load(X + rows[:, None] * d + offs_d[None, :], mask=dm, other=0.0)
    r1, m1, r2, m2 = _rows(d, DP)
    dy = DY + rows[:, None] * F
    w1 = tl.load(dy + r1[None, :], mask=rmask[:, None] & m1[None, :], other=0.0).to(tl.float32)
    w2 = tl.load(dy + r2[None, :], mask=rmask[:, None] & m2[None, :], other=0.0).to(tl.float32)
    dx = _features_grad(x.to(tl.float32) * c, w1, w2, c, DP, ROWS)
    tl.store(DX + rows[:, None] * d + offs_d[None, :], dx.to(DX.dtype.element_ty), mask=dm)
