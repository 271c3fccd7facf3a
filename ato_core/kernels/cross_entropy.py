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
without touching memory. The grid is persistent (PROGRAMS_PER_SM per SM) to keep few rows in
flight between a row's two reads, in the hope of the second coming from L2; on an H100 at
V = 128256 (250 KB a row) it mostly does not (benchmarks/ce_inplace_probe.py: the forward
with the gradient takes 2.1x the loss-only forward), so the op moves about three passes over
[T, V] (read, read, write), as before, in one kernel instead of two.
``ce_count_kernel`` counts the targets that are not ignored and ``ce_reduce_kernel`` sums the
row losses, each in one program (a fixed order: deterministic).
"""

import triton
import triton.language as tl


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
):
    """Grid (G,): program p takes rows p, p + G, ... LOSS [T]: each row's loss (fp32; 0 if
    ignored). With GRAD, DLOGITS [T, V]: the row's gradient for dloss = 1 (see the module
    docstring), scaled by 1 / COUNT when MEAN."""
    offs = tl.arange(0, BLOCK_V)
    if MEAN:
        inv_count = 1.0 / tl.load(COUNT)  # count 0: every row is ignored and scaled by 0 below
    else:
        inv_count = 1.0
    for r in range(tl.program_id(0), T, tl.num_programs(0)):
        row = tl.cast(r, tl.int64)  # (the interpreter's loop index is a Python int)
        base = row * V
        m = tl.full([BLOCK_V], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_V], tl.float32)
        sx = tl.zeros([BLOCK_V], tl.float32)
        for c0 in range(0, V, BLOCK_V):
            cols = c0 + offs
            cmask = cols < V
            x = tl.load(LOGITS + base + cols, mask=cmask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            l = l * tl.exp(m - m_use) + tl.exp(x - m_use)
            m = m_new
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
            for c0 in range(0, V, BLOCK_V):
                cols = c0 + offs
                cmask = cols < V
                x = tl.load(LOGITS + base + cols, mask=cmask, other=0.0).to(tl.float32)
                g = tl.exp(x - lse) - smoothing / V - tl.where(cols == t, 1.0 - smoothing, 0.0)
                tl.store(DLOGITS + base + cols, (g * scale).to(DLOGITS.dtype.element_ty), mask=cmask)


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
    BLOCK_V: tl.constexpr, PER_ROW: tl.constexpr,
):
    """Grid (T,). DLOGITS (the same memory as GRAD: in place) = GRAD * dloss, dloss per row
    (PER_ROW, reduction "none": DLOSS [T]) or one scalar. A factor of exactly 1 leaves the
    row untouched."""
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
