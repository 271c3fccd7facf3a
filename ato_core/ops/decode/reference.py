"""Reference decode attention and merge: each sequence's keys gathered from its table, then
plain softmax attention (flash_attention's reference, one query row)."""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ..flash_attention.reference import flash_attention


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, softmax_scale=None, return_lse=False,
                     schedule=None, layout="bnhd"):
    xp = array_namespace(q, k_cache, v_cache)
    if layout == "bhnd":  # [num_blocks, Hkv, block_size, D]
        k_cache, v_cache = (xp.permute_dims(c, (0, 2, 1, 3)) for c in (k_cache, v_cache))
    B, Hq, D = q.shape
    BS = k_cache.shape[1]
    os, lses = [], []
    for b in range(B):
        n = int(seq_lens[b])
        ids = [int(block_table[b, j]) for j in range(-(-n // BS))]
        if n == 0:
            os.append(xp.zeros((1, Hq, D), dtype=q.dtype))
            lses.append(xp.full((1, Hq), -math.inf, dtype=q.dtype))
            continue
        k = xp.concat([k_cache[i] for i in ids], axis=0)[:n]          # [n, Hkv, D]
        v = xp.concat([v_cache[i] for i in ids], axis=0)[:n]
        k = xp.permute_dims(k, (1, 0, 2))[None]                      # [1, Hkv, n, D]
        v = xp.permute_dims(v, (1, 0, 2))[None]
        o, lse = flash_attention(q[b][None, :, None], k, v, softmax_scale=softmax_scale, return_lse=True)
        os.append(o[:, :, 0])
        lses.append(lse[:, :, 0])
    o, lse = xp.concat(os, axis=0), xp.concat(lses, axis=0)
    return (o, lse) if return_lse else o


def merge_attention_states(o_a, lse_a, o_b, lse_b):
    xp = array_namespace(o_a, lse_a, o_b, lse_b)
    m = xp.maximum(lse_a, lse_b)
    m = xp.where(m == -math.inf, xp.zeros_like(m), m)
    wa, wb = xp.exp(lse_a - m), xp.exp(lse_b - m)
    total = wa + wb
    empty = total == 0
    safe = xp.where(empty, xp.ones_like(total), total)
    o = (wa[..., None] * o_a + wb[..., None] * o_b) / safe[..., None]
    lse = xp.where(empty, xp.full_like(total, -math.inf), m + xp.log(safe))
    return o, lse
