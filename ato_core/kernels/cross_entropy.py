"""Cross-entropy over a vocabulary, from logits [T, V] (row-major) and targets [T].

Per row, an online log-sum-exp over the vocabulary in BLOCK_V pieces (the logits are read
in their own dtype; nothing of [T, V] is stored in fp32). With label smoothing eps:
loss = lse - (1 - eps) x_target - eps * mean_j x_j. A target equal to ignore_index gives
loss 0 and gradient 0; a target outside [0, V) otherwise gives NaN (the adapters reject
such targets where they can see the values; a kernel never reads out of bounds).
``ce_reduce_kernel`` sums the row losses in a fixed order (one program: deterministic) and
counts the targets that are not ignored. Backward: dlogits = (softmax(x) - eps / V -
(1 - eps) onehot(target)) * dloss_row, written in the logits' dtype.
"""

import triton
import triton.language as tl


@triton.jit
def ce_fwd_kernel(
    LOGITS, TARGETS,
    T, V, ignore_index, smoothing,
    LOSS, LSE,
    BLOCK_V: tl.constexpr, SMOOTH: tl.constexpr,
):
    """Grid (T,). loss and lse of one row (fp32)."""
    row = tl.program_id(0).to(tl.int64)
    base = LOGITS + row * V
    offs = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_V], tl.float32)
    sx = tl.zeros([BLOCK_V], tl.float32)
    for c0 in range(0, V, BLOCK_V):
        cols = c0 + offs
        cmask = cols < V
        x = tl.load(base + cols, mask=cmask, other=float("-inf")).to(tl.float32)
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
    xt = tl.load(base + tl.where(in_range, t, 0)).to(tl.float32)
    loss = lse - (1.0 - smoothing) * xt
    if SMOOTH:
        loss -= smoothing * tl.sum(sx, 0) / V
    loss = tl.where(in_range, loss, float("nan"))
    tl.store(LOSS + row, tl.where(valid, loss, 0.0))
    tl.store(LSE + row, lse)


@triton.jit
def ce_reduce_kernel(
    LOSS, TARGETS,
    T, ignore_index,
    OUT, COUNT,
    BLOCK: tl.constexpr, MEAN: tl.constexpr,
):
    """Grid (1,). OUT = sum of the row losses (divided by the count of targets that are not
    ignored when MEAN; 0/0 = NaN when all are), COUNT = that count (fp32)."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)
    for r0 in range(0, T, BLOCK):
        rows = r0 + offs
        rmask = rows < T
        acc += tl.load(LOSS + rows, mask=rmask, other=0.0)
        t = tl.load(TARGETS + rows, mask=rmask, other=ignore_index)
        cnt += tl.where(rmask & (t != ignore_index), 1.0, 0.0)
    total = tl.sum(acc, 0)
    count = tl.sum(cnt, 0)
    if MEAN:
        total = total / count
    tl.store(OUT, total)
    tl.store(COUNT, count)


@triton.jit
def ce_bwd_kernel(
    LOGITS, TARGETS, LSE, DLOSS, COUNT,
    T, V, ignore_index, smoothing,
    DLOGITS,
    BLOCK_V: tl.constexpr, REDUCTION: tl.constexpr,
):
    """Grid (T,). REDUCTION: 0 none (DLOSS [T]), 1 sum, 2 mean (DLOSS a scalar)."""
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(TARGETS + row).to(tl.int64)
    if REDUCTION == 0:
        scale = tl.load(DLOSS + row).to(tl.float32)
    elif REDUCTION == 1:
        scale = tl.load(DLOSS).to(tl.float32)
    else:
        scale = tl.load(DLOSS).to(tl.float32) / tl.load(COUNT)
    scale = tl.where(t != ignore_index, scale, 0.0)
    in_range = (t >= 0) & (t < V)
    scale = tl.where(in_range | (t == ignore_index), scale, float("nan"))
    lse = tl.load(LSE + row)
    base = row * V
    offs = tl.arange(0, BLOCK_V)
    for c0 in range(0, V, BLOCK_V):
        cols = c0 + offs
        cmask = cols < V
        x = tl.load(LOGITS + base + cols, mask=cmask, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - smoothing / V - tl.where(cols == t, 1.0 - smoothing, 0.0)
        tl.store(DLOGITS + base + cols, (g * scale).to(DLOGITS.dtype.element_ty), mask=cmask)
