"""``jax.vmap`` of an ato_jax op as one launch: the mapped axis folded into the op's batch.

An op declares (``Op.batch``) the inputs whose leading axis is a batch of independent
problems (q, k, v of attention, x of a norm). Under ``jax.vmap`` a plan's runner (a
``jax.custom_batching.custom_vmap``) then merges the mapped axis V into that leading axis
([V, B, ...] -> [V*B, ...]; an unmapped batch input is broadcast first), runs the plan built
for the folded shapes once, and splits each result back ([V*B', ...] -> [V, B', ...]).

It falls back to one launch per mapped slice (``run_plan``'s sequential loop) where folding
would change the numbers: a mapped input outside the batch (a norm's weight per example), or
a result whose folded shape is not V times the unfolded one's along its leading axis (a mean
loss, a weight gradient: reductions over the batch).

Nested vmaps fold one after the other (the folded call goes through a runner again).

``kinds`` names, for each array a runner takes, how it relates to the batch: "batch" (leading
axis), "fixed" (no batch axis; it must be unmapped to fold), or "result:<name>" (a forward
result, batch-leading iff the forward plan's folded result is).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from ato_core.launch import ArraySpec, row_major_strides

from .launcher import run_plan, spec


def _leading(folded: tuple, unfolded: tuple, V: int) -> bool:
    """Whether ``folded`` is ``unfolded`` with V times its leading axis."""
    return len(folded) == len(unfolded) >= 1 and folded[0] == V * unfolded[0] and folded[1:] == unfolded[1:]


def runner(names: Sequence[str], kinds: Sequence[str], plan_of: Callable, target,
           result_leading: Callable | None = None, min_rank: int = 1):
    """``f(*arrays) -> the plan's results`` for the arrays named ``names`` (all present).

    ``plan_of(specs, V)``: the plan for these arrays' specs (a dict by name) when the batch is
    folded V times (V = 1: unfolded; the plan may need the unfolded shapes of arrays it does
    not take, such as a backward's forward inputs). ``result_leading(V)``: for "result:<name>"
    kinds, {name: whether that forward result is batch-leading}. ``min_rank``: the least rank
    (unbatched) at which a "batch" array's leading axis is a batch (Op.batch_min_rank)."""
    names, kinds = tuple(names), tuple(kinds)

    def plain(*xs):
        env = dict(zip(names, xs))
        plan = plan_of({n: spec(x) for n, x in env.items()}, 1)
        return run_plan(plan, env, target)

    f = jax.custom_batching.custom_vmap(plain)

    @f.def_vmap
    def rule(axis_size, in_batched, *xs):
        out = _folded(axis_size, in_batched, xs)
        if out is None:  # one launch per slice
            out = jax.vmap(plain, in_axes=tuple(0 if b else None for b in in_batched))(*xs)
        return tuple(out), (True,) * len(out)

    def _folded(V, in_batched, xs):
        leading = result_leading(V) if result_leading is not None else {}
        fold = []
        xs = list(xs)
        for i, (kind, batched, x) in enumerate(zip(kinds, in_batched, xs)):
            if kind == "batch" and x.ndim - batched < min_rank:
                return None  # its leading axis is the op's own (softmax of a vector)
            result = leading.get(kind[7:], False) if kind.startswith("result:") else False
            if kind == "batch" or result is True:
                fold.append(True)
            elif batched and result == "placeholder":
                xs[i] = x[0]  # a forward result never written nor read: any slice will do
                fold.append(False)
            elif batched:
                return None  # a mapped array outside the batch
            else:
                fold.append(False)
        xs = [jnp.broadcast_to(x, (V, *x.shape)) if f and not b else x for x, f, b in zip(xs, fold, in_batched)]
        env = {n: (x.reshape(V * x.shape[1], *x.shape[2:]) if f else x) for n, x, f in zip(names, xs, fold)}
        # the unfolded plan: the shapes each result must have V times of along its leading axis
        one = {n: spec(x[0] if f else x) for n, x, f in zip(names, xs, fold)}
        unfolded, plan = plan_of(one, 1), plan_of({n: spec(x) for n, x in env.items()}, V)
        try:
            shapes = [plan.buffer(r).shape for r in plan.results]
            singles = [unfolded.buffer(r).shape for r in unfolded.results]
        except KeyError:  # a result that is one of the plan's inputs
            return None
        dummy = [plan.buffer(r).placeholder for r in plan.results]  # never written nor read
        if len(shapes) != len(singles) or not all(d or _leading(s, u, V) for s, u, d in zip(shapes, singles, dummy)):
            return None
        # through a runner again, so that an enclosing vmap folds its axis in too
        inner = runner(names, kinds, lambda got, v: plan_of(got, V * v), target,
                       None if result_leading is None else (lambda v: result_leading(V * v)), min_rank)
        outs = inner(*[env[n] for n in names])
        return [jnp.broadcast_to(o, (V, *u)) if d else o.reshape(V, *u) for o, u, d in zip(outs, singles, dummy)]

    return f


def fold_spec(s, V: int):
    """The spec of a batch-leading array with its leading axis V times longer."""
    shape = (V * s.shape[0], *s.shape[1:])
    return ArraySpec(shape, s.dtype, row_major_strides(shape), s.device)


def results_leading(plan_of_forward: Callable, results: Sequence[str], V: int) -> dict:
    """{result: whether the forward plan's folded result has V times the unfolded one's
    leading axis, or "placeholder" for one it never writes} (``plan_of_forward(V)``: the
    forward plan for V-times folded inputs)."""
    one, many = plan_of_forward(1), plan_of_forward(V)
    out = {}
    for r, a, b in zip(results, one.results, many.results):
        try:
            out[r] = "placeholder" if many.buffer(b).placeholder else \
                _leading(many.buffer(b).shape, one.buffer(a).shape, V)
        except KeyError:
            out[r] = False
    return out
