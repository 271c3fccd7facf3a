"""Reference attention: the plain softmax form, materialising the [Nq, Nk] scores.

q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D] with Hq a multiple of Hkv (query head h reads kv
head h // (Hq / Hkv)). s = q k^T * scale; causal masks align to the bottom right (query i
sees key j iff j <= i + Nk - Nq); o = softmax(s) v over the visible keys, 0 for a query
that sees none; lse = log(sum(exp(s))) over the visible keys (-inf for a query that sees none).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace, device

from ato_core.layout import bnhd_reference


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, layout="bhnd", window_size=None,
                    softcap=None, alibi_slopes=None, q_lengths=None, kv_lengths=None, segment_ids=None):
    xp = array_namespace(q, k, v)
    options = dict(window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, q_lengths=q_lengths,
                   kv_lengths=kv_lengths, segment_ids=segment_ids)
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
    bias = None
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.ndim == 2 else alibi_slopes[None, :]
        bias = -xp.astype(slopes, q.dtype)[:, :, None, None] * xp.astype(xp.abs(rel), q.dtype)[:, None]
    visible = xp.broadcast_to(visible[:, None], (B, Hq, Nq, Nk))
    return masked_attention(q, k, v, visible, softmax_scale, return_lse, softcap=softcap or None, bias=bias)


def masked_attention(q, k, v, visible, softmax_scale=None, return_lse=False, softcap=None, bias=None):
    """Softmax attention over the visible (query, key) pairs: ``visible`` [Nq, Nk] or
    [B, Hq, Nq, Nk] (bool); a query that sees no key gets o = 0 and lse = -inf. The scores
    s = q k^T * softmax_scale become softcap * tanh(s / softcap) with a softcap, then gain
    ``bias`` (broadcastable to [B, Hq, Nq, Nk]) if given."""
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
    neg_inf = xp.asarray(-math.inf, dtype=s.dtype, device=device(q))
    m = xp.max(xp.where(visible, s, neg_inf), axis=-1, keepdims=True)
    m = xp.where(m == -math.inf, xp.zeros_like(m), m)                       # rows that see no key
    e = xp.where(visible, xp.exp(xp.where(visible, s - m, neg_inf)), xp.zeros_like(s))
    l = xp.sum(e, axis=-1, keepdims=True)
    seen = l != 0                                                            # (NaN: seen, and lse NaN)
    l_safe = xp.where(seen, l, xp.ones_like(l))
    o = xp.matmul(e / l_safe, v[:, :, None])
    o = xp.reshape(xp.where(seen, o, xp.zeros_like(o)), (B, Hq, Nq, D))  # (0 * an infinite v: not NaN)
    if not return_lse:
        return o
    lse = xp.where(seen, m + xp.log(l_safe), xp.full_like(l, -math.inf))
    return o, xp.reshape(lse, (B, Hq, Nq))
