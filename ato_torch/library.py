"""Every ato op as a torch.library custom op, for torch.compile and torch.export.

Under ``torch.compile`` (``torch.compiler.is_compiling()``) an ato_torch op calls
``torch.ops.ato.<name>`` instead of running its plan from Python: Dynamo traces the op's
signature (argument checks, the static value) and records one opaque node, whose fake
implementation gives the plan's result shapes. Its autograd formula calls
``torch.ops.ato.<name>_backward``. Eager calls do not come here (their host time matters).

The schema is generic: ``<name>(Tensor[] arrays, str present, str static, bool grad) ->
Tensor[]``: the arrays present, in the declaration's input order (``present``: "1" or "0" for
each input; torch's autograd registration does not take a list of optional tensors),
``static`` the op's static value written as a Python-like literal (``encode``; decoded back
to the same value, so the same cached plan), the results every result of the forward plan
(what the backward saves among them). The backward: ``<name>_backward(Tensor[] arrays, str
present, str static, str specs, bool grad) -> Tensor[]`` with the saved arrays then the
cotangents, ``specs`` the forward inputs' ArraySpecs (the backward plan derives from the
forward plan), results the gradients of the inputs that have one.
"""

from __future__ import annotations

import functools
import importlib

import torch

from ato_core.op import Op

from .launcher import fill_cotangents, run_plan, spec, target_for

_LIB = torch.library.Library("ato", "FRAGMENT")


def encode(value) -> str:
    """``value`` (None, bool, int, float, str, and tuples / NamedTuples of them) as a string
    ``decode`` reads back to an equal value. Plain Python, so Dynamo folds it to a constant."""
    if isinstance(value, tuple):
        kind = type(value)
        return kind.__module__ + ":" + kind.__qualname__ + "(" + ",".join([encode(v) for v in value]) + ")"
    if isinstance(value, str):
        if '"' in value:
            raise ValueError(f"ato_torch.library.encode: a static string holds a double quote: {value!r}")
        return '"' + value + '"'
    return str(value)


_ATOMS = {"None": None, "True": True, "False": False, "inf": float("inf"), "-inf": float("-inf"),
          "nan": float("nan")}


@functools.lru_cache(maxsize=4096)
def decode(text: str):
    """The value ``encode`` wrote."""
    value, end = _parse(text, 0)
    if end != len(text):
        raise ValueError(f"ato_torch.library.decode: trailing text in {text!r}")
    return value


def _parse(text: str, at: int):
    if text[at] == '"':
        end = text.index('"', at + 1)
        return text[at + 1:end], end + 1
    end = at
    while end < len(text) and text[end] not in ",()":
        end += 1
    token = text[at:end]
    if end < len(text) and text[end] == "(":  # module:Qualname(items)
        items, end = [], end + 1
        while text[end] != ")":
            item, end = _parse(text, end)
            items.append(item)
            if text[end] == ",":
                end += 1
        module, _, name = token.partition(":")
        kind = importlib.import_module(module)
        for part in name.split("."):
            kind = getattr(kind, part)
        return (tuple(items) if kind is tuple else kind(*items)), end + 1
    if token in _ATOMS:
        return _ATOMS[token], end
    try:
        return int(token), end
    except ValueError:
        return float(token), end


def present_of(arrays) -> tuple:
    """(the arrays that are not None, a "1"/"0" string saying which are)."""
    return [a for a in arrays if a is not None], "".join(["0" if a is None else "1" for a in arrays])


def _full(arrays, present: str) -> list:
    got = iter(arrays)
    return [next(got) if p == "1" else None for p in present]


def _target(arrays):
    return target_for(next(t for t in arrays if t is not None))


def _specs(op: Op, arrays):
    return tuple([None if t is None else spec(t, n) for n, t in zip(op.inputs, arrays)])


def _unaliased(plan, names, outs, arrays) -> list:
    """``outs`` with no tensor twice and none of ``arrays`` among them (a custom op's results
    may not alias its inputs or each other): a result the plan lists twice, or a placeholder
    (ato_torch's shared scratch), is returned as a copy."""
    seen = {id(a) for a in arrays if a is not None}
    out = []
    for name, t in zip(names, outs):
        if id(t) in seen or _placeholder(plan, name):
            t = t.clone()
        seen.add(id(t))
        out.append(t)
    return out


def _placeholder(plan, name: str) -> bool:
    try:
        return plan.buffer(name).placeholder
    except KeyError:  # not written by the plan: one of its inputs (then among ``seen``)
        return False


def _empty(plan, names, like: torch.Tensor) -> list:
    """Tensors of the shapes and dtypes the plan writes under ``names`` (the fake results)."""
    out = []
    for name in names:
        buf = plan.buffer(name)
        out.append(torch.empty(buf.shape, dtype=getattr(torch, buf.dtype), device=like.device))
    return out


