"""Cross-entropy over a vocabulary, from logits [T, V] (row-major) and targets [T].

Per row, an online log-sum-exp over the vocabulary in BLOCK_V pieces (the logits are read
in their own dtype; nothing of [T, V] is stored in fp32). With label smoothing eps:
loss = lse - (1 - eps) x_target - eps * mean_j x_j. A target equal to ignore_index gives
loss 0 and gradient 0; a target outside [0, V) otherwise gives NaN (the adapters reject
such targets where the values are on the host; a kernel never reads out of bounds).

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
gradient pushes out the rows still to be read again. On an H100 (T8192, V128256):
1887 us loss+gradient, 883 us loss alone; 2046 us without the eviction hints, about
2400 us reading forwards as well (benchmarks/results/*-cross_entropy-sweep.txt). Row
offsets are row * V with V's divisibility (ALIGN), so every access is a 16-byte vector.

``ce_count_kernel`` counts the targets that are not ignored and ``ce_reduce_kernel`` sums the
row losses, each in one program (a fixed order: deterministic).
"""

import triton
import triton.language as tl

from .common import aligned


@triton.jit
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
def ce_fwd_kernel(
    LOGITS, TARGETS, COUNT,
    T, V, ignore_index, smoothing,
    LOSS, DLOGITS,
    BLOCK_V: tl.constexpr, SMOOTH: tl.constexpr, MEAN: tl.constexpr, GRAD: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """Grid (G,): program p takes rows p, p + G, ... LOSS [T]: each row's loss (fp32; 0 if
    ignored). With GRAD, DLOGITS [T, V]: the row's gradient for dloss = 1 (see the module
    docstring), scaled by 1 / COUNT when MEAN. ALIGN divides V: row starts are ALIGN-element
    aligned, so the loads and stores are vectors."""
    V = aligned(V, ALIGN)
    offs = tl.arange(0, BLOCK_V)
    if MEAN:
        inv_count = 1.0 / tl.load(COUNT)  # count 0: every row is ignored and scaled by 0 below
    else:
        inv_count = 1.0
    for r in range(tl.program_id(0), T, tl.num_programs(0)):
        row = tl.cast(r, tl.int64)  # (the interpreter's loop index is a Python int)
        base = row * V
        # Per-lane online log-sum-exp with one exp per element: a lane keeps (m, l) with
        # l = sum of exp(x_i - m) over its elements so far. For the next x, with d = x - m,
        # only one of exp(-d) (x is the new max: l = l exp(-d) + 1) and exp(d) (it is not:
        # l = l + exp(d)) is needed, and both are exp(-|d|). m starts at -FLT_MAX, not -inf,
        # so that a masked -inf gives exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
        m = tl.full([BLOCK_V], -3.4028234663852886e38, tl.float32)
        l = tl.zeros([BLOCK_V], tl.float32)
        sx = tl.zeros([BLOCK_V], tl.float32)
        for c0 in range(0, V, BLOCK_V):
            cols = c0 + offs
            cmask = cols < V
            if GRAD:  # read again below: kept in L2 before what is not
                x = tl.load(LOGITS + base + cols, mask=cmask, other=float("-inf"), eviction_policy="evict_last")
            else:
                x = tl.load(LOGITS + base + cols, mask=cmask, other=float("-inf"))
            x = x.to(tl.float32)
            e = tl.exp(-tl.abs(x - m))
            l = tl.where(x > m, l * e + 1.0, l + e)
            m = tl.maximum(m, x)
            if SMOOTH:
                sx += tl.where(cmask, x, 0.0)
        m_row = tl.max(m, 0)
        lse = m_row + tl.log(tl.sum(l * tl.exp(m - m_row), 0))
        t = tl.load(TARGETS + row).to(tl.int64)
        valid = t != ignore_index
        in_range = (t >= 0) & (t < V)
        xt = tl.load(LOGITS + base + tl.where(in_range, t, 0)).to(tl.float32)
        loss = lse - (1.0 - smoothing) * xt
        if SMOOTH:
            loss -= smoothing * tl.sum(sx, 0) / V
        loss = tl.where(in_range, loss, float("nan"))
        tl.store(LOSS + row, tl.where(valid, loss, 0.0))
        if GRAD:
            scale = tl.where(valid, inv_count, 0.0)
            scale = tl.where(in_range | (t == ignore_index), scale, float("nan"))
            n_pieces = tl.cdiv(V, BLOCK_V)
            for i in range(0, n_pieces):
                cols = (n_pieces - 1 - i) * BLOCK_V + offs  # backwards: the last read first
                cmask = cols < V
                # not needed again, and the gradient never read here: both first out of L2
                x = tl.load(LOGITS + base + cols, mask=cmask, other=0.0, eviction_policy="evict_first")
                g = tl.exp(x.to(tl.float32) - lse) - smoothing / V - tl.where(cols == t, 1.0 - smoothing, 0.0)
                tl.store(DLOGITS + base + cols, (g * scale).to(DLOGITS.dtype.element_ty), mask=cmask,
                         eviction_policy="evict_first")


@triton.jit
def ce_reduce_kernel(
    LOSS, COUNT,
    T,
    OUT,
    BLOCK: tl.constexpr, MEAN: tl.constexpr,
):
    """Grid (1,). OUT = the sum of the row losses, divided by COUNT when MEAN (0/0 = NaN when
    every target is ignored)."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for r0 in range(0, T, BLOCK):
        rows = r0 + offs
        acc += tl.load(LOSS + rows, mask=rows < T, other=0.0)
    total = tl.sum(acc, 0)
    if MEAN:
        total = total / tl.load(COUNT)
    tl.store(OUT, total)


@triton.jit
def ce_bwd_kernel(
    GRAD, DLOSS,
    V,
    DLOGITS,
    BLOCK_V: tl.constexpr, PER_ROW: tl.constexpr, ALIGN: tl.constexpr,
):
    """Grid (T,). DLOGITS (the same memory as GRAD: in place) = GRAD * dloss, dloss per row
    (PER_ROW, reduction "none": DLOSS [T]) or one scalar. A factor of exactly 1 leaves the
    row untouched. ALIGN divides V."""
    V = aligned(V, ALIGN)
    row = tl.program_id(0)
    if PER_ROW:
        d = tl.load(DLOSS + row).to(tl.float32)
    else:
        d = tl.load(DLOSS).to(tl.float32)
    if d != 1.0:
        base = row.to(tl.int64) * V
        offs = tl.arange(0, BLOCK_V)
        for c0 in range(0, V, BLOCK_V):
            cols = c0 + offs
            cmask = cols < V
            g = tl.load(GRAD + base + cols, mask=cmask, other=0.0).to(tl.float32)
            tl.store(DLOGITS + base + cols, (g * d).to(DLOGITS.dtype.element_ty), mask=cmask)
