"""References: Max-L2 coarsening (x [B, H, N, D]; block m is tokens [m * bs, (m + 1) * bs), the
last partial; its representative is the token of largest L2 norm, argmax: the first on ties, a
NaN norm the largest), block-sparse attention (dense softmax attention with -inf outside the
kept blocks, and outside the causal rule) and the curvature block mask (the formula of
curvature_block_mask's docstring, ranked by a stable sort)."""

from __future__ import annotations

import math

from array_api_compat import array_namespace, device

from ato_core.layout import bnhd_reference

from ..flash_attention.reference import masked_attention


def max_l2_coarsen(x, block_size):
    xp = array_namespace(x)
    dev = device(x)
    B, H, N, D = x.shape
    M = -(-N // block_size)
    norms = xp.sum(x * x, axis=-1)  # [B, H, N]; float64 in the tests: neither overflows nor underflows
    pad = M * block_size - N
    if pad:
        norms = xp.concat([norms, xp.full((B, H, pad), -1.0, dtype=norms.dtype, device=dev)], axis=-1)
    blocks = xp.reshape(norms, (B, H, M, block_size))
    nan = xp.isnan(blocks)
    first_nan = xp.argmax(xp.astype(nan, xp.int32), axis=-1)
    pick = xp.where(xp.any(nan, axis=-1), first_nan, xp.argmax(xp.where(nan, 0.0, blocks), axis=-1))
    index = xp.astype(pick, xp.int64) + xp.reshape(xp.arange(M, dtype=xp.int64, device=dev) * block_size, (1, 1, M))
    flat = xp.reshape(xp.arange(B * H, dtype=xp.int64, device=dev) * N, (B, H, 1)) + index
    x_coarse = xp.reshape(xp.take(xp.reshape(x, (B * H * N, D)), xp.reshape(flat, (B * H * M,)), axis=0),
                          (B, H, M, D))
    return x_coarse, xp.astype(index, xp.int32)


def block_sparse_attention(q, k, v, block_mask, *, block_size=64, causal=False, softmax_scale=None,
                           return_lse=False, layout="bhnd"):
    xp = array_namespace(q, k, v)
    if layout == "bnhd":
        return bnhd_reference(xp, lambda q, k, v, **kw: block_sparse_attention(q, k, v, block_mask, **kw), q, k, v,
                              block_size=block_size, causal=causal, softmax_scale=softmax_scale,
                              return_lse=return_lse)
    dev = device(q)
    Nq, Nk = q.shape[2], k.shape[2]
    bi = xp.arange(Nq, device=dev) // block_size
    bj = xp.arange(Nk, device=dev) // block_size
    mask = xp.asarray(block_mask, device=dev)
    visible = xp.take(xp.take(mask, bi, axis=2), bj, axis=3)                  # [B, Hq, Nq, Nk]
    if causal:
        i = xp.arange(Nq, device=dev)[:, None]
        j = xp.arange(Nk, device=dev)[None, :]
        visible = visible & (j <= i + (Nk - Nq))
    return masked_attention(q, k, v, visible, softmax_scale, return_lse)


def curvature_block_mask(q, k, *, block_size=64, keep=0.1, lam=0.5, causal=True, local_blocks=1, layout="bhnd"):
    xp = array_namespace(q, k)
    if layout == "bnhd":
        q, k = (xp.permute_dims(t, (0, 2, 1, 3)) for t in (q, k))
    dev = device(q)
    qc, _ = max_l2_coarsen(q, block_size)
    kc, _ = max_l2_coarsen(k, block_size)
    B, Hq, M, D = qc.shape
    G = Hq // kc.shape[1]
    kc = xp.take(kc, xp.arange(Hq, device=dev) // G, axis=1)
    s = xp.matmul(qc, xp.matrix_transpose(kc)) / math.sqrt(D)
    finite = xp.abs(s) < math.inf
    A = xp.where(finite & (s <= 0), xp.zeros_like(s), s)                         # relu where finite
    lo = xp.min(xp.where(finite, A, xp.full_like(A, math.inf)), axis=(-2, -1), keepdims=True)
    hi = xp.max(xp.where(finite, A, xp.full_like(A, -math.inf)), axis=(-2, -1), keepdims=True)
    spread = hi - lo
    positive = spread > 0
    An = xp.where(positive & finite, (A - lo) / xp.where(positive, spread, xp.ones_like(spread)), xp.zeros_like(A))
    F = xp.where(finite, An - lam * (xp.matmul(An, An) / M), xp.full_like(A, math.nan))
    i = xp.arange(M, device=dev)[:, None]
    j = xp.arange(M, device=dev)[None, :]
    allowed = (j <= i) if causal else xp.ones((M, M), dtype=xp.bool, device=dev)
    n_allowed = xp.sum(xp.astype(allowed, xp.int64), axis=-1)                   # [M]
    n_keep = xp.asarray([math.ceil(keep * int(n)) for n in n_allowed], device=dev)[:, None]
    # rank of each allowed block by F, descending (NaN first: s not finite; else An in [0, 1]),
    # ties to the lower index (a stable sort)
    key = xp.where(xp.isnan(F), xp.full_like(F, -math.inf), -F)
    key = xp.where(allowed, key, xp.full_like(F, math.inf))
    order = xp.argsort(key, axis=-1, stable=True)
    rank = xp.argsort(order, axis=-1, stable=True)
    chosen = allowed & ((rank < n_keep) | xp.isnan(F))
    local = allowed & (j <= i) & (j > i - local_blocks)
    return chosen | local | (j == 0)


def cab_attention(q, k, v, *, block_size=64, keep=0.1, lam=0.5, causal=True, local_blocks=1, softmax_scale=None,
                  return_lse=False, layout="bhnd"):
    mask = curvature_block_mask(q, k, block_size=block_size, keep=keep, lam=lam, causal=causal,
                                local_blocks=local_blocks, layout=layout)
    return block_sparse_attention(q, k, v, mask, block_size=block_size, causal=causal, softmax_scale=softmax_scale,
                                  return_lse=return_lse, layout=layout)
