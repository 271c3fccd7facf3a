"""Linear attention kernels: bidirectional and causal (chunked), forward and backward.

Notation, per (batch, head): phi is the feature map (identity or ELU+1, applied while
loading q and k), S = sum_j phi(k_j) v_j^T is the [Dk, Dv] state and z = sum_j phi(k_j) the
[Dk] normaliser state, and

    o_i = phi(q_i) S_i / (phi(q_i) . z_i + eps)

with S_i, z_i summed over all j (bidirectional) or j <= i plus an initial state (causal).

Work split. The sequence is cut into segments of ``seg_len`` rows (a multiple of CHUNK),
processed by different programs; each segment is walked in chunks of CHUNK rows.

1. ``la_fwd_state_kernel``: per segment, the partial sums dS, dz of its rows.
2. ``la_scan_kernel``: over segments, in order, the state at the start of each segment
   (exclusive prefix sums from the initial state) and the final state. Bidirectional:
   ``la_sum_kernel``, the final state alone.
3. ``la_fwd_kernel``: per segment, from its start state, chunk by chunk: the inter-chunk
   part phi(Q) S, the intra-chunk part as a masked (phi(Q) phi(K)^T) V, then the state
   update S += phi(K)^T V. Bidirectional: every row reads the final (total) state.

The backward mirrors this. With u_i = do_i / den_i and g_i = -(do_i . o_i) / den_i:

    dphi(q_i) = S_i u_i + z_i g_i
    dphi(k_j) = R_j v_j + r_j,   dv_j = R_j^T phi(k_j),
    R_j = dS_N + sum_{i >= j} phi(q_i) u_i^T,   r_j = dz_N + sum_{i >= j} phi(q_i) g_i

R is a state summed in reverse: ``la_bwd_state_kernel`` makes its per-segment partials
(and g), ``la_scan_kernel`` (REVERSE) the suffix sums and dS_0 = R_0, then ``la_bwd_dq_kernel``
walks segments forwards and ``la_bwd_dkdv_kernel`` backwards (or, when the whole [Dk, Dv]
state does not fit one program, ``la_bwd_dk_kernel`` and ``la_bwd_dv_kernel``, tiled).

Conventions: pointers to inputs, then scalars, then outputs, then constexprs. q/k/v/o/do
are addressed through explicit (b, h, n, d) strides; Dk, Dv and the b, h, n strides are
multiples of the ALIGN constexpr (see ato_core.triton_helpers.aligned); states are row-major
[B*H, segments, Dk, Dv] fp32 buffers. All offsets are int64. Everything accumulates in
fp32; ``DOT_BF16`` feeds tensor cores bf16 operands (bf16 inputs), otherwise fp32 operands
go in at ``PRECISION`` ("tf32" for fp16 inputs: fp16 cannot hold a long sequence's state;
"ieee" for fp32 inputs).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned
from .feature_maps import feature, feature_grad


@triton.jit
def _mm(a, b, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr):
    if DOT_BF16:
        c = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    else:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=PRECISION)
    return c


@triton.jit
def _split(a, DOT_BF16: tl.constexpr):
    """fp32 a = hi + rest: hi rounded to bf16 (DOT_BF16) or truncated to tf32 (an fp32
    value), rest = a - hi in fp32 (0 where a is inf or NaN, which hi carries alone)."""
    if DOT_BF16:
        hi = a.to(tl.bfloat16)
        rest = tl.where(a - a == 0, a - hi.to(tl.float32), 0.0)
    else:
        hi = tl.where(a == a, (a.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True), a)
        rest = tl.where(a - a == 0, a - hi, 0.0)
    return hi, rest


@triton.jit
def _finite_part(b):
    """b with its infinite and NaN entries 0: what the rest of a _split meets."""
    return tl.where(b - b == 0, b, 0.0)


@triton.jit
def _mm_exact(a, b, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, TERMS: tl.constexpr = 3):
    """a @ b to fp32 precision for fp32 a and b exact in the dot's operand type (v, in the
    input dtype). a = hi + the rest (_split): hi times b is the one dot a plain _mm would take
    (so an infinite or NaN a or b gives what that gives); the rest, finite, meets the finite
    entries of b. bf16 operands: the rest in TERMS - 1 bf16 terms (TERMS 3: all of fp32's 24
    bits; 2 where a has at most 16 significant bits, e.g. a product of two bf16 values). tf32
    operands: hi is a truncated to tf32, the rest one more tf32 term (21 bits)."""
    a = a.to(tl.float32)
    if DOT_BF16:
        hi, rest = _split(a, True)
        bf = _finite_part(b).to(tl.bfloat16)
        mid = rest.to(tl.bfloat16)
        c = tl.dot(hi, b.to(tl.bfloat16)) + tl.dot(mid, bf)
        if TERMS == 3:
            c += tl.dot((rest - mid.to(tl.float32)).to(tl.bfloat16), bf)
    elif PRECISION == "tf32":
        b = b.to(tl.float32)
        hi, rest = _split(a, False)
        c = tl.dot(hi, b, input_precision="tf32") + tl.dot(rest, _finite_part(b), input_precision="tf32")
    else:
        c = tl.dot(a, b.to(tl.float32), input_precision=PRECISION)
    return c


@triton.jit
def _tile(base, rows, cols, stride_n, stride_d, ALIGN: tl.constexpr):
    return base + rows[:, None].to(tl.int64) * aligned(stride_n, ALIGN) + cols[None, :].to(tl.int64) * stride_d


@triton.jit
def _program(H, Dk, Dv, ALIGN: tl.constexpr):
    """A program of grid (B*H, segments, tiles): (bh, segment s, tile t, batch b, head h
    (int64), Dk and Dv carrying their alignment)."""
    bh = tl.program_id(0)
    Dk = aligned(Dk, ALIGN)
    Dv = aligned(Dv, ALIGN)
    s = tl.program_id(1)
    t = tl.program_id(2)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    return bh, s, t, b, h, Dk, Dv


@triton.jit
def _head(X, b, h, sb, sh, ALIGN: tl.constexpr):
    """X's rows of batch b, head h."""
    return X + b * aligned(sb, ALIGN) + h * aligned(sh, ALIGN)


