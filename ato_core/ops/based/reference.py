"""Reference Based attention: the quadratic form, written with s = scale q . k directly
(not through the feature map), and the feature map itself for the states.

q, k: [B, H, N, d]; v: [B, H, N, Dv]; S: [B, H, F, Dv], z: [B, H, F], F = 1 + d + d^2.
o_i = sum_j w_ij v_j / (sum_j w_ij + eps), w_ij = 1 + s_ij + s_ij^2 / 2 (+ the initial
state's phi(q_i) S0, phi(q_i) . z0), over j <= i (causal) or all j.
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace, device

from ato_core.layout import bnhd_reference


def _scale(scale, d):
    return 1.0 / math.sqrt(d) if scale is None else scale


def taylor_feature_map(x, *, scale=None):
    """phi(x) = [1, x sqrt(scale), vec(x x^T) scale / sqrt(2)], [..., d] -> [..., 1 + d + d^2]."""
    xp = array_namespace(x)
    d = x.shape[-1]
    x1 = x * math.sqrt(_scale(scale, d))
    x2 = xp.reshape(x1[..., :, None] * x1[..., None, :], (*x.shape[:-1], d * d)) / math.sqrt(2.0)
    return xp.concat([xp.ones_like(x[..., :1]), x1, x2], axis=-1)


def based_attention(q, k, v, *, causal=True, scale=None, eps=1e-6, initial_state=None, output_final_state=False,
                    layout="bhnd"):
    xp = array_namespace(q, k, v)
    if layout == "bnhd":
        return bnhd_reference(xp, based_attention, q, k, v, causal=causal, scale=scale, eps=eps,
                              initial_state=initial_state, output_final_state=output_final_state)
    s = _scale(scale, q.shape[-1]) * xp.matmul(q, xp.matrix_transpose(k))
    A = 1 + s + s * s / 2
    if causal:
        i = xp.arange(q.shape[2], device=device(q))
        A = xp.where(i[:, None] >= i[None, :], A, xp.zeros_like(A))
    num = xp.matmul(A, v)
    den = xp.sum(A, axis=-1)
    if initial_state is not None:
        S0, z0 = (xp.astype(t, q.dtype) for t in initial_state)
        fq = taylor_feature_map(q, scale=scale)
        num = num + xp.matmul(fq, S0)
        den = den + xp.sum(fq * z0[:, :, None, :], axis=-1)
    o = num / (den + eps)[..., None]
    if not output_final_state:
        return o
    fk = taylor_feature_map(k, scale=scale)
    S, z = xp.matmul(xp.matrix_transpose(fk), v), xp.sum(fk, axis=2)
    if initial_state is not None:
        S, z = S + S0, z + z0
    return o, (S, z)


def based_step(q, k, v, state, *, scale=None, eps=1e-6):
    """One causal step: q, k: [B, H, d], v: [B, H, Dv]; returns (o, (S1, z1))."""
    xp = array_namespace(q, k, v)
    S, z = state
    fq, fk = taylor_feature_map(q, scale=scale), taylor_feature_map(k, scale=scale)
    S1 = xp.astype(S, q.dtype) + fk[..., :, None] * v[..., None, :]
    z1 = xp.astype(z, q.dtype) + fk
    num = xp.sum(fq[..., :, None] * S1, axis=-2)
    den = xp.sum(fq * z1, axis=-1)
    return num / (den + eps)[..., None], (S1, z1)
