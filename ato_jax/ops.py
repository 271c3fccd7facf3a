"""Builds the JAX op of any ato_core.op.Op: one jax.custom_vjp per op, no op-specific code.

A call binds the arguments (the declaration's signature), makes the inputs JAX arrays and
builds the forward plan once (which checks the arguments, at the call rather than inside
the trace), then calls the op's custom_vjp with the static value and the inputs' specs as
non-differentiable arguments. Its primal runs the forward plan (``grad=False``), its fwd rule
the same plan built with ``grad=True`` (which differs only for an op that computes its
gradient in the forward); its bwd rule the backward plan. Inputs that take no gradient get
None (a zero cotangent).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ato_core.op import Op

from .folding import fold_spec, results_leading, runner
from .launcher import platform_of, spec, target_for, typed_varying, varying


def build(op: Op):
    """The public JAX function of ``op``: the declaration's signature and docstring."""
    names = op.inputs

    def kind(name):
        return "batch" if name in op.batch else "fixed"

    def folded_specs(specs, V):
        """The forward inputs' specs with the batch V times longer."""
        if V == 1:
            return specs
        return tuple(fold_spec(s, V) if s is not None and n in op.batch else s for n, s in zip(names, specs))

    def run(meta, arrays, grad):
        static, specs, _ = meta
        target = target_for(*[a for a in arrays if a is not None])
        plan = op.forward_plan(specs, static, target, grad)
        present = [n for n, a in zip(names, arrays) if a is not None]
        f = runner(present, [kind(n) for n in present],
                   lambda got, V: op.forward_plan(tuple(got.get(n) for n in names), static, target, grad), target,
                   min_rank=op.batch_min_rank)
        outs = _first_order(op.name, f)(*[a for a in arrays if a is not None])
        env = dict(zip(op.results, outs))
        env.update(zip(names, arrays))
        return tuple(env[n] for n in op.returned(static)), env, plan, target

    def fn(meta, *arrays):
        return run(meta, arrays, False)[0]

    def fwd(meta, *arrays):
        outs, env, _, _ = run(meta, arrays, True)
        return outs, tuple(env[n] if keep else None for n, keep in zip(op.saved, op.kept(meta[0])))

    def bwd(meta, saved, cotangents):
        static, specs, vmas = meta
        target = target_for(*[a for a in saved if a is not None])
        cot_names = op.cotangents(static)
        # an integer result's cotangent (float0) is absent
        cotangents = tuple(None if c.dtype == jax.dtypes.float0 or n in op.nondifferentiable else c
                           for n, c in zip(op.returned(static), cotangents))

        def plan_of(got, V):
            fwd_specs = folded_specs(specs, V)
            fwd = op.forward_plan(fwd_specs, static, target, True)
            return op.backward_plan(fwd, fwd_specs, static, tuple(got.get(n) for n in cot_names), target)

        arrays = [*zip(op.saved, saved), *zip(cot_names, cotangents)]
        present = [(n, a) for n, a in arrays if a is not None]
        kinds = [kind(n) if n in names else "result:" + (n[1:] if n in cot_names else n) for n, _ in present]
        # the forward's results carry the batch only where its batch inputs have one
        foldable = all(len(sp.shape) >= op.batch_min_rank for n, sp in zip(names, specs) if sp is not None and n in op.batch)
        f = runner([n for n, _ in present], kinds, plan_of, target, lambda V: results_leading(
            lambda v: op.forward_plan(folded_specs(specs, v), static, target, True), op.results, V) if foldable else {},
            op.batch_min_rank)
        grads = _first_order(op.name, f)(*[a for _, a in present])
        # each gradient typed as its input is under shard_map (summed over the mesh axes along
        # which an invariant input met varying ones)
        return tuple(None if g is None or specs[i] is None else typed_varying(grads[g], vmas[i])
                     for i, g in enumerate(op.input_grads))

    fn.__name__, fwd.__name__, bwd.__name__ = op.name, op.name + "_fwd", op.name + "_bwd"  # (in jaxprs)
    fn = jax.custom_vjp(fn, nondiff_argnums=(0,))
    fn.defvjp(fwd, bwd)

    @functools.wraps(op.signature)
    def call(*args, **kwargs):
        arrays, static = op.signature(*args, **kwargs)
        arrays = tuple(None if a is None and n in op.optional else _array(n, a) for n, a in zip(names, arrays))
        if op.random:
            arrays = tuple(_key_data(a) if n in op.random else a for n, a in zip(names, arrays))
        specs = tuple(None if a is None else spec(a) for a in arrays)
        target = target_for(*[a for a in arrays if a is not None])
        op.forward_plan(specs, static, target)
        if op.checks_values(target):
            op.check_values(dict(zip(names, specs)), static, functools.partial(_host, dict(zip(names, arrays))))
        try:
            vmas = tuple(frozenset() if a is None else varying(a) for a in arrays)
            out = fn((static, specs, vmas), *arrays)
        except TypeError as exc:  # raised by jax.jvp / jacfwd as they trace the custom_vjp
            if "forward-mode" not in str(exc):
                raise
            raise NotImplementedError(
                f"ato_jax.{op.name}: forward-mode differentiation (jax.jvp, jax.jacfwd) is not supported; "
                "use reverse mode (jax.grad, jax.vjp, jax.jacrev)") from exc
        if op.nondifferentiable:
            out = tuple(jax.lax.stop_gradient(o) if n in op.nondifferentiable else o
                        for n, o in zip(op.returned(static), out))
        return op.pack(static, out)

    call.op = op
    call.__doc__ = op.doc
    call.__module__ = __name__.split(".")[0]
    return call


def _first_order(name: str, run):
    """``run`` (a plan's launches) as a function JAX may not differentiate itself: its jvp rule
    raises an error that names the op. The op's derivative is its custom_vjp; differentiating
    what that runs (grad of grad, jax.hessian) would otherwise fail inside jax-triton or
    pure_callback, naming neither."""
    fn = jax.custom_jvp(run)

    def no_jvp(primals, tangents):
        raise NotImplementedError(f"ato_jax.{name}: first-order reverse mode only (jax.grad, jax.vjp); "
                                  "second-order differentiation (grad of grad, jax.hessian) is not supported")

    fn.defjvp(no_jvp)
    return fn


def _array(name: str, x):
    """x as a JAX array: a JAX or NumPy array (or anything with __jax_array__); a list, a
    tuple or a Python number is refused, as jax.numpy refuses them."""
    if not isinstance(x, (jax.Array, np.ndarray, np.generic)) and not hasattr(x, "__jax_array__"):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    return jnp.asarray(x)


def _key_data(x):
    """A typed jax.random key as its raw data (uint32 [2] for threefry); anything else as it is."""
    if x is not None and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def _host(arrays: dict, name: str):
    """An input's values as NumPy where they are concrete and on the CPU, else None."""
    x = arrays.get(name)
    if x is None or isinstance(x, jax.core.Tracer) or platform_of([x]) != "cpu":
        return None
    return np.asarray(x)