@triton.jit
def _state_ptrs(base, idx, offs_k, offs_v, Dk, Dv):
    return base + idx.to(tl.int64) * Dk * Dv + offs_k[:, None].to(tl.int64) * Dv + offs_v[None, :]


@kernel(inputs=2, outputs=2)
def la_fwd_state_kernel(
    K, V,
    H, N, seg_len, Dk, Dv,
    skb, skh, skn, skd, svb, svh, svn, svd,
    DS, DZ,
    FEATURE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, EXACT: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). dS[bh, s] = sum over the segment's rows of
    phi(k) v^T (one Dv tile, all of Dk); dz[bh, s] = sum of phi(k) (written by tile 0).
    With EXACT, phi(k) is not rounded to the dot's operand type (_mm_exact): these partials
    make the final state, which a decode continues for many steps."""
    bh = tl.program_id(0)
    Dk = aligned(Dk, ALIGN)
    Dv = aligned(Dv, ALIGN)
    s = tl.program_id(1)
    vb = tl.program_id(2)
    nseg = tl.num_programs(1)  # read before b and h: _program would move it (same code, other PTX order)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    offs_k = tl.arange(0, BK)
    offs_v = vb * BV + tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    S = tl.zeros([BK, BV], dtype=tl.float32)
    z = tl.zeros([BK], dtype=tl.float32)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        phik = feature(tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0), km, FEATURE)
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=rmask[:, None] & vmask[None, :], other=0.0)
        if EXACT:
            S += _mm_exact(tl.trans(phik), v, DOT_BF16, PRECISION)
        else:
            S += _mm(tl.trans(phik), v, DOT_BF16, PRECISION)
        z += tl.sum(phik, axis=0)
    idx = bh * nseg + s
    tl.store(_state_ptrs(DS, idx, offs_k, offs_v, Dk, Dv), S, mask=kmask[:, None] & vmask[None, :])
    if vb == 0:
        tl.store(DZ + idx.to(tl.int64) * Dk + offs_k, z, mask=kmask)


@triton.jit
def _state_tile(Dk, Dv, BK: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr):
    """The [BK, BV] state tile of a program of grid (B*H, Dk tiles, Dv tiles): (bh, Dk, Dv,
    offs_k, offs_v, the Dk mask, the tile's mask)."""
    bh = tl.program_id(0)
    Dk = aligned(Dk, ALIGN)
    Dv = aligned(Dv, ALIGN)
    offs_k = tl.program_id(1) * BK + tl.arange(0, BK)
    offs_v = tl.program_id(2) * BV + tl.arange(0, BV)
    kmask = offs_k < Dk
    return bh, Dk, Dv, offs_k, offs_v, kmask, kmask[:, None] & (offs_v < Dv)[None, :]


@triton.jit
def _scan_tile_init(S0, Z0, bh, offs_k, offs_v, Dk, Dv, m2, kmask, HAS_INIT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr):
    if HAS_INIT:
        S = tl.load(_state_ptrs(S0, bh, offs_k, offs_v, Dk, Dv), mask=m2, other=0.0).to(tl.float32)
        z = tl.load(Z0 + bh.to(tl.int64) * Dk + offs_k, mask=kmask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
        z = tl.zeros([BK], dtype=tl.float32)
    return S, z


@kernel(inputs=4, outputs=5)
def la_scan_kernel(
    DS, DZ, S0, Z0,
    nseg, Dk, Dv,
    SS, ZS, SF, ZF, R0,
    HAS_INIT: tl.constexpr, REVERSE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr,
    ROW0: tl.constexpr = False,
):
    """Grid (B*H, Dk tiles, Dv tiles). Walks the segments' partial states in order
    (reverse order if REVERSE), writing the running sum *before* each segment to SS/ZS
    and the total to SF/ZF; the running sum starts at S0/Z0 when HAS_INIT (dummy
    pointers otherwise). ZS/ZF are written by Dv tile 0. SS may be of a narrower dtype than
    the fp32 sum (the stores round); with ROW0, row 0 of each start state is also written
    to R0 ([.., nseg, Dv]) in fp32."""
    bh, Dk, Dv, offs_k, offs_v, kmask, m2 = _state_tile(Dk, Dv, BK, BV, ALIGN)
    zmask = kmask & (tl.full([BK], 0, tl.int32) == tl.program_id(2))  # z: Dv tile 0 only
    S, z = _scan_tile_init(S0, Z0, bh, offs_k, offs_v, Dk, Dv, m2, kmask, HAS_INIT, BK, BV)
    dS, dz = _segment_partial(DS, DZ, bh, 0, nseg, offs_k, offs_v, Dk, Dv, m2, kmask, REVERSE)
    for i in range(0, nseg):
        idx = bh * nseg + _walk_segment(i, nseg, REVERSE)
        # the next segment's partial is loaded before this one's stores, so that the walk's
        # loads overlap
        dS_next, dz_next = _segment_partial(DS, DZ, bh, i + 1, nseg, offs_k, offs_v, Dk, Dv, m2, kmask, REVERSE)
        tl.store(_state_ptrs(SS, idx, offs_k, offs_v, Dk, Dv), S, mask=m2)
        if ROW0:
            tl.store(R0 + idx.to(tl.int64) * Dv + offs_k[:, None] * 0 + offs_v[None, :], S,
                     mask=m2 & (offs_k == 0)[:, None])
        S += dS
        tl.store(ZS + idx.to(tl.int64) * Dk + offs_k, z, mask=zmask)
        z += dz
        dS, dz = dS_next, dz_next
    tl.store(_state_ptrs(SF, bh, offs_k, offs_v, Dk, Dv), S, mask=m2)
    tl.store(ZF + bh.to(tl.int64) * Dk + offs_k, z, mask=zmask)


@triton.jit
def _walk_segment(i, nseg, REVERSE: tl.constexpr):
    """The i-th segment of the walk (REVERSE: from the last)."""
    if REVERSE:
        return nseg - 1 - i
    else:
        return i


@triton.jit
def _segment_partial(DS, DZ, bh, i, nseg, offs_k, offs_v, Dk, Dv, m2, kmask, REVERSE: tl.constexpr):
    """The partial state of the walk's i-th segment (zeros once i reaches nseg)."""
    on = i < nseg
    idx = bh * nseg + _walk_segment(tl.minimum(i, nseg - 1), nseg, REVERSE)
    dS = tl.load(_state_ptrs(DS, idx, offs_k, offs_v, Dk, Dv), mask=m2 & on, other=0.0)
    dz = tl.load(DZ + idx.to(tl.int64) * Dk + offs_k, mask=kmask & on, other=0.0)
    return dS, dz


@kernel(inputs=2, outputs=2)
def la_sum_kernel(
    DS, DZ,
    nseg, Dk, Dv,
    SF, ZF,
    REVERSE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, Dk tiles, Dv tiles). The total of the segments' partial states, summed in
    the order la_scan_kernel sums them (so its bits equal la_scan_kernel's total), for the
    bidirectional case, which needs no per-segment start states."""
    bh, Dk, Dv, offs_k, offs_v, kmask, m2 = _state_tile(Dk, Dv, BK, BV, ALIGN)
    S = tl.zeros([BK, BV], dtype=tl.float32)
    z = tl.zeros([BK], dtype=tl.float32)
    dS, dz = _segment_partial(DS, DZ, bh, 0, nseg, offs_k, offs_v, Dk, Dv, m2, kmask, REVERSE)
    for i in range(0, nseg):
        dS_next, dz_next = _segment_partial(DS, DZ, bh, i + 1, nseg, offs_k, offs_v, Dk, Dv, m2, kmask, REVERSE)
        S += dS
        z += dz
        dS, dz = dS_next, dz_next
    tl.store(_state_ptrs(SF, bh, offs_k, offs_v, Dk, Dv), S, mask=m2)
    if tl.program_id(2) == 0:
        tl.store(ZF + bh.to(tl.int64) * Dk + offs_k, z, mask=kmask)


@triton.jit
def _segment(SS, ZS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state, state_seg_mult,
             HAS_Z: tl.constexpr):
    """Where a kernel's walk over segment s starts: the state there ([BK, BV] of SS and, with
    HAS_Z, [BK] of ZS; else 0) and the segment's rows [start, end)."""
    sidx = bh * nseg_state + s * state_seg_mult
    S = tl.load(_state_ptrs(SS, sidx, offs_k, offs_v, Dk, Dv), mask=kmask[:, None] & vmask[None, :], other=0.0)
    if HAS_Z:
        z = tl.load(ZS + sidx.to(tl.int64) * Dk + offs_k, mask=kmask, other=0.0)
    else:
        z = 0.0
    start = s * seg_len
    return S, z, start, tl.minimum(start + seg_len, N)


@kernel(inputs=5, outputs=2)
def la_fwd_kernel(
    Q, K, V, SS, ZS,
    H, N, seg_len, Dk, Dv, nseg_state, state_seg_mult, eps,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, son, sod,
    O, RDEN,
    FEATURE: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles). Output rows of one segment, one Dv tile, all of Dk.
    The segment's start state is SS[bh * nseg_state + s * state_seg_mult] (the total state,
    with state_seg_mult = 0, when bidirectional). Tile 0 also writes 1/den to RDEN
    ([B*H, N] fp32), which the backward reuses."""
    bh, s, vb, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    o_base = _head(O, b, h, sob, soh, ALIGN)
    offs_k = tl.arange(0, BK)
    offs_v = vb * BV + tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    S, z, start, end = _segment(SS, ZS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state,
                                state_seg_mult, True)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        phiq = feature(tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0), km, FEATURE)
        num = _mm(phiq, S, DOT_BF16, PRECISION)
        den = tl.sum(phiq * z[None, :], axis=1)
        if CAUSAL:
            phik = feature(tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0), km, FEATURE)
            v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
            A = _mm(phiq, tl.trans(phik), DOT_BF16, PRECISION)
            A = tl.where(rows[:, None] >= rows[None, :], A, 0.0)
            num += _mm(A, v, DOT_BF16, PRECISION)
            den += tl.sum(A, axis=1)
            S += _mm(tl.trans(phik), v, DOT_BF16, PRECISION)
            z += tl.sum(phik, axis=0)
        den = den + eps
        o = num / den[:, None]
        tl.store(_tile(o_base, rows, offs_v, son, sod, ALIGN), o.to(O.dtype.element_ty), mask=vm)
        if vb == 0:
            tl.store(RDEN + bh.to(tl.int64) * N + rows, 1.0 / den, mask=rmask)


@kernel(inputs=4, outputs=3)
def la_bwd_state_kernel(
    Q, DO, O, RDEN,
    H, N, seg_len, Dk, Dv,
    sqb, sqh, sqn, sqd, sdb, sdh, sdn, sdd, sob, soh, son, sod,
    DR, DRZ, G,
    FEATURE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr,
    DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments, Dk tiles); all of Dv. Per segment: g = -(do . o) / den (written
    by tile 0 to G, [B*H, N] fp32), dR = sum phi(q) u^T with u = do / den, dr = sum phi(q) g."""
    bh, s, kb, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    nseg = tl.num_programs(1)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    o_base = _head(O, b, h, sob, soh, ALIGN)
    offs_k = kb * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    start = s * seg_len
    end = tl.minimum(start + seg_len, N)
    R = tl.zeros([BK, BV], dtype=tl.float32)
    r = tl.zeros([BK], dtype=tl.float32)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        phiq = feature(tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0), km, FEATURE)
        do = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32)
        o = tl.load(_tile(o_base, rows, offs_v, son, sod, ALIGN), mask=vm, other=0.0).to(tl.float32)
        rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        g = -tl.sum(do * o, axis=1) * rden
        u = do * rden[:, None]
        R += _mm(tl.trans(phiq), u, DOT_BF16, PRECISION)
        r += tl.sum(phiq * g[:, None], axis=0)
        if kb == 0:
            tl.store(G + bh.to(tl.int64) * N + rows, g, mask=rmask)
    idx = bh * nseg + s
    tl.store(_state_ptrs(DR, idx, offs_k, offs_v, Dk, Dv), R, mask=kmask[:, None] & vmask[None, :])
    tl.store(DRZ + idx.to(tl.int64) * Dk + offs_k, r, mask=kmask)


