"""Builds the torch op of any ato_core.op.Op: one torch.autograd.Function per op, no
op-specific code.

A call binds the arguments (the declaration's signature), takes the inputs' specs, finds
the cached forward plan (which checks the arguments when built) and runs it. When nothing
is to be differentiated (``torch.no_grad()``, or no differentiable input requiring grad) and
no forward-AD level is open, the plan runs without an autograd.Function, whose bookkeeping
costs as much host time as the rest of the call. (With a forward-AD level open, the Function
runs, and raises that it has no jvp rule where a plain call would drop the tangent.)
"""

from __future__ import annotations

import functools

import torch
from torch.autograd import forward_ad

from ato_core.op import Op, default_pack

from . import library
from .launcher import fill_cotangents, once_differentiable, run_plan, spec, target_for


def _forward_ad_open() -> bool:
    return getattr(forward_ad, "_current_level", -1) >= 0


def build(op: Op):
    """The public torch function of ``op``: the declaration's signature and docstring."""
    names = op.inputs
    may_be_none = tuple(n in op.optional for n in names)
    diff = tuple(i for i, g in enumerate(op.input_grads) if g is not None)
    n_inputs = len(names)
    # what the forward saves: (True, input index) or (False, result index)
    saved_from = tuple((True, names.index(n)) if n in names else (False, op.results.index(n)) for n in op.saved)

    def forward(ctx, meta, *arrays):
        plan, target, static, specs, grad = meta
        outs = run_plan(plan, dict(zip(names, arrays)), target)
        saved = [(arrays[i] if is_input else outs[i]) if keep else None
                 for (is_input, i), keep in zip(saved_from, op.kept(static))]
        if op.backward_once(specs, static):
            ctx.saved_once = saved if grad else None
        else:
            ctx.save_for_backward(*saved)
        ctx.meta = meta
        ctx.set_materialize_grads(False)
        index = fixed if fixed is not None else [op.results.index(n) for n in op.returned(static)]
        if op.nondifferentiable:
            ctx.mark_non_differentiable(*[outs[i] for i in index if op.results[i] in op.nondifferentiable])
        return tuple([outs[i] for i in index]) if len(index) > 1 else outs[index[0]]

    def backward(ctx, *cotangents):
        plan, target, static, specs, grad = ctx.meta
        if op.nondifferentiable:
            cotangents = _without_nondifferentiable(op, static, cotangents)
        absent = [c is None for c in cotangents]
        if all(absent):
            return (None,) * (n_inputs + 1)
        if op.backward_once(specs, static):
            saved, ctx.saved_once = ctx.saved_once, None
            if saved is None:
                raise RuntimeError(f"ato_torch.{op.name}: backward called a second time (retain_graph); its "
                                   f"backward overwrites what the forward saved. Compute the op again for another "
                                   "backward.")
        else:
            saved = ctx.saved_tensors
        cot_names = fixed_cotangents or op.cotangents(static)
        cots = fill_cotangents(op, plan, static, cot_names, cotangents) if True in absent else cotangents
        # Autograd hands cotangents of the outputs' shapes and devices: the plan depends on
        # their dtypes and strides (the memo key) and on nothing else of them.
        key = ("torch backward", tuple([None if c is None else (c.dtype, c.stride()) for c in cots]))
        bwd = plan.memoised(key, lambda: op.backward_plan(
            plan, specs, static, tuple(None if c is None else spec(c, n) for n, c in zip(cot_names, cots)), target))
        env = dict(zip(op.saved, saved))
        env.update(zip(cot_names, cots))
        grads = run_plan(bwd, env, target)
        return (None, *[None if g is None or specs[i] is None else grads[g] for i, g in enumerate(op.input_grads)])

    fn = type(op.name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                     "backward": staticmethod(once_differentiable(backward, op.name))})
    fixed = None if callable(op.returns) else tuple(op.results.index(n) for n in op.returned(None))
    fixed_cotangents = None if fixed is None else op.cotangents(None)
    pack, signature = op.pack, op.signature
    # a single result returned as it is (the default pack): no tuple to build
    single = fixed[0] if fixed is not None and len(fixed) == 1 and op.pack is default_pack else None

    traced = library.register(op)
    random = tuple(i for i, n in enumerate(names) if n in op.random)

    def compiled(arrays, static):
        """Under torch.compile: one opaque custom-op node (ato_torch.library)."""
        grad = torch.is_grad_enabled() and any(arrays[i] is not None and arrays[i].requires_grad for i in diff)
        outs = traced(*library.present_of(arrays), library.encode(static), grad)
        return pack(static, tuple([outs[op.results.index(n)].detach() if n in op.nondifferentiable else
                                   outs[op.results.index(n)] for n in op.returned(static)]))

    @functools.wraps(op.signature)
    def call(*args, **kwargs):
        arrays, static = signature(*args, **kwargs)
        if random:
            arrays = _drawn(arrays, random)
        if torch.compiler.is_compiling():
            return compiled(arrays, static)
        if torch._C._are_functorch_transforms_active():
            raise NotImplementedError(
                f"ato_torch.{op.name}: torch.func transforms (vmap, grad, jvp, jacrev, ...) are not supported: "
                "call the op on the whole batch, and differentiate with torch.autograd")
        specs = tuple([None if t is None and o else spec(t, n) for n, t, o in zip(names, arrays, may_be_none)])
        target = target_for(arrays[0])
        grad = False
        if torch.is_grad_enabled():
            for i in diff:
                if arrays[i] is not None and arrays[i].requires_grad:
                    grad = True
                    break
        plan = op.forward_plan(specs, static, target, grad)
        if op.checks_values(target):
            op.check_values(dict(zip(names, specs)), static, functools.partial(_host, dict(zip(names, arrays))))
        if not grad and not _forward_ad_open():
            outs = run_plan(plan, dict(zip(names, arrays)), target)
            if single is not None:
                return outs[single]
            index = fixed if fixed is not None else [op.results.index(n) for n in op.returned(static)]
            return pack(static, tuple([outs[i] for i in index]))
        out = fn.apply((plan, target, static, specs, grad), *arrays)
        if single is not None:
            return out
        return pack(static, out if isinstance(out, tuple) else (out,))

    call.op = op
    call.__doc__ = op.doc
    call.__module__ = __name__.split(".")[0]
    return call


def _drawn(arrays: tuple, random: tuple) -> tuple:
    """The arrays, a torch.Generator at a random input replaced by a seed drawn from it (an
    int64 tensor on the first input's device; the generator advances)."""
    out = list(arrays)
    for i in random:
        g = out[i]
        if isinstance(g, torch.Generator):
            seed = torch.empty((), dtype=torch.int64, device=g.device).random_(2 ** 31, generator=g)
            out[i] = seed.to(arrays[0].device) if isinstance(arrays[0], torch.Tensor) else seed
    return tuple(out)


def _without_nondifferentiable(op: Op, static, cotangents) -> tuple:
    """The cotangents of the returned results, None for those that carry no gradient."""
    return tuple([None if n in op.nondifferentiable else c for n, c in zip(op.returned(static), cotangents)])


def _host(arrays: dict, name: str):
    """An input's values as NumPy where they are on the host already, else None."""
    t = arrays.get(name)
    return t.detach().numpy() if t is not None and t.device.type == "cpu" else None
