"""Based linear attention kernels: the Taylor feature map, the chunked passes (forward and
backward, causal and bidirectional) and the decoding step.

The feature map, with c = sqrt(scale) and x1 = c x:

    phi(x) = [1, x1, vec(x1 x1^T) / sqrt(2)]        (F = 1 + d + d^2 features)

so that phi(q) . phi(k) = 1 + s + s^2 / 2 with s = scale q . k.

State. A program holds the state of one Dv tile for all F features, as three register
tiles: the constant row s0 [BV], the linear rows s1 [DP, BV] and the quadratic rows
s2 [DP*DP, BV] (DP: d padded to a power of two >= 16; quadratic tile row a*DP + b is
feature 1 + d + a*d + b), and the normaliser z0 (a scalar), z1 [DP], z2 [DP*DP]. In memory a
state is the public [F, Dv] (and [F]) fp32 layout, so linear_attention's scan
(la_scan_kernel, la_sum_kernel over F rows) combines the segments' partial states.

The passes are those of linear_attention (ato_core/ops/linear_attention/kernels.py, which
derives the backward): per segment partial states, a scan over segments, then per segment
a walk over chunks of CHUNK rows from the segment's start state. Inside a chunk the causal
kernels use the parallel view, s = scale q k^T on the tile and A = 1 + s + s^2/2 (masked),
so phi of a whole sequence never exists anywhere; across chunks, phi of one chunk's rows
meets the state.

Backward. With u_i = do_i / den_i and g_i = -(do_i . o_i) / den_i, the gradient of the
attention weights is P_ij = u_i . v_j + g_i, so ds_ij = P_ij (1 + s_ij) inside a chunk, and
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
from ..linear_attention.kernels import _head, _mm, _mm_exact, _program, _tile

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
def _selectors(DP: tl.constexpr, DOT_BF16: tl.constexpr):
    """0/1 matrices E1, E2 [DP, DP*DP], (x E1)[:, a*DP + b] = x[:, a], (x E2)[:, a*DP + b] =
    x[:, b]: the outer products of phi2 as two exact dots, in the dot's layout (a 3D
    broadcast and reshape would cost layout conversions through shared memory)."""
    a = tl.arange(0, DP)[:, None]
    t = tl.arange(0, DP * DP)[None, :]
    E1 = tl.where(t // DP == a, 1.0, 0.0)
    E2 = tl.where(t % DP == a, 1.0, 0.0)
    if DOT_BF16:
        E1 = E1.to(tl.bfloat16)
        E2 = E2.to(tl.bfloat16)
    return E1, E2


@triton.jit
def _products(x, E1, E2, MM: tl.constexpr, DP: tl.constexpr, ROWS: tl.constexpr, DOT_BF16: tl.constexpr,
              PRECISION: tl.constexpr):
    """x_a x_b at column a*DP + b of [ROWS, DP*DP], fp32: exact for bf16 and fp16 inputs
    (16 and 22 significant bits; fp32 inputs round once). MM: (x E1) (x E2), two exact dots
    (selectors of 0 and 1) that leave it in the dot's layout (a 3D broadcast and reshape
    costs layout conversions through shared memory); else elementwise."""
    if MM:
        p = _mm(x, E1, DOT_BF16, PRECISION) * _mm(x, E2, DOT_BF16, PRECISION)
    else:
        x = x.to(tl.float32)
        p = tl.reshape(x[:, :, None] * x[:, None, :], [ROWS, DP * DP])
    return p


@triton.jit
def _phi(x, c, rmask, E1, E2, MM: tl.constexpr, DP: tl.constexpr, ROWS: tl.constexpr, DOT_BF16: tl.constexpr,
         PRECISION: tl.constexpr):
    """phi of a chunk, by selector dots (MM) or elementwise (d > 16: the selectors of a
    32-wide DP would fill shared memory)."""
    p = _products(x, E1, E2, MM, DP, ROWS, DOT_BF16, PRECISION)
    return tl.where(rmask, 1.0, 0.0), x.to(tl.float32) * c, p * (c * c * RSQRT2)


@triton.jit
def _phi_grad(x, w1, w2, c, E1, E2, MM: tl.constexpr, DP: tl.constexpr, ROWS: tl.constexpr,
              DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    if MM:
        dx = _features_grad_mm(x, w1, w2, c, E1, E2, DOT_BF16, PRECISION)
    else:
        dx = _features_grad(x.to(tl.float32) * c, w1, w2, c, DP, ROWS)
    return dx


@triton.jit
def _features_grad_mm(x, w1, w2, c, E1, E2, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """_features_grad at raw x: c w1 + c^2 / sqrt(2) ((W2 * x E2) E1^T + (W2 * x E1) E2^T)."""
    t = _mm(w2 * _mm(x, E2, DOT_BF16, PRECISION), tl.trans(E1), DOT_BF16, PRECISION) + \
        _mm(w2 * _mm(x, E1, DOT_BF16, PRECISION), tl.trans(E2), DOT_BF16, PRECISION)
    return c * w1 + (c * c * RSQRT2) * t


@triton.jit
def _rows(d, DP: tl.constexpr):
    """Rows of the linear and quadratic tiles in the [F, ...] layout, with their masks."""
    a = tl.arange(0, DP)
    t = tl.arange(0, DP * DP)
    i = t // DP
    j = t % DP
    return 1 + a, a < d, 1 + d + i * d + j, (i < d) & (j < d)


@triton.jit
def _chunk_tiles(vb, d, Dv, DP: tl.constexpr, BV: tl.constexpr, DOT_BF16: tl.constexpr):
    """What every chunked kernel's program starts from: the feature and Dv-tile offsets, their
    masks, and the selectors E1, E2."""
    offs_d = tl.arange(0, DP)
    offs_v = vb * BV + tl.arange(0, BV)
    dmask = offs_d < d
    vmask = offs_v < Dv
    E1, E2 = _selectors(DP, DOT_BF16)
    return offs_d, offs_v, dmask, vmask, E1, E2


@triton.jit
def _zero_state(DP: tl.constexpr, BV: tl.constexpr):
    """An empty state (s0, s1, s2, z0, z1, z2), as _load_state returns one."""
    return (tl.zeros([BV], dtype=tl.float32), tl.zeros([DP, BV], dtype=tl.float32),
            tl.zeros([DP * DP, BV], dtype=tl.float32), tl.zeros([], dtype=tl.float32),
            tl.zeros([DP], dtype=tl.float32), tl.zeros([DP * DP], dtype=tl.float32))


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
def _weights(a, b, scale, causal, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    """(1 + s + s^2/2, s) of s = scale a b^T on a chunk, zero where ``causal`` is false."""
    s = scale * _mm(a, tl.trans(b), DOT_BF16, PRECISION)
    return tl.where(causal, 1.0 + s + 0.5 * s * s, 0.0), s


@kernel(inputs=2, outputs=2)
def based_state_kernel(
    K, V,
    H, N, seg_len, d, Dv, F, c,
    skb, skh, skn, skd, svb, svh, svn, svd,
    DS, DZ,
    DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr, MM: tl.constexpr, EXACT: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). The segment's partial state sum phi(k) v^T (one Dv
    tile) and sum phi(k) (tile 0): the final state. The products k_a k_b and k meet v
    unrounded (with EXACT: two bf16 terms; k is exact in one), and the scales of phi
    (c, c^2 / sqrt(2)) are applied to the sums, so the state is exact but for fp32 sums."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    nseg = tl.num_programs(1)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    s0, s1, s2, z0, z1, z2 = _zero_state(DP, BV)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=rmask[:, None] & dmask[None, :], other=0.0)
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=rmask[:, None] & vmask[None, :], other=0.0)
        # elementwise products (MM False): IEEE, where a selector dot would turn one infinite
        # entry of k into NaN in every product of its row (inf * 0)
        p = _products(k, E1, E2, False, DP, CHUNK, DOT_BF16, PRECISION)
        s0 += tl.sum(v.to(tl.float32), axis=0)
        s1 += _mm(tl.trans(k), v, DOT_BF16, PRECISION)
        if EXACT:
            s2 += _mm_exact(tl.trans(p), v, DOT_BF16, PRECISION, 2)
        else:
            s2 += _mm(tl.trans(p), v, DOT_BF16, PRECISION)
        z0 += tl.sum(tl.where(rmask, 1.0, 0.0), axis=0)
        z1 += tl.sum(k.to(tl.float32), axis=0)
        z2 += tl.sum(p, axis=0)
    q2 = c * c * RSQRT2
    _store_state(DS, DZ, bh * nseg + s, F, Dv, d, offs_v, vmask, s0, s1 * c, s2 * q2, z0, z1 * c, z2 * q2, vb == 0,
                 DP)


@kernel(inputs=5, outputs=2)
def based_fwd_kernel(
    Q, K, V, SS, ZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, c, scale, eps,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, RDEN,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, MM: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). Output rows of one segment and Dv tile, from the
    segment's start state SS[bh * nseg_state + s * state_seg_mult] (bidirectional: the total
    state, state_seg_mult = 0): o = (phi(q) S + A v) / (phi(q) . z + rowsum A + eps), then
    S += phi(K)^T V chunk by chunk. Tile 0 writes 1/den to RDEN [B*H, N] fp32."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    o_base = _head(O, b, h, sob, soh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    s0, s1, s2, z0, z1, z2 = _load_state(SS, ZS, bh * nseg_state + s * state_seg_mult, F, Dv, d, offs_v, vmask, DP)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        dm = rmask[:, None] & dmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=dm, other=0.0)
        q0, q1, q2 = _phi(q, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
        num = q0[:, None] * s0[None, :] + _mm(q1, s1, DOT_BF16, PRECISION) + _mm(q2, s2, DOT_BF16, PRECISION)
        den = q0 * z0 + tl.sum(q1 * z1[None, :], axis=1) + tl.sum(q2 * z2[None, :], axis=1)
        if CAUSAL:
            k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
            v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
            A, _ = _weights(q, k, scale, (rows[:, None] >= rows[None, :]) & rmask[None, :], DOT_BF16, PRECISION)
            num += _mm(A, v, DOT_BF16, PRECISION)
            den += tl.sum(A, axis=1)
            k0, k1, k2 = _phi(k, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
            s0 += tl.sum(v.to(tl.float32), axis=0)
            s1 += _mm(tl.trans(k1), v, DOT_BF16, PRECISION)
            s2 += _mm(tl.trans(k2), v, DOT_BF16, PRECISION)
            z0 += tl.sum(k0, axis=0)
            z1 += tl.sum(k1, axis=0)
            z2 += tl.sum(k2, axis=0)
        den = den + eps
        tl.store(_tile(o_base, rows, offs_v, son, sod, ALIGN), (num / den[:, None]).to(O.dtype.element_ty), mask=vm)
        if vb == 0:
            tl.store(RDEN + bh.to(tl.int64) * N + rows, 1.0 / den, mask=rmask)


@triton.jit
def _load_state_t(SS, ZS, sidx, F, Dv, d, offs_v, vmask, DP: tl.constexpr):
    """_load_state with the S tiles transposed: (s0 [BV], s1^T [BV, DP], s2^T [BV, DP*DP], z0, z1, z2)."""
    r1, m1, r2, m2 = _rows(d, DP)
    base = SS + sidx.to(tl.int64) * F * Dv
    s0 = tl.load(base + offs_v, mask=vmask, other=0.0)
    s1 = tl.load(base + r1[None, :] * Dv + offs_v[:, None], mask=m1[None, :] & vmask[:, None], other=0.0)
    s2 = tl.load(base + r2[None, :] * Dv + offs_v[:, None], mask=m2[None, :] & vmask[:, None], other=0.0)
    zb = ZS + sidx.to(tl.int64) * F
    return s0, s1, s2, tl.load(zb), tl.load(zb + r1, mask=m1, other=0.0), tl.load(zb + r2, mask=m2, other=0.0)


@kernel(inputs=5, outputs=2)
def based_fwd_t_kernel(
    Q, K, V, SS, ZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, c, scale, eps,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, RDEN,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, MM: tl.constexpr,
):
    """based_fwd_kernel transposed: the state is held as S^T [BV, F], the left operand of
    o^T = S^T phi(Q)^T and of S^T += V^T phi(K), so it stays in registers (a dot's left
    operand may; its right one is read from shared memory)."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    o_base = _head(O, b, h, sob, soh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    s0, s1, s2, z0, z1, z2 = _load_state_t(SS, ZS, bh * nseg_state + s * state_seg_mult, F, Dv, d, offs_v, vmask,
                                           DP)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        dm = rmask[:, None] & dmask[None, :]
        q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=dm, other=0.0)
        if MM:
            q2 = _mm(tl.trans(E1), tl.trans(q), DOT_BF16, PRECISION) * \
                _mm(tl.trans(E2), tl.trans(q), DOT_BF16, PRECISION) * (c * c * RSQRT2)
        else:
            q2 = tl.trans(_products(q, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)) * (c * c * RSQRT2)
        q1 = tl.trans(q.to(tl.float32)) * c
        q0 = tl.where(rmask, 1.0, 0.0)
        num = s0[:, None] * q0[None, :] + _mm(s1, q1, DOT_BF16, PRECISION) + _mm(s2, q2, DOT_BF16, PRECISION)
        den = q0 * z0 + tl.sum(q1 * z1[:, None], axis=0) + tl.sum(q2 * z2[:, None], axis=0)
        if CAUSAL:
            k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
            vt = tl.trans(tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=rmask[:, None] & vmask[None, :],
                                  other=0.0))
            At, _ = _weights(k, q, scale, (rows[None, :] >= rows[:, None]) & rmask[:, None], DOT_BF16, PRECISION)
            num += _mm(vt, At, DOT_BF16, PRECISION)
            den += tl.sum(At, axis=0)
            k0, k1, k2 = _phi(k, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
            s0 += tl.sum(vt.to(tl.float32), axis=1)
            s1 += _mm(vt, k1, DOT_BF16, PRECISION)
            s2 += _mm(vt, k2, DOT_BF16, PRECISION)
            z0 += tl.sum(k0, axis=0)
            z1 += tl.sum(k1, axis=0)
            z2 += tl.sum(k2, axis=0)
        den = den + eps
        o = tl.trans(num / den[None, :])
        tl.store(_tile(o_base, rows, offs_v, son, sod, ALIGN), o.to(O.dtype.element_ty),
                 mask=rmask[:, None] & vmask[None, :])
        if vb == 0:
            tl.store(RDEN + bh.to(tl.int64) * N + rows, 1.0 / den, mask=rmask)


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
    H, N, seg_len, d, Dv, F, c,
    sqb, sqh, sqn, sqd, sdb, sdh, sdn, sdd,
    DR, DRZ,
    DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr, MM: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). The segment's partial reverse state:
    R = sum phi(q) u^T (one Dv tile), r = sum phi(q) g (tile 0)."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    nseg = tl.num_programs(1)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    R0, R1, R2, r0, r1, r2 = _zero_state(DP, BV)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=rmask[:, None] & dmask[None, :], other=0.0)
        rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        do = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=rmask[:, None] & vmask[None, :], other=0.0)
        u = do.to(tl.float32) * rden[:, None]
        q0, q1, q2 = _phi(q, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
        R0 += tl.sum(u, axis=0)
        R1 += _mm(tl.trans(q1), u, DOT_BF16, PRECISION)
        R2 += _mm(tl.trans(q2), u, DOT_BF16, PRECISION)
        r0 += tl.sum(q0 * g, axis=0)
        r1 += tl.sum(q1 * g[:, None], axis=0)
        r2 += tl.sum(q2 * g[:, None], axis=0)
    _store_state(DR, DRZ, bh * nseg + s, F, Dv, d, offs_v, vmask, R0, R1, R2, r0, r1, r2, vb == 0, DP)


@kernel(inputs=8, outputs=1)
def based_bwd_dq_kernel(
    Q, K, V, DO, RDEN, G, SS, ZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, c, scale, tile_stride,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    DQ,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, MM: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). This tile's part of dq (at DQ + tile * tile_stride):
    the chain rule of dphi(q) = S u + z g, plus scale * (P * (1 + s)) k inside the chunk,
    walking forwards from the segment's start state."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dq_base = _head(DQ + vb.to(tl.int64) * tile_stride, b, h, sgb, sgh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    g_on = (vb == 0).to(tl.float32)
    s0, s1, s2, z0, z1, z2 = _load_state(SS, ZS, bh * nseg_state + s * state_seg_mult, F, Dv, d, offs_v, vmask, DP)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        dm = rmask[:, None] & dmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0) * g_on
        u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
        q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=dm, other=0.0)
        w1 = _mm(u, tl.trans(s1), DOT_BF16, PRECISION) + g[:, None] * z1[None, :]
        w2 = _mm(u, tl.trans(s2), DOT_BF16, PRECISION) + g[:, None] * z2[None, :]
        dq = _phi_grad(q, w1, w2, c, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
        if CAUSAL:
            k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
            v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
            causal = (rows[:, None] >= rows[None, :]) & rmask[None, :]
            _, sc = _weights(q, k, scale, causal, DOT_BF16, PRECISION)
            P = _mm(u, tl.trans(v), DOT_BF16, PRECISION) + g[:, None]
            ds = tl.where(causal, P * (1.0 + sc), 0.0)
            dq += scale * _mm(ds, k, DOT_BF16, PRECISION)
            _, k1, k2 = _phi(k, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
            s1 += _mm(tl.trans(k1), v, DOT_BF16, PRECISION)
            s2 += _mm(tl.trans(k2), v, DOT_BF16, PRECISION)
            z1 += tl.sum(k1, axis=0)
            z2 += tl.sum(k2, axis=0)
        tl.store(_tile(dq_base, rows, offs_d, sgn, sgd, ALIGN), dq.to(DQ.dtype.element_ty), mask=dm)


@kernel(inputs=8, outputs=2)
def based_bwd_dkdv_kernel(
    Q, K, V, DO, RDEN, G, RS, RZS,
    H, N, seg_len, d, Dv, F, nseg_state, state_seg_mult, c, scale, tile_stride,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd,
    DK, DV,
    CAUSAL: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, DOT_BF16: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, MM: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). Walks the segment backwards from the reverse state at
    its end: dv = phi(K) R + A^T U (this tile), this tile's part of dk (at DK + tile *
    tile_stride): the chain rule of dphi(k) = R v + r, plus scale * (P^T * (1 + s^T)) q
    inside the chunk; then R += phi(Q)^T U, r += phi(Q)^T g."""
    bh, s, vb, b, h, d, Dv = _program(H, d, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dk_base = _head(DK + vb.to(tl.int64) * tile_stride, b, h, sgkb, sgkh, ALIGN)
    dv_base = _head(DV, b, h, sgvb, sgvh, ALIGN)
    offs_d, offs_v, dmask, vmask, E1, E2 = _chunk_tiles(vb, d, Dv, DP, BV, DOT_BF16)
    g_on = (vb == 0).to(tl.float32)
    R0, R1, R2, r0, r1, r2 = _load_state(RS, RZS, bh * nseg_state + s * state_seg_mult, F, Dv, d, offs_v, vmask,
                                         DP)
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    nchunks = tl.cdiv(end - start, CHUNK)
    for i in range(0, nchunks):
        rows = start + (nchunks - 1 - i) * CHUNK + tl.arange(0, CHUNK)
        rmask = rows < end
        dm = rmask[:, None] & dmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        k = tl.load(_tile(k_base, rows, offs_d, skn, skd, ALIGN), mask=dm, other=0.0)
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
        k0, k1, k2 = _phi(k, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
        w1 = _mm(v, tl.trans(R1), DOT_BF16, PRECISION) + (r1 * g_on)[None, :]
        w2 = _mm(v, tl.trans(R2), DOT_BF16, PRECISION) + (r2 * g_on)[None, :]
        dk = _phi_grad(k, w1, w2, c, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
        dv = k0[:, None] * R0[None, :] + _mm(k1, R1, DOT_BF16, PRECISION) + _mm(k2, R2, DOT_BF16, PRECISION)
        if CAUSAL:
            q = tl.load(_tile(q_base, rows, offs_d, sqn, sqd, ALIGN), mask=dm, other=0.0)
            rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
            g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
            u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
            causal = (rows[None, :] >= rows[:, None]) & rmask[None, :]  # [j, i]: i >= j
            At, st = _weights(k, q, scale, causal, DOT_BF16, PRECISION)
            dv += _mm(At, u, DOT_BF16, PRECISION)
            Pt = _mm(v, tl.trans(u), DOT_BF16, PRECISION) + (g * g_on)[None, :]
            dk += scale * _mm(tl.where(causal, Pt * (1.0 + st), 0.0), q, DOT_BF16, PRECISION)
            q0, q1, q2 = _phi(q, c, rmask, E1, E2, MM, DP, CHUNK, DOT_BF16, PRECISION)
            R0 += tl.sum(u, axis=0)
            R1 += _mm(tl.trans(q1), u, DOT_BF16, PRECISION)
            R2 += _mm(tl.trans(q2), u, DOT_BF16, PRECISION)
            r0 += tl.sum(q0 * g, axis=0)
            r1 += tl.sum(q1 * g[:, None], axis=0)
            r2 += tl.sum(q2 * g[:, None], axis=0)
        tl.store(_tile(dk_base, rows, offs_d, sgkn, sgkd, ALIGN), dk.to(DK.dtype.element_ty), mask=dm)
        tl.store(_tile(dv_base, rows, offs_v, sgvn, sgvd, ALIGN), dv.to(DV.dtype.element_ty), mask=vm)


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