@kernel(inputs=8, outputs=1)
def la_bwd_dq_kernel(
    Q, K, V, DO, RDEN, G, SS, ZS,
    H, N, seg_len, Dk, Dv, nseg_state, state_seg_mult,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgb, sgh, sgn, sgd,
    DQ,
    FEATURE: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments, Dk tiles); all of Dv. Walks the segment forwards from its start
    state: dphi(Q) = U S^T + g z^T + mask(U V^T + g) phi(K), then S += phi(K)^T V."""
    bh, s, kb, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dq_base = _head(DQ, b, h, sgb, sgh, ALIGN)
    offs_k = kb * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    S, z, start, end = _segment(SS, ZS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state,
                                state_seg_mult, True)
    for c0 in range(start, end, CHUNK):
        rows = c0 + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
        u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
        dphiq = _mm(u, tl.trans(S), DOT_BF16, PRECISION) + g[:, None] * z[None, :]
        if CAUSAL:
            phik = feature(tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0), km, FEATURE)
            v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
            P = _mm(u, tl.trans(v), DOT_BF16, PRECISION) + g[:, None]
            P = tl.where(rows[:, None] >= rows[None, :], P, 0.0)
            dphiq += _mm(P, phik, DOT_BF16, PRECISION)
            S += _mm(tl.trans(phik), v, DOT_BF16, PRECISION)
            z += tl.sum(phik, axis=0)
        q = tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0)
        dq = feature_grad(q, dphiq, FEATURE)
        tl.store(_tile(dq_base, rows, offs_k, sgn, sgd, ALIGN), dq.to(DQ.dtype.element_ty), mask=km)


@kernel(inputs=8, outputs=1)
def la_bwd_dk_kernel(
    Q, K, V, DO, RDEN, G, RS, RZS,
    H, N, seg_len, Dk, Dv, nseg_state, state_seg_mult,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgb, sgh, sgn, sgd,
    DK,
    FEATURE: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments, Dk tiles); all of Dv. Walks the segment backwards from the
    reverse state at its end: dphi(K) = V R^T + r + mask(V U^T + g^T) phi(Q), then
    R += phi(Q)^T U, r += phi(Q)^T g."""
    bh, s, kb, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dk_base = _head(DK, b, h, sgb, sgh, ALIGN)
    offs_k = kb * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    R, r, start, end = _segment(RS, RZS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state,
                                state_seg_mult, True)
    nchunks = tl.cdiv(end - start, CHUNK)
    for i in range(0, nchunks):
        rows = start + (nchunks - 1 - i) * CHUNK + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
        dphik = _mm(v, tl.trans(R), DOT_BF16, PRECISION) + r[None, :]
        if CAUSAL:
            phiq = feature(tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0), km, FEATURE)
            rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
            g = tl.load(G + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
            u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
            Pt = _mm(v, tl.trans(u), DOT_BF16, PRECISION) + g[None, :]
            Pt = tl.where(rows[None, :] >= rows[:, None], Pt, 0.0)
            dphik += _mm(Pt, phiq, DOT_BF16, PRECISION)
            R += _mm(tl.trans(phiq), u, DOT_BF16, PRECISION)
            r += tl.sum(phiq * g[:, None], axis=0)
        k = tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0)
        dk = feature_grad(k, dphik, FEATURE)
        tl.store(_tile(dk_base, rows, offs_k, sgn, sgd, ALIGN), dk.to(DK.dtype.element_ty), mask=km)


