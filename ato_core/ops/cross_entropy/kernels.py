"""Cross-entropy over a vocabulary, from logits [T, V] (row-major) and targets [T].

Per row, an online log-sum-exp over the vocabulary in BLOCK_V pieces (the logits are read
in their own dtype; nothing of [T, V] is stored in fp32). With label smoothing eps:
loss = lse - (1 - eps) x_target - eps * mean_j x_j. A target equal to ignore_index gives
loss 0 and gradient 0; a target outside [0, V) otherwise gives NaN (the adapters reject
such targets where the values are on the host; a kernel never reads out of bounds).

Options, each a constexpr so the plain path keeps its instructions: SOFTCAP replaces every
logit x by cap * tanh(x / cap) (Gemma 2) as it is read, in the log-sum-exp pass, the target's
logit and the gradient pass (which multiplies by tanh's derivative 1 - tanh^2); ZLOSS adds
z_loss * lse^2 (PaLM) to each row's loss, which scales the softmax part of the gradient by
1 + 2 z_loss lse; ZOUT also stores each row's z_loss * lse^2.

The gradient is computed in the forward, as Liger-Kernel does, when the caller will need it:
right after a row's log-sum-exp the same program reads the row again and writes
dlogits = (softmax(x) - eps / V - (1 - eps) onehot(target)) * s, with s = 1 / count for
"mean" and 1 otherwise: the gradient for dloss = 1. The backward then only multiplies by
dloss, in place, and a program whose factor is exactly 1 (``loss.backward()``) returns
without touching memory.

Memory traffic. The op must read [T, V] once and write it once; the second read of a row
should come from L2. A row of V = 128256 in bf16 is 250 KB, and one program per SM keeps
132 of them (33 MB) in flight on an H100, near the 50 MB L2. So the first read marks its
lines evict-last, the second reads the row backwards (the pieces read last first) and marks
what it reads and writes evict-first, so that neither the row already used nor the
gradient pushes out the rows still to be read again. Row offsets are row * V with V's
divisibility (ALIGN), so every access is a 16-byte vector.

Instructions. With one program per SM the passes must also be cheap per element. The
log-sum-exp takes each thread's vector maximum m first, then spends one subtract, one
multiply, one exp2 and one add per element: 2^((x - m) log2 e), whose exponent is never
positive, since m is one of the logits (not a rounded m log2 e), so no finite logit, up to
the largest fp32, can overflow it. The gradient pass spends one subtract, one FMA and one
exp2 per element (the row's log-sum-exp kept as two fp32 numbers, see there); the one-hot
target's element is written by one store after the row. The measurements behind these
choices: benchmarks/results/README.md (cross_entropy).

``ce_count_kernel`` counts the targets that are not ignored and ``ce_reduce_kernel`` sums the
row losses, each in one program (a fixed order: deterministic).
"""

import triton
import triton.language as tl

from ato_core.launch import kernel
from ato_core.triton_helpers import aligned, const_like, tanh_slope, widen


@kernel(inputs=1, outputs=1)
def ce_count_kernel(
    TARGETS,
    T, ignore_index,
    COUNT,
    BLOCK: tl.constexpr,
):
    """Grid (1,). COUNT = the number of targets that are not ignore_index (fp32)."""
    offs = tl.arange(0, BLOCK)
    cnt = tl.zeros([BLOCK], tl.float32)
    for r0 in range(0, T, BLOCK):
        rows = r0 + offs
        t = tl.load(TARGETS + rows, mask=rows < T, other=ignore_index)
        cnt += tl.where(t != ignore_index, 1.0, 0.0)
    tl.store(COUNT, tl.sum(cnt, 0))


@triton.jit
def _capped(x, cap, inv_cap, SOFTCAP: tl.constexpr):
    """(cap tanh(x / cap), its slope 1 - tanh^2) with SOFTCAP (tanh_slope), else (x, 0)."""
    if SOFTCAP:
        r, slope = tanh_slope(x, inv_cap)
        return cap - (2.0 * cap) * r, slope
    else:
        return x, 0.0


