"""Reference attention: the plain softmax form, materialising the [Nq, Nk] scores.

q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D] with Hq a multiple of Hkv (query head h reads kv
head h // (Hq / Hkv)). s = q k^T * scale; causal masks align to the bottom right (query i
sees key j iff j <= i + Nk - Nq); o = softmax(s) v over the visible keys, 0 for a query
that sees none; lse = log(sum(exp(s))) over the visible keys (-inf for a query that sees none).
With dropout, o = (softmax(s) * keep * scale) v, the keep-mask drawn by ``dropout_keep``
(Philox written out in NumPy, not read off the kernels).
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace, device

from ato_core.layout import bnhd_reference


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, layout="bhnd", window_size=None,
                    softcap=None, alibi_slopes=None, q_lengths=None, kv_lengths=None, segment_ids=None, bias=None,
                    mask=None, dropout_p=0.0, seed=None):
    xp = array_namespace(q, k, v)
    options = dict(window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, q_lengths=q_lengths,
                   kv_lengths=kv_lengths, segment_ids=segment_ids, bias=bias, mask=mask, dropout_p=dropout_p,
                   seed=seed)
    if layout == "bnhd":
        return bnhd_reference(xp, flash_attention, q, k, v, causal=causal, softmax_scale=softmax_scale,
                              return_lse=return_lse, **options)
    B, Hq, Nq = q.shape[:3]
    Nk = k.shape[2]
    dev = device(q)
    i = xp.reshape(xp.arange(Nq, device=dev), (1, Nq, 1))
    j = xp.reshape(xp.arange(Nk, device=dev), (1, 1, Nk))
    q_len = Nq if q_lengths is None else xp.reshape(xp.astype(q_lengths, xp.int64), (B, 1, 1))
    kv_len = Nk if kv_lengths is None else xp.reshape(xp.astype(kv_lengths, xp.int64), (B, 1, 1))
    rel = i + (kv_len - q_len) - j                                   # [B or 1, Nq, Nk]: i + shift - j
    visible = (i < q_len) & (j < kv_len)
    left, right = (None, None) if window_size is None else tuple(None if w in (None, -1) else w for w in window_size)
    if causal:
        right = 0
    if right is not None:
        visible = visible & (rel >= -right)
    if left is not None:
        visible = visible & (rel <= left)
    if segment_ids is not None:
        q_seg, kv_seg = segment_ids if isinstance(segment_ids, (tuple, list)) else (segment_ids, segment_ids)
        visible = visible & (q_seg[:, :, None] == kv_seg[:, None, :])
    bias = None if bias is None else xp.astype(bias, q.dtype)    # added after the softcap, as ALiBi
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.ndim == 2 else alibi_slopes[None, :]
        alibi = -xp.astype(slopes, q.dtype)[:, :, None, None] * xp.astype(xp.abs(rel), q.dtype)[:, None]
        bias = alibi if bias is None else bias + alibi
    visible = xp.broadcast_to(visible[:, None], (B, Hq, Nq, Nk))
    if mask is not None:
        visible = visible & xp.broadcast_to(mask, (B, Hq, Nq, Nk))
    dropped = None
    if dropout_p:
        bh = np.arange(B * Hq).reshape(B, Hq, 1, 1)
        keep = dropout_keep(seed, dropout_p, bh, np.arange(Nq)[:, None], np.arange(Nk)[None, :])
        dropped = xp.asarray(keep * _dropout_scale(dropout_p), dtype=q.dtype, device=dev)
    return masked_attention(q, k, v, visible, softmax_scale, return_lse, softcap=softcap or None, bias=bias,
                            dropped=dropped)


def masked_attention(q, k, v, visible, softmax_scale=None, return_lse=False, softcap=None, bias=None, dropped=None):
    """Softmax attention over the visible (query, key) pairs: ``visible`` [Nq, Nk] or
    [B, Hq, Nq, Nk] (bool); a query that sees no key gets o = 0 and lse = -inf. The scores
    s = q k^T * softmax_scale become softcap * tanh(s / softcap) with a softcap, then gain
    ``bias`` (broadcastable to [B, Hq, Nq, Nk]) if given. ``dropped``: the probabilities'
    dropout factors (keep / (1 - p), [B, Hq, Nq, Nk]), applied after the softmax."""
    xp = array_namespace(q, k, v)
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    qg = xp.reshape(q, (B, Hkv, G, Nq, D))
    s = xp.matmul(qg, xp.matrix_transpose(k)[:, :, None]) * scale            # [B, Hkv, G, Nq, Nk]
    if softcap is not None:
        s = softcap * xp.tanh(s / softcap)
    if bias is not None:
        s = s + xp.reshape(xp.broadcast_to(bias, (B, Hq, Nq, Nk)), (B, Hkv, G, Nq, Nk))
    if visible.ndim == 4:
        visible = xp.reshape(visible, (B, Hkv, G, Nq, Nk))
    # values of keys no query sees are never read (a NaN there reaches no output)
    seen = xp.any(visible, axis=0)[:, None] if visible.ndim == 2 else xp.any(visible, axis=(2, 3))[..., None]
    v = xp.where(seen, v, xp.zeros_like(v))
    neg_inf = xp.asarray(-math.inf, dtype=s.dtype, device=device(q))
    m = xp.max(xp.where(visible, s, neg_inf), axis=-1, keepdims=True)
    m = xp.where(m == -math.inf, xp.zeros_like(m), m)                       # rows that see no key
    e = xp.where(visible, xp.exp(xp.where(visible, s - m, neg_inf)), xp.zeros_like(s))
    l = xp.sum(e, axis=-1, keepdims=True)
    seen = l != 0                                                            # (NaN: seen, and lse NaN)
    l_safe = xp.where(seen, l, xp.ones_like(l))
    probs = e / l_safe
    if dropped is not None:
        probs = probs * xp.reshape(dropped, (B, Hkv, G, Nq, Nk))
    o = xp.matmul(probs, v[:, :, None])
    o = xp.reshape(xp.where(seen, o, xp.zeros_like(o)), (B, Hq, Nq, D))  # (0 * an infinite v: not NaN)
    if not return_lse:
        return o
    lse = xp.where(seen, m + xp.log(l_safe), xp.full_like(l, -math.inf))
    return o, xp.reshape(lse, (B, Hq, Nq))


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                           softmax_scale=None, return_lse=False, window_size=None, softcap=None, alibi_slopes=None,
                           dropout_p=0.0, seed=None):
    """Packed sequences, one dense masked attention per sequence b over all Tq x Tk pairs: query
    row r of b (cu_q[b] <= r < cu_q[b + 1], position i = r - cu_q[b] < max_seqlen_q) sees key
    row c of b (position j < max_seqlen_k) under flash_attention's rules at b's lengths, and
    only b's values (others zeroed: nothing of another sequence reaches its rows, not even a
    NaN); rows in no sequence get o = 0, lse = -inf. o [Tq, Hq, D], lse [Hq, Tq]."""
    xp = array_namespace(q, k, v)
    dev = device(q)
    Tq, Hq, D = q.shape
    Tk = k.shape[0]
    cu_q, cu_k = (xp.astype(c, xp.int64) for c in (cu_seqlens_q, cu_seqlens_k))
    left, right = (None, None) if window_size is None else tuple(None if w in (None, -1) else w for w in window_size)
    if causal:
        right = 0
    qh, kh = (xp.permute_dims(t, (1, 0, 2))[None] for t in (q, k))      # [1, H, T, D]
    o = xp.zeros_like(qh)
    lse = xp.full((1, Hq, Tq), -math.inf, dtype=q.dtype, device=dev)
    for b in range(cu_q.shape[0] - 1):
        def member(cu, T, longest):  # [T]: row in sequence b; its position there
            pos = xp.arange(T, device=dev) - cu[b]
            return (pos >= 0) & (pos < cu[b + 1] - cu[b]) & (pos < longest), pos

        in_q, i = member(cu_q, Tq, max_seqlen_q)
        in_k, j = member(cu_k, Tk, max_seqlen_k)
        shift = xp.minimum(cu_k[b + 1] - cu_k[b], max_seqlen_k) - xp.minimum(cu_q[b + 1] - cu_q[b], max_seqlen_q)
        rel = i[:, None] + shift - j[None, :]                                 # [Tq, Tk]: i + shift - j
        visible = in_q[:, None] & in_k[None, :]
        if right is not None:
            visible = visible & (rel >= -right)
        if left is not None:
            visible = visible & (rel <= left)
        bias = None
        if alibi_slopes is not None:
            slope = alibi_slopes[b] if alibi_slopes.ndim == 2 else alibi_slopes
            bias = -xp.astype(slope, q.dtype)[None, :, None, None] * xp.astype(xp.abs(rel), q.dtype)[None, None]
        vb = xp.permute_dims(xp.where(in_k[:, None, None], v, xp.zeros_like(v)), (1, 0, 2))[None]
        dropped = None
        if dropout_p:  # sequence b's mask at its positions (rows outside it: any value, not seen)
            i_np, j_np = (np.clip(_host(x), 0, None) for x in (i, j))
            keep = dropout_keep(seed, dropout_p, b * Hq + np.arange(Hq)[:, None, None], i_np[:, None], j_np[None, :])
            dropped = xp.asarray(keep[None] * _dropout_scale(dropout_p), dtype=q.dtype, device=dev)
        ob, lb = masked_attention(qh, kh, vb, visible, softmax_scale, True, softcap=softcap or None, bias=bias,
                                  dropped=dropped)
        o = xp.where(in_q[:, None], ob, o)
        lse = xp.where(in_q, lb, lse)
    o = xp.permute_dims(o[0], (1, 0, 2))
    return (o, lse[0]) if return_lse else o


# -- attention dropout ----------------------------------------------------------------------

_PHILOX_ROUND = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY = (0x9E3779B9, 0xBB67AE85)


def philox4x32(seed: int, c0, c1, c2, c3, rounds: int = 10):
    """Philox4x32 (Salmon et al. 2011; Triton's tl.philox) of the counters c0..c3 (integer
    arrays, broadcast) under the 64-bit key ``seed``: four uint32 arrays."""
    mask = np.uint64(0xFFFFFFFF)
    c = [np.asarray(x).astype(np.uint64) & mask for x in np.broadcast_arrays(c0, c1, c2, c3)]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    a, b = np.uint64(_PHILOX_ROUND[0]), np.uint64(_PHILOX_ROUND[1])
    for _ in range(rounds):
        pa, pb = a * c[0], b * c[2]  # 32 x 32 bits: exact in uint64
        c = [(pb >> np.uint64(32)) ^ c[1] ^ k0, pb & mask, (pa >> np.uint64(32)) ^ c[3] ^ k1, pa & mask]
        k0, k1 = (k0 + np.uint64(_PHILOX_KEY[0])) & mask, (k1 + np.uint64(_PHILOX_KEY[1])) & mask
    return tuple(x.astype(np.uint32) for x in c)


def _host(x):
    return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x)


def _dropout_scale(dropout_p: float) -> float:
    from .plans import dropout_threshold
    return dropout_threshold(dropout_p)[1]


def seed_value(seed) -> int:
    """A dropout seed as the 64-bit integer the kernels read: an int, a 0-d integer array, or a
    key's data (two uint32 words, high first; a typed jax.random key is read as its data)."""
    if isinstance(seed, int):
        return seed
    if "key" in str(getattr(seed, "dtype", "")):
        import jax
        seed = jax.random.key_data(seed)
    words = _host(seed)
    if words.shape == ():
        return int(words.astype(np.int64)) & 0xFFFFFFFFFFFFFFFF
    hi, lo = (int(w) & 0xFFFFFFFF for w in words.astype(np.int64))
    return (hi << 32) | lo