@kernel(inputs=5, outputs=1)
def la_bwd_dv_kernel(
    Q, K, DO, RDEN, RS,
    H, N, seg_len, Dk, Dv, nseg_state, state_seg_mult,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, sdb, sdh, sdn, sdd, sgb, sgh, sgn, sgd,
    DV,
    FEATURE: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments, Dv tiles); all of Dk. Walks the segment backwards:
    dV = phi(K) R + mask(phi(K) phi(Q)^T) U, then R += phi(Q)^T U."""
    bh, s, vb, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    dv_base = _head(DV, b, h, sgb, sgh, ALIGN)
    offs_k = tl.arange(0, BK)
    offs_v = vb * BV + tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    R, _, start, end = _segment(RS, RS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state,
                                state_seg_mult, False)
    nchunks = tl.cdiv(end - start, CHUNK)
    for i in range(0, nchunks):
        rows = start + (nchunks - 1 - i) * CHUNK + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        phik = feature(tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0), km, FEATURE)
        dv = _mm(phik, R, DOT_BF16, PRECISION)
        if CAUSAL:
            phiq = feature(tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0), km, FEATURE)
            rden = tl.load(RDEN + bh.to(tl.int64) * N + rows, mask=rmask, other=0.0)
            u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
            At = _mm(phik, tl.trans(phiq), DOT_BF16, PRECISION)
            At = tl.where(rows[None, :] >= rows[:, None], At, 0.0)
            dv += _mm(At, u, DOT_BF16, PRECISION)
            R += _mm(tl.trans(phiq), u, DOT_BF16, PRECISION)
        tl.store(_tile(dv_base, rows, offs_v, sgn, sgd, ALIGN), dv.to(DV.dtype.element_ty), mask=vm)


@kernel(inputs=8, outputs=2)
def la_bwd_dkdv_kernel(
    Q, K, V, DO, RDEN, G, RS, RZS,
    H, N, seg_len, Dk, Dv, nseg_state, state_seg_mult,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdn, sdd,
    sgkb, sgkh, sgkn, sgkd, sgvb, sgvh, sgvn, sgvd,
    DK, DV,
    FEATURE: tl.constexpr, CAUSAL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, DOT_BF16: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (B*H, segments); all of Dk and Dv (the plan uses it when the whole [Dk, Dv]
    reverse state fits one program). la_bwd_dk_kernel and la_bwd_dv_kernel in one pass:
    each chunk's q, k, v, do, 1/den and g are read once, and phi(Q)^T U is formed once.
    dk and dv are addressed through their own strides (sgk*, sgv*)."""
    bh, s, _, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)
    q_base = _head(Q, b, h, sqb, sqh, ALIGN)
    k_base = _head(K, b, h, skb, skh, ALIGN)
    v_base = _head(V, b, h, svb, svh, ALIGN)
    do_base = _head(DO, b, h, sdb, sdh, ALIGN)
    bh64 = bh.to(tl.int64)
    dk_base = _head(DK, b, h, sgkb, sgkh, ALIGN)
    dv_base = _head(DV, b, h, sgvb, sgvh, ALIGN)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    R, r, start, end = _segment(RS, RZS, bh, s, offs_k, offs_v, kmask, vmask, Dk, Dv, N, seg_len, nseg_state,
                                state_seg_mult, True)
    nchunks = tl.cdiv(end - start, CHUNK)
    for i in range(0, nchunks):
        rows = start + (nchunks - 1 - i) * CHUNK + tl.arange(0, CHUNK)
        rmask = rows < end
        km = rmask[:, None] & kmask[None, :]
        vm = rmask[:, None] & vmask[None, :]
        k = tl.load(_tile(k_base, rows, offs_k, skn, skd, ALIGN), mask=km, other=0.0)
        phik = feature(k, km, FEATURE)
        v = tl.load(_tile(v_base, rows, offs_v, svn, svd, ALIGN), mask=vm, other=0.0)
        dphik = _mm(v, tl.trans(R), DOT_BF16, PRECISION) + r[None, :]
        dv = _mm(phik, R, DOT_BF16, PRECISION)
        if CAUSAL:
            phiq = feature(tl.load(_tile(q_base, rows, offs_k, sqn, sqd, ALIGN), mask=km, other=0.0), km, FEATURE)
            rden = tl.load(RDEN + bh64 * N + rows, mask=rmask, other=0.0)
            g = tl.load(G + bh64 * N + rows, mask=rmask, other=0.0)
            u = tl.load(_tile(do_base, rows, offs_v, sdn, sdd, ALIGN), mask=vm, other=0.0).to(tl.float32) * rden[:, None]
            causal = rows[None, :] >= rows[:, None]
            Pt = tl.where(causal, _mm(v, tl.trans(u), DOT_BF16, PRECISION) + g[None, :], 0.0)
            dphik += _mm(Pt, phiq, DOT_BF16, PRECISION)
            At = tl.where(causal, _mm(phik, tl.trans(phiq), DOT_BF16, PRECISION), 0.0)
            dv += _mm(At, u, DOT_BF16, PRECISION)
            R += _mm(tl.trans(phiq), u, DOT_BF16, PRECISION)
            r += tl.sum(phiq * g[:, None], axis=0)
        dk = feature_grad(k, dphik, FEATURE)
        tl.store(_tile(dk_base, rows, offs_k, sgkn, sgkd, ALIGN), dk.to(DK.dtype.element_ty), mask=km)
        tl.store(_tile(dv_base, rows, offs_v, sgvn, sgvd, ALIGN), dv.to(DV.dtype.element_ty), mask=vm)


