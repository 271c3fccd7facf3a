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


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, layout="bhnd"):
    xp = array_namespace(q, k, v)
    if layout == "bnhd":
        return bnhd_reference(xp, flash_attention, q, k, v, causal=causal, softmax_scale=softmax_scale,
                              return_lse=return_lse)
    Nq, Nk = q.shape[2], k.shape[2]
    if causal:
        i = xp.arange(Nq, device=device(q))[:, None]
        j = xp.arange(Nk, device=device(q))[None, :]
        visible = j <= i + (Nk - Nq)
    else:
        visible = xp.ones((Nq, Nk), dtype=xp.bool, device=device(q))
    return masked_attention(q, k, v, visible, softmax_scale, return_lse)


def masked_attention(q, k, v, visible, softmax_scale=None, return_lse=False):
    """Softmax attention over the visible (query, key) pairs: ``visible`` [Nq, Nk] or
    [B, Hq, Nq, Nk] (bool); a query that sees no key gets o = 0 and lse = -inf."""
    xp = array_namespace(q, k, v)
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    qg = xp.reshape(q, (B, Hkv, G, Nq, D))
    s = xp.matmul(qg, xp.matrix_transpose(k)[:, :, None]) * scale            # [B, Hkv, G, Nq, Nk]
    if visible.ndim == 4:
        visible = xp.reshape(visible, (B, Hkv, G, Nq, Nk))
    neg_inf = xp.asarray(-math.inf, dtype=s.dtype, device=device(q))
    m = xp.max(xp.where(visible, s, neg_inf), axis=-1, keepdims=True)
    m = xp.where(m == -math.inf, xp.zeros_like(m), m)                       # rows that see no key
    e = xp.where(visible, xp.exp(xp.where(visible, s - m, neg_inf)), xp.zeros_like(s))
    l = xp.sum(e, axis=-1, keepdims=True)
    seen = l != 0                                                            # (NaN: seen, and lse NaN)
    l_safe = xp.where(seen, l, xp.ones_like(l))
    o = xp.reshape(xp.matmul(e / l_safe, v[:, :, None]), (B, Hq, Nq, D))
    if not return_lse:
        return o
    lse = xp.where(seen, m + xp.log(l_safe), xp.full_like(l, -math.inf))
    return o, xp.reshape(lse, (B, Hq, Nq))