def dropout_keep(seed, dropout_p: float, bh, i, j):
    """The attention-dropout keep-mask (bool, the broadcast shape of bh, i, j) of query i and
    key j of head bh = b * Hq + h, as kernels._dropout_keep draws it: Philox4x32-7 under key
    ``seed`` (any form flash_attention takes but a torch.Generator) on the counter
    ((j // 32) * 4 + (j // 2) % 4, (i // 16) * 8 + i % 8, bh, 0); the pair takes byte
    j % 2 + 2 ((j // 8) % 2) of word (j % 32) // 16 + 2 ((i // 8) % 2), kept iff >= thr
    (plans.dropout_threshold)."""
    from .plans import DROPOUT_ROUNDS, dropout_threshold
    thr = dropout_threshold(dropout_p)[0]
    i, j = np.asarray(i), np.asarray(j)
    words = philox4x32(seed_value(seed), (j // 32) * 4 + (j // 2) % 4, (i // 16) * 8 + i % 8, bh, 0,
                       rounds=DROPOUT_ROUNDS)
    word = np.choose((j % 32) // 16 + 2 * ((i // 8) % 2), words)
    byte = j % 2 + 2 * ((j // 8) % 2)
    return ((word >> (8 * byte).astype(np.uint32)) & np.uint32(0xFF)) >= thr