@kernel(inputs=5, outputs=5)
def la_step_kernel(
    Q, K, V, S0, Z0,
    H, Dk, Dv, eps,
    sqb, sqh, sqd, skb, skh, skd, svb, svh, svd,
    O, S1, Z1, RDEN, O32,
    FEATURE: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, ALIGN: tl.constexpr, STORE_O32: tl.constexpr,
):
    """Grid (B*H, Dv tiles). One decoding step: S1 = S0 + phi(k) v^T, z1 = z0 + phi(k),
    o = phi(q) S1 / (phi(q) . z1 + eps), exactly what the causal kernels compute for a row.
    With STORE_O32, o also in fp32 (O32), for the backward: its o . do is a cancellation
    against phi(q)-weighted sums of S1, which o rounded to bf16 would spoil."""
    bh, vb, _, b, h, Dk, Dv = _program(H, Dk, Dv, ALIGN)  # grid axis 1: the Dv tile
    offs_k = tl.arange(0, BK)
    offs_v = vb * BV + tl.arange(0, BV)
    kmask = offs_k < Dk
    vmask = offs_v < Dv
    m2 = kmask[:, None] & vmask[None, :]
    phiq = feature(tl.load(_head(Q, b, h, sqb, sqh, ALIGN) + offs_k * sqd, mask=kmask, other=0.0), kmask, FEATURE)
    phik = feature(tl.load(_head(K, b, h, skb, skh, ALIGN) + offs_k * skd, mask=kmask, other=0.0), kmask, FEATURE)
    v = tl.load(_head(V, b, h, svb, svh, ALIGN) + offs_v * svd, mask=vmask, other=0.0).to(tl.float32)
    # (padding zeroed after the product: 0 * an infinite v would put NaN into o's sum)
    S = tl.load(_state_ptrs(S0, bh, offs_k, offs_v, Dk, Dv), mask=m2, other=0.0) + \
        tl.where(m2, phik[:, None] * v[None, :], 0.0)
    z = tl.load(Z0 + bh.to(tl.int64) * Dk + offs_k, mask=kmask, other=0.0) + phik
    den = tl.sum(phiq * z, axis=0) + eps
    o = tl.sum(phiq[:, None] * S, axis=0) / den
    tl.store(O + bh.to(tl.int64) * Dv + offs_v, o.to(O.dtype.element_ty), mask=vmask)
    if STORE_O32:
        tl.store(O32 + bh.to(tl.int64) * Dv + offs_v, o, mask=vmask)
    tl.store(_state_ptrs(S1, bh, offs_k, offs_v, Dk, Dv), S, mask=m2)
    if vb == 0:
        tl.store(Z1 + bh.to(tl.int64) * Dk + offs_k, z, mask=kmask)
        tl.store(RDEN + bh, 1.0 / den)