def register(op: Op):
    """Defines ``torch.ops.ato.<op.name>`` (and its backward when the op has gradients);
    returns ``call(arrays, static, grad) -> the forward plan's results``."""
    name = op.name
    _LIB.define(f"{name}(Tensor[] arrays, str present, str static, bool grad) -> Tensor[]")
    saved_from = tuple((True, op.inputs.index(n)) if n in op.inputs else (False, op.results.index(n))
                       for n in op.saved)

    def forward_plan(arrays, static, grad):
        target = _target(arrays)
        return op.forward_plan(_specs(op, arrays), decode(static), target, grad), target

    def forward(arrays, present, static, grad):
        arrays = _full(arrays, present)
        plan, target = forward_plan(arrays, static, grad)
        value = decode(static)
        if op.checks_values(target):
            named = dict(zip(op.inputs, arrays))
            op.check_values(dict(zip(op.inputs, _specs(op, arrays))), value,
                            lambda n: None if named.get(n) is None else named[n].detach().numpy())
        return _unaliased(plan, plan.results, run_plan(plan, dict(zip(op.inputs, arrays)), target), arrays)

    def forward_fake(arrays, present, static, grad):
        arrays = _full(arrays, present)
        plan, _ = forward_plan(arrays, static, grad)
        return _empty(plan, plan.results, next(t for t in arrays if t is not None))

    _LIB.impl(name, forward, "CompositeExplicitAutograd")
    torch.library.register_fake(f"ato::{name}", forward_fake, lib=_LIB)
    forward_op = getattr(torch.ops.ato, name)
    if any(g is not None for g in op.input_grads):
        _register_backward(op, saved_from)
    return forward_op


def _register_backward(op: Op, saved_from):
    name = op.name
    _LIB.define(f"{name}_backward(Tensor[] arrays, str present, str static, str specs, bool grad) -> Tensor[]")
    n_saved = len(op.saved)

    def plans(arrays, static, specs, grad):
        value, specs = decode(static), decode(specs)
        target = _target(arrays)
        fwd = op.forward_plan(specs, value, target, grad)
        cot_names = op.cotangents(value)
        cots = arrays[n_saved:]
        cot_specs = tuple([None if c is None else spec(c, n) for n, c in zip(cot_names, cots)])
        return fwd, op.backward_plan(fwd, specs, value, cot_specs, target), target, value, specs

    def grads_of(bwd, specs):
        """The backward plan's results that are gradients of present inputs, in input order."""
        return [bwd.results[g] for i, g in enumerate(op.input_grads) if g is not None and specs[i] is not None]

    def backward(arrays, present, static, specs, grad):
        arrays = _full(arrays, present)
        fwd, bwd, target, value, specs = plans(arrays, static, specs, grad)
        env = dict(zip(op.saved, arrays[:n_saved]))
        if op.single_backward:  # its plan overwrites a saved array: not one the graph still holds
            for launch in bwd.launches:
                for out in launch.outputs:
                    if out.alias in env:
                        env[out.alias] = env[out.alias].clone()
        env.update(zip(op.cotangents(value), arrays[n_saved:]))
        results = dict(zip(bwd.results, run_plan(bwd, env, target)))
        names = grads_of(bwd, specs)
        return _unaliased(bwd, names, [results[r] for r in names], arrays)

    def backward_fake(arrays, present, static, specs, grad):
        arrays = _full(arrays, present)
        fwd, bwd, _, _, specs = plans(arrays, static, specs, grad)
        like = next(t for t in arrays if t is not None)
        out = []
        for r in grads_of(bwd, specs):
            i = op.input_grads.index(bwd.results.index(r))
            out.append(torch.empty(specs[i].shape, dtype=getattr(torch, specs[i].dtype), device=like.device))
        return out

    _LIB.impl(f"{name}_backward", backward, "CompositeExplicitAutograd")
    torch.library.register_fake(f"ato::{name}_backward", backward_fake, lib=_LIB)
    backward_op = getattr(torch.ops.ato, f"{name}_backward")

    def setup_context(ctx, inputs, output):
        arrays, present, static, grad = inputs
        arrays = _full(arrays, present)
        ctx.save_for_backward(*[(arrays[i] if is_input else output[i]) if keep else None
                                for (is_input, i), keep in zip(saved_from, op.kept(decode(static)))])
        ctx.static, ctx.grad = static, grad
        ctx.specs = encode(_specs(op, arrays))
        ctx.present = [a is not None for a in arrays]
        ctx.set_materialize_grads(False)

    def autograd_backward(ctx, grads):
        value = decode(ctx.static)
        returned = [op.results.index(n) for n in op.returned(value)]
        cots = [None if op.results[i] in op.nondifferentiable else grads[i] for i in returned]
        if all(c is None for c in cots):
            return None, None, None, None
        saved = list(ctx.saved_tensors)
        if any(c is None for c in cots):
            like = next(c for c in cots if c is not None)
            fwd = op.forward_plan(decode(ctx.specs), value, target_for(like), ctx.grad)
            cots = list(fill_cotangents(op, fwd, value, op.cotangents(value), cots))
        got = iter(backward_op(*present_of(saved + cots), ctx.static, ctx.specs, ctx.grad))
        dx = [next(got) if g is not None else None for g, here in zip(op.input_grads, ctx.present) if here]
        return dx, None, None, None

    torch.library.register_autograd(f"ato::{name}", autograd_backward, setup_context=setup_context, lib=_LIB)
