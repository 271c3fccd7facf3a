"""References: Max-L2 coarsening (x [B, H, N, D]; block m is tokens [m * bs, (m + 1) * bs), the
last partial; its representative is the token of largest L2 norm, argmax: the first on ties, a
NaN norm the largest) and block-sparse attention (dense softmax attention with -inf outside the
kept blocks, and outside the causal rule)."""

from __future__ import annotations

from array_api_compat import array_namespace, device

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
                           return_lse=False):
    xp = array_namespace(q, k, v)
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