@kernel(inputs=3, outputs=3)
def ce_fwd_kernel(
    LOGITS, TARGETS, COUNT,
    T, V, ignore_index, smoothing, z_loss, cap, inv_cap,
    LOSS, DLOGITS, ZROW,
    BLOCK_V: tl.constexpr, VEC: tl.constexpr, SMOOTH: tl.constexpr, MEAN: tl.constexpr,
    GRAD: tl.constexpr, ALIGN: tl.constexpr, ZLOSS: tl.constexpr = False, ZOUT: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
):
    """Grid (G,): program p takes rows p, p + G, ... LOSS [T]: each row's loss (fp32; 0 if
    ignored). With GRAD, DLOGITS [T, V]: the row's gradient for dloss = 1 (see the module
    docstring), scaled by 1 / COUNT when MEAN. ALIGN divides V: row starts are ALIGN-element
    aligned, so the loads and stores are vectors. VEC divides BLOCK_V: a thread's run of
    contiguous elements in the log-sum-exp (see there).

    SOFTCAP: every logit x is first cap tanh(x / cap) (inv_cap = 1 / cap), the gradient
    multiplied by its derivative 1 - tanh^2. ZLOSS: each row's loss gains z_loss lse^2 and
    its gradient the factor 1 + 2 z_loss lse on the softmax; ZOUT: ZROW [T] holds that term
    (0 if ignored)."""
    LOG2E: tl.constexpr = 1.4426950408889634
    LN2: tl.constexpr = 0.6931471805599453
    V = aligned(V, ALIGN)
    # The log-sum-exp reads a piece as [BLOCK_V // VEC, VEC]: a row of it is VEC contiguous
    # elements, one thread's vector load, so reductions over axis 1 stay in the thread.
    offs2 = tl.arange(0, BLOCK_V // VEC)[:, None] * VEC + tl.arange(0, VEC)[None, :]
    offs = tl.arange(0, BLOCK_V)
    # The count (fp32 in COUNT) and V as divisors in the accumulation dtype (ACC, LOSS's): 1.0 /
    # an integer would be fp32 in a float64 kernel. (Both integers: exact.)
    ACC: tl.constexpr = LOSS.dtype.element_ty
    nv = V.to(ACC)
    if MEAN:
        inv_count = 1.0 / tl.load(COUNT).to(ACC)  # count 0: every row is ignored and scaled by 0 below
    else:
        inv_count = 1.0
    inv_v = 1.0 / nv
    for r in range(tl.program_id(0), T, tl.num_programs(0)):
        row = tl.cast(r, tl.int64)  # (the interpreter's loop index is a Python int)
        base = row * V
        # Online log-sum-exp per vector: (m, l) with m the largest logit of the vector's
        # elements so far and l = sum of 2^((x - m) log2 e) over them. A vector that has seen
        # only -inf keeps m = -inf and l = 0 (m_use = 0 there, never -inf - -inf).
        m = tl.full([BLOCK_V // VEC], float("-inf"), LOSS.dtype.element_ty)
        l = tl.zeros([BLOCK_V // VEC], LOSS.dtype.element_ty)
        sx = tl.zeros([BLOCK_V // VEC], LOSS.dtype.element_ty)
        for c0 in range(0, V, BLOCK_V):
            cols = c0 + offs2
            cmask = cols < V
            if GRAD:  # read again below: kept in L2 before what is not
                x = tl.load(LOGITS + base + cols, mask=cmask, other=float("-inf"), eviction_policy="evict_last")
            else:
                x = tl.load(LOGITS + base + cols, mask=cmask, other=float("-inf"))
            x = widen(x)
            if SOFTCAP:  # (padding stays -inf, not -cap)
                x = tl.where(cmask, _capped(x, cap, inv_cap, SOFTCAP)[0], float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            e = tl.exp2((x - m_use[:, None]) * LOG2E)
            l = l * tl.exp2((m - m_use) * LOG2E) + tl.sum(e, 1)
            m = m_new
            if SMOOTH:  # the mean of x as a sum of x / V, which cannot overflow
                sx += tl.sum(tl.where(cmask, x * inv_v, 0.0), 1)
        # The row's lse is kept as m_row + lo * ln 2, lo = log2 of the row's sum (small),
        # never rounded into one fp32 number: the loss (m_row - xt) + lo ln 2 and the exponent
        # (x - m_row) log2 e - lo keep their precision where x is near the max, where a logit
        # of 1e4 (fp32 ulp 1e-3) would otherwise lose it.
        m_row = tl.max(m, 0)
        m_row_use = tl.where(m_row == float("-inf"), 0.0, m_row)
        lo = tl.log2(tl.sum(l * tl.exp2((m - m_row_use) * LOG2E), 0))
        t = tl.load(TARGETS + row).to(tl.int64)
        valid = t != ignore_index
        in_range = (t >= 0) & (t < V)
        xt, slope_t = _capped(widen(tl.load(LOGITS + base + tl.where(in_range, t, 0))), cap, inv_cap, SOFTCAP)
        # loss = lse - (1 - eps) xt - eps mean(x) = (lse - xt) + eps (xt - mean(x))
        loss = (m_row - xt) + lo * LN2
        if SMOOTH:
            loss += smoothing * xt - smoothing * tl.sum(sx, 0)
        zfac = 1.0  # d(loss)/d(lse) on the softmax: 1, or 1 + 2 z_loss lse
        if ZLOSS or ZOUT:
            lse = m_row + lo * LN2
            zrow = z_loss * lse * lse
            if ZLOSS:
                loss += zrow
                zfac = 1.0 + 2.0 * z_loss * lse
            if ZOUT:
                tl.store(ZROW + row, tl.where(valid, tl.where(in_range, zrow, float("nan")), 0.0))
        loss = tl.where(in_range, loss, float("nan"))
        tl.store(LOSS + row, tl.where(valid, loss, 0.0))
        if GRAD:
            scale = tl.where(valid, inv_count, 0.0)
            scale = tl.where(in_range | (t == ignore_index), scale, float("nan"))
            # g = exp(x - lse) * scale = 2^((x - m_row) log2 e - c), c = lo - log2(scale): one
            # subtract, one FMA and one exp2 per element (scale 0: c = inf and g = 0, but a row
            # whose lse is NaN, as torch's softmax of it, is NaN even where it is ignored). The
            # target's element is written again after the loop.
            nonzero = tl.where(scale == 0.0, 1.0, scale)
            c = tl.where(scale == 0.0, float("inf") + 0.0 * lo, lo - tl.log2(nonzero))
            n_pieces = tl.cdiv(V, BLOCK_V)
            for i in range(0, n_pieces):
                cols = (n_pieces - 1 - i) * BLOCK_V + offs  # backwards: the last read first
                cmask = cols < V
                # not needed again, and the gradient never read here: both first out of L2
                x = tl.load(LOGITS + base + cols, mask=cmask, other=0.0, eviction_policy="evict_first")
                x, slope = _capped(widen(x), cap, inv_cap, SOFTCAP)
                if ZLOSS:  # (the factor may be 0 or negative: not folded into c)
                    g = tl.exp2(tl.fma(x - m_row, const_like(LOG2E, x), -lo)) * (zfac * scale)
                else:
                    g = tl.exp2(tl.fma(x - m_row, const_like(LOG2E, x), -c))
                if SMOOTH:
                    g -= smoothing * scale / V
                if SOFTCAP:
                    g *= slope
                tl.store(DLOGITS + base + cols, g.to(DLOGITS.dtype.element_ty), mask=cmask,
                         eviction_policy="evict_first")
            # Every thread's stores above are visible to the whole program after the barrier,
            # so the target's element below is written last.
            tl.debug_barrier()
            p_t = tl.exp2(tl.fma(xt - m_row, const_like(LOG2E, xt), -lo))
            gt = (p_t * zfac - smoothing / nv - (1.0 - smoothing)) * scale
            if SOFTCAP:
                gt *= slope_t
            tl.store(DLOGITS + base + t, gt.to(DLOGITS.dtype.element_ty), mask=in_range)


@kernel(inputs=2, outputs=1)
def ce_reduce_kernel(
    LOSS, COUNT,
    T,
    OUT,
    BLOCK: tl.constexpr, MEAN: tl.constexpr,
):
    """Grid (1,). OUT = the sum of the row losses, divided by COUNT when MEAN (0/0 = NaN when
    every target is ignored). A sum that overflows (losses near the largest fp32) is summed
    again as loss / COUNT when MEAN, since the mean may still be finite."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], LOSS.dtype.element_ty)
    for r0 in range(0, T, BLOCK):
        rows = r0 + offs
        acc += tl.load(LOSS + rows, mask=rows < T, other=0.0)
    total = tl.sum(acc, 0)
    if MEAN:
        count = tl.load(COUNT)
        if total == float("inf"):
            acc = tl.zeros([BLOCK], LOSS.dtype.element_ty)
            for r0 in range(0, T, BLOCK):
                rows = r0 + offs
                acc += tl.load(LOSS + rows, mask=rows < T, other=0.0) / count
            total = tl.sum(acc, 0)
        else:
            total = total / count
    tl.store(OUT, total)


@kernel(inputs=2, outputs=1)
def ce_bwd_kernel(
    GRAD, DLOSS,
    V,
    DLOGITS,
    BLOCK_V: tl.constexpr, PER_ROW: tl.constexpr, ALIGN: tl.constexpr, INPLACE: tl.constexpr = True,
):
    """Grid (T,). DLOGITS = GRAD * dloss, dloss per row (PER_ROW, reduction "none": DLOSS
    [T]) or one scalar. INPLACE: DLOGITS is GRAD's memory, and a factor of exactly 1 leaves
    the row untouched. ALIGN divides V."""
    V = aligned(V, ALIGN)
    row = tl.program_id(0)
    if PER_ROW:
        d = widen(tl.load(DLOSS + row))
    else:
        d = widen(tl.load(DLOSS))
    if d != 1.0 or not INPLACE:
        base = row.to(tl.int64) * V
        offs = tl.arange(0, BLOCK_V)
        for c0 in range(0, V, BLOCK_V):
            cols = c0 + offs
            cmask = cols < V
            g = widen(tl.load(GRAD + base + cols, mask=cmask, other=0.0))
            tl.store(DLOGITS + base + cols, (g * d).to(DLOGITS.dtype.element_ty), mask=cmask)
