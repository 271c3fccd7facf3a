"""Shared by the CPU-tier test modules: one op case run in both frameworks and the reference."""

import chex

from ato_cli import harness as h


def check(case, inputs=None):
    """Runs ``case`` in ato_torch, in ato_jax (jit(value_and_grad)) and in the float64
    reference; asserts every output and gradient within the dtype's tolerance
    (ato_cli.harness.TOLERANCE) and the two frameworks bitwise equal (on the CPU both run
    the identical interpreted kernels). Returns (torch, jax, reference) results."""
    inputs = h.make_inputs(case) if inputs is None else inputs
    t = h.run_torch(case, inputs)
    j = h.run_jax(case, inputs)
    r = h.run_torch(case, inputs, reference=True)
    tol = h.TOLERANCE[case.dtype]
    for name, res in (("torch", t), ("jax", j)):
        for i, (a, b) in enumerate(zip(res.outputs, r.outputs)):
            assert h.rel_err(a, b) < tol, f"{name} output {i}: {h.rel_err(a, b):.3g} >= {tol}"
        for n in r.grads:
            assert h.rel_err(res.grads[n], r.grads[n]) < tol, f"{name} d{n}: {h.rel_err(res.grads[n], r.grads[n]):.3g}"
    # Same interpreter, same plan: identical bits (chex for the JAX-side comparison).
    chex.assert_trees_all_equal(t.outputs, j.outputs)
    chex.assert_trees_all_equal(t.grads, j.grads)
    return t, j, r


def frontend(framework):
    """(the ato adapter module, its array-from-numpy function) of ``framework``, "torch" or
    "jax": for the tests that call an op in each framework by hand."""
    if framework == "torch":
        import torch

        import ato_torch
        return ato_torch, torch.from_numpy
    import jax.numpy as jnp

    import ato_jax
    return ato_jax, jnp.asarray
