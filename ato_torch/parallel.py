"""Vocabulary-parallel linear_cross_entropy over a torch.distributed process group:
ato_core's plans of one process (ato_core.ops.linear_cross_entropy.plans.vocab_parallel_plans)
with the collectives between them."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ato_core.ops.linear_cross_entropy import VOCAB_PARALLEL_DOC, linear_cross_entropy as _signature
from ato_core.ops.linear_cross_entropy.plans import vocab_parallel_plans

from .launcher import once_differentiable, run_plan, spec, target_for


def vocab_parallel_linear_cross_entropy(x, weight, targets, *, group=None, bias=None, **options):
    _, static = _signature(x, weight, targets, bias=bias, **options)
    for name, a in (("x", x), ("weight", weight), ("targets", targets), ("bias", bias)):
        if a is not None and not isinstance(a, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(a).__name__}")
    shards, rank = dist.get_world_size(group), dist.get_rank(group)
    target = target_for(x)
    specs = tuple(None if a is None else spec(a, n) for n, a in
                  (("x", x), ("weight", weight), ("targets", targets), ("bias", bias)))
    plans = vocab_parallel_plans(*specs, shards, static, target)
    local = targets - rank * weight.shape[0]
    loss, z = _VocabParallel.apply((plans, target, group, shards), x, weight, bias, targets, local)
    return (loss, z) if static.return_z_loss else loss


def _forward(ctx, meta, x, weight, bias, targets, local):
    (stats, merge, _), target, group, shards = meta
    (part,) = run_plan(stats, {"x": x, "weight": weight, "targets": local, "bias": bias}, target)
    gathered = [torch.empty_like(part) for _ in range(shards)]
    dist.all_gather(gathered, part, group=group)
    loss, lse, scale, z = run_plan(merge, {"part": torch.cat(gathered), "targets": targets}, target)
    ctx.meta = meta
    ctx.save_for_backward(x, weight, bias, local, lse, scale)
    ctx.mark_non_differentiable(z)
    return loss, z


def _backward(ctx, dloss, dz):
    (_, _, backward), target, group, _ = ctx.meta
    x, weight, bias, local, lse, scale = ctx.saved_tensors
    if dloss is None:
        return (None,) * 6
    dx, dw, db = run_plan(backward(spec(dloss, "dloss")), {
        "x": x, "weight": weight, "targets": local, "bias": bias, "lse": lse, "scale": scale, "dloss": dloss}, target)
    dist.all_reduce(dx, group=group)  # (fp32: each rank's columns' share of dx)
    return None, dx.to(x.dtype), dw, None if bias is None else db, None, None


class _VocabParallel(torch.autograd.Function):
    forward = staticmethod(_forward)
    backward = staticmethod(once_differentiable(_backward, "vocab_parallel_linear_cross_entropy"))


vocab_parallel_linear_cross_entropy.__doc__ = VOCAB_PARALLEL_DOC.format(where="the ranks of ``group``") + """

    Every rank of ``group`` (default: the whole world) calls it with the same x and
    targets and its own weight rows."""
