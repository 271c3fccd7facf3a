"""Reference linear attention: the quadratic masked form and the sequential recurrence.

q, k: [B, H, N, Dk]; v: [B, H, N, Dv]; state S: [B, H, Dk, Dv], z: [B, H, Dk].
o_i = phi(q_i) S_i / (phi(q_i) . z_i + eps), S_i = S0 + sum_j phi(k_j) v_j^T, z_i = z0 + sum_j phi(k_j),
over j <= i (causal) or all j.
"""

from __future__ import annotations

from array_api_compat import array_namespace, device

from ato_core.layout import bnhd_reference


def elu_plus_one(x):
    """ELU(x) + 1 = x + 1 for x > 0, exp(x) otherwise."""
    xp = array_namespace(x)
    return xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, xp.zeros_like(x))))


def _phi(x, feature_map):
    if feature_map is None:
        return x
    if feature_map == "elu":
        return elu_plus_one(x)
    raise ValueError(f"feature_map: expected None or 'elu', got {feature_map!r}")


def linear_attention(q, k, v, *, causal=False, feature_map=None, eps=1e-6, initial_state=None,
                     output_final_state=False, layout="bhnd"):
    """Quadratic form: A = phi(Q) phi(K)^T (lower-triangular when causal), o = A V / rowsum(A)."""
    xp = array_namespace(q, k, v)
    if layout == "bnhd":
        return bnhd_reference(xp, linear_attention, q, k, v, causal=causal, feature_map=feature_map, eps=eps,
                              initial_state=initial_state, output_final_state=output_final_state)
    fq, fk = _phi(q, feature_map), _phi(k, feature_map)
    A = xp.matmul(fq, xp.matrix_transpose(fk))
    if causal:
        n = q.shape[2]
        i = xp.arange(n, device=device(q))
        A = xp.where(i[:, None] >= i[None, :], A, xp.zeros_like(A))
    num = xp.matmul(A, v)
    den = xp.sum(A, axis=-1)
    if initial_state is not None:
        S0, z0 = initial_state
        S0, z0 = xp.astype(S0, q.dtype), xp.astype(z0, q.dtype)
        num = num + xp.matmul(fq, S0)
        den = den + xp.sum(fq * z0[:, :, None, :], axis=-1)
    o = num / (den + eps)[..., None]
    if not output_final_state:
        return o
    S = xp.matmul(xp.matrix_transpose(fk), v)
    z = xp.sum(fk, axis=2)
    if initial_state is not None:
        S, z = S + S0, z + z0
    return o, (S, z)


def linear_attention_step(q, k, v, state, *, feature_map=None, eps=1e-6):
    """One causal step: q, k: [B, H, Dk], v: [B, H, Dv]; returns (o, (S1, z1))."""
    xp = array_namespace(q, k, v)
    S, z = state
    fq, fk = _phi(q, feature_map), _phi(k, feature_map)
    S1 = xp.astype(S, q.dtype) + fk[..., :, None] * v[..., None, :]
    z1 = xp.astype(z, q.dtype) + fk
    num = xp.sum(fq[..., :, None] * S1, axis=-2)
    den = xp.sum(fq * z1, axis=-1)
    return num / (den + eps)[..., None], (S1, z1)


def linear_attention_recurrent(q, k, v, *, feature_map=None, eps=1e-6, initial_state=None):
    """The sequential recurrence (causal only), one step per row: an independent second
    reference for the quadratic form. Returns (o, (S_N, z_N))."""
    xp = array_namespace(q, k, v)
    B, H, N, Dk = q.shape
    Dv = v.shape[3]
    if initial_state is None:
        state = (xp.zeros((B, H, Dk, Dv), dtype=q.dtype, device=device(q)),
                 xp.zeros((B, H, Dk), dtype=q.dtype, device=device(q)))
    else:
        state = initial_state
    outs = []
    for i in range(N):
        o, state = linear_attention_step(q[:, :, i, :], k[:, :, i, :], v[:, :, i, :], state,
                                         feature_map=feature_map, eps=eps)
        outs.append(o)
    return xp.stack(outs, axis=2), state

