"""Reference rotary embedding. q [B, Hq, N, D], k [B, Hkv, N, D]; cos, sin [P, D/2] (or [P,
D], each pair's value at its first element: plans.table);
positions [B, N] (default 0..N-1). Pairs (x[i], x[i + D/2]) (LLaMA) or, interleaved,
(x[2i], x[2i+1]) (GPT-J), rotated: (x1 cos - x2 sin, x2 cos + x1 sin)."""

from __future__ import annotations

from array_api_compat import array_namespace, device


def _rotate(x, c, s, interleaved, xp):
    B, H, N, D = x.shape
    if interleaved:
        pairs = xp.reshape(x, (B, H, N, D // 2, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
        return xp.reshape(xp.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1), (B, H, N, D))
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return xp.concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope(q, k, cos, sin, *, positions=None, interleaved=False):
    xp = array_namespace(q, k, cos, sin)
    B, _, N, D = q.shape
    if cos.shape[-1] == D:
        cos, sin = (t[:, 0::2] if interleaved else t[:, : D // 2] for t in (cos, sin))
    if positions is None:
        positions = xp.broadcast_to(xp.arange(N, device=device(q))[None, :], (B, N))
    idx = xp.reshape(positions, (B * N,))
    c = xp.reshape(xp.take(cos, idx, axis=0), (B, 1, N, D // 2))
    s = xp.reshape(xp.take(sin, idx, axis=0), (B, 1, N, D // 2))
    c, s = xp.astype(c, q.dtype), xp.astype(s, q.dtype)
    return _rotate(q, c, s, interleaved, xp), _rotate(k, c, s, interleaved, xp)
