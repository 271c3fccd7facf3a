"""Flash attention for PyTorch: a torch.autograd.Function over the ato_core plans."""

from __future__ import annotations

import torch

from ato_core import checks
from ato_core import flash_attention as core

from .launcher import once_differentiable, run_plan, spec, target_for


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, target, causal, softmax_scale):
        o, lse = run_plan(plan, {"q": q, "k": k, "v": v}, target)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (target, causal, softmax_scale)
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        target, causal, softmax_scale = ctx.args
        do = torch.zeros_like(o) if do is None else do
        plan = core.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, softmax_scale=softmax_scale,
                                  has_dlse=dlse is not None, target=target)
        dq, dk, dv = run_plan(plan, {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse, "dlse": dlse}, target)
        return dq, dk, dv, None, None, None, None


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False):
    """Softmax attention, o = softmax(q k^T * softmax_scale) v, tiled (never Nq x Nk in memory).

    Args:
      q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D], Hq a multiple of Hkv (grouped-query and
        multi-query attention: query head h reads kv head h // (Hq / Hkv)). fp32, fp16 or
        bf16, one dtype and device; D in 1..256; any Nq, Nk >= 1; any strides.
      causal: query i sees key j iff j <= i + Nk - Nq (aligned to the bottom right, as in
        FlashAttention 2); a query that sees no key gets zeros.
      softmax_scale: defaults to 1 / sqrt(D).
      return_lse: also return the log-sum-exp of the scores (natural log, fp32,
        [B, Hq, Nq]; -inf for a query that sees no key).

    Returns:
      o [B, Hq, Nq, D] in q's dtype, or (o, lse). Differentiable with respect to q, k and v
      (through lse too).
    """
    checks.check_bool("return_lse", return_lse)  # the plan, which checks the rest, has no use for it
    target = target_for(q)
    plan = core.forward_plan(spec(q), spec(k), spec(v), causal=causal, softmax_scale=softmax_scale, target=target)
    o, lse = _FlashAttention.apply(q, k, v, plan, target, causal, softmax_scale)
    return (o, lse) if return_lse else o
