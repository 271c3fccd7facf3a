"""Vocabulary-parallel linear_cross_entropy inside ``shard_map``: ato_core's plans of one
device (ato_core.ops.linear_cross_entropy.plans.vocab_parallel_plans) with the collectives
between them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ato_core.ops.linear_cross_entropy import VOCAB_PARALLEL_DOC, linear_cross_entropy as _signature
from ato_core.ops.linear_cross_entropy.plans import vocab_parallel_plans

from .launcher import run_plan, spec, target_for
from .ops import _array


def vocab_parallel_linear_cross_entropy(x, weight, targets, *, axis_name, bias=None, **options):
    x, weight, targets = (_array(n, a) for n, a in (("x", x), ("weight", weight), ("targets", targets)))
    bias = None if bias is None else _array("bias", bias)
    _, static = _signature(x, weight, targets, bias=bias, **options)
    shards = jax.lax.psum(1, axis_name)
    local = targets - (jax.lax.axis_index(axis_name) * weight.shape[0]).astype(targets.dtype)
    target = target_for(x, weight)
    specs = tuple(None if a is None else spec(a) for a in (x, weight, targets, bias))
    plans = vocab_parallel_plans(*specs, shards, static, target)
    out = _loss(plans, target, axis_name, x, weight, bias, targets, local)
    loss, z = out
    z = jax.lax.stop_gradient(z)
    return (loss, z) if static.return_z_loss else loss


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _loss(plans, target, axis_name, x, weight, bias, targets, local):
    return _forward(plans, target, axis_name, x, weight, bias, targets, local)[0]


def _forward(plans, target, axis_name, x, weight, bias, targets, local):
    stats, merge, _ = plans
    (part,) = run_plan(stats, {"x": x, "weight": weight, "targets": local, "bias": bias}, target)
    part = _gather(part, axis_name)
    loss, lse, scale, z = run_plan(merge, {"part": part, "targets": targets}, target)
    return (loss, z), (x, weight, bias, local, lse, scale)


def _gather(part, axis_name):
    """Every device's part, in device order along axis 0, typed invariant: a psum of each
    device's part placed in zeros (exact: one term per entry is not 0)."""
    n = jax.lax.psum(1, axis_name)
    placed = jnp.zeros((n, *part.shape), part.dtype).at[jax.lax.axis_index(axis_name)].set(part)
    return jax.lax.psum(placed, axis_name).reshape(n * part.shape[0], *part.shape[1:])


def _fwd(plans, target, axis_name, x, weight, bias, targets, local):
    out, saved = _forward(plans, target, axis_name, x, weight, bias, targets, local)
    return out, (saved, targets)


def _bwd(plans, target, axis_name, res, cotangents):
    (x, weight, bias, local, lse, scale), targets = res
    dloss = cotangents[0]
    plan = plans[2](spec(dloss))
    dx, dw, db = run_plan(plan, {"x": x, "weight": weight, "targets": local, "bias": bias, "lse": lse,
                                 "scale": scale, "dloss": dloss}, target)
    dx = jax.lax.psum(dx, axis_name).astype(x.dtype)
    zero = lambda t: jnp.zeros(t.shape, jax.dtypes.float0)  # noqa: E731 (integer inputs)
    return dx, dw, None if bias is None else db, zero(targets), zero(local)


_loss.defvjp(_fwd, _bwd)
vocab_parallel_linear_cross_entropy.__doc__ = VOCAB_PARALLEL_DOC.format(where="the mesh axis ``axis_name``") + """

    Call it inside ``jax.shard_map`` (or anything that binds ``axis_name``) with x and
    targets replicated along ``axis_name`` and weight (and bias) split along it."""
