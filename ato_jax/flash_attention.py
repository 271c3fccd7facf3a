"""Flash attention for JAX: a jax.custom_vjp over the ato_core plans; works under jax.jit
and jax.grad. Same name, arguments and results as ato_torch.flash_attention."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ato_core import flash_attention as core

from .launcher import run_plan, spec, target_for


# static = (causal, softmax_scale, return_lse)
@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _flash_attention(q, k, v, static):
    return _fa_fwd(q, k, v, static)[0]


def _fa_fwd(q, k, v, static):
    causal, softmax_scale, return_lse = static
    target = target_for(q, k, v)
    plan = core.forward_plan(spec(q), spec(k), spec(v), causal=causal, softmax_scale=softmax_scale, target=target)
    o, lse = run_plan(plan, {"q": q, "k": k, "v": v}, target)
    return ((o, lse) if return_lse else o), (q, k, v, o, lse)


def _fa_bwd(static, res, cotangent):
    causal, softmax_scale, return_lse = static
    q, k, v, o, lse = res
    do, dlse = cotangent if return_lse else (cotangent, None)
    target = target_for(q, k, v)
    plan = core.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, softmax_scale=softmax_scale,
                              has_dlse=return_lse, target=target)
    return run_plan(plan, {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse, "dlse": dlse}, target)


_flash_attention.defvjp(_fa_fwd, _fa_bwd)


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False):
    """Softmax attention, o = softmax(q k^T * softmax_scale) v, tiled (never Nq x Nk in memory).

    Args:
      q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D], Hq a multiple of Hkv (grouped-query and
        multi-query attention: query head h reads kv head h // (Hq / Hkv)). fp32, fp16 or
        bf16, one dtype; D in 1..256; any Nq, Nk >= 1.
      causal: query i sees key j iff j <= i + Nk - Nq (aligned to the bottom right, as in
        FlashAttention 2); a query that sees no key gets zeros.
      softmax_scale: defaults to 1 / sqrt(D).
      return_lse: also return the log-sum-exp of the scores (natural log, fp32,
        [B, Hq, Nq]; -inf for a query that sees no key).

    Returns:
      o [B, Hq, Nq, D] in q's dtype, or (o, lse). Differentiable with respect to q, k and v
      (through lse too); works under jax.jit.
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    core.check_flash_attention(spec(q), spec(k), spec(v), causal=causal, softmax_scale=softmax_scale,
                               return_lse=return_lse)
    scale = None if softmax_scale is None else float(softmax_scale)
    return _flash_attention(q, k, v, (causal, scale, return_lse))
