"""Runs one op case (ato_core.testing.Case) in ato_torch, in ato_jax and in the reference, on
the same inputs.

Used by ``ato check`` and by the tests; ``run_*`` return the op's outputs and the gradients of
sum(outputs * cotangents) as float64 NumPy arrays, so every comparison is done the same way.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Dict

import numpy as np

from ato_core.testing import Case, cotangents, make_inputs  # noqa: F401

# Relative Frobenius-norm error allowed against the float64 reference, by input dtype.
# fp32: the kernels use IEEE fp32 dots and fp32 accumulation; errors are a few ulps of
#   the reductions (N <= 4096 terms), far under 1e-4 (a dropped term or a shifted mask
#   costs >= 1e-2 at the tested lengths).
# fp16: dots run in tf32 (10-bit mantissa, unit roundoff 4.9e-4) on fp16-rounded inputs,
#   the output is rounded to fp16 (another 4.9e-4): a few units of 1e-3.
# bf16: operands and the output are bf16 (unit roundoff 3.9e-3): about 1e-2.
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}


def reference_op(name: str):
    from ato_core.ops import OPS

    return OPS[name].reference


@dataclasses.dataclass
class Result:
    outputs: list
    grads: Dict[str, np.ndarray]
    seconds: float


def _f64(x) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.detach().double().cpu().numpy()
    except ImportError:
        pass
    return np.asarray(x).astype(np.float64)


def to_torch(a):
    """A NumPy array (bf16 as ml_dtypes' bfloat16) as a CPU torch tensor of its dtype, a copy
    (torch.from_numpy takes no bf16)."""
    import torch

    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def run_torch(case: Case, inputs: Dict[str, np.ndarray], device: str = "cpu", reference: bool = False,
              strided: bool = False, wrap=None) -> Result:
    """ato_torch (or, with reference=True, the float64 reference under torch autograd). With
    ``strided``, the op gets each differentiated input as a non-contiguous view (every other
    element of a buffer twice as wide) holding the same values; gradients are the leaves'.
    ``wrap(fn)``: what runs instead of the op (e.g. a torch.compile of it)."""
    import torch

    import ato_torch

    fn = reference_op(case.op) if reference else getattr(ato_torch, case.op)
    if wrap is not None:
        fn = wrap(fn)
    t_in, diff = torch_inputs(case, inputs, device, reference)
    args = {n: _strided(t) if strided and n in diff else t for n, t in t_in.items()}
    start = time.perf_counter()
    outs = case.call(fn, args)
    cts = [torch.from_numpy(c).double().to(device) for c in cotangents(case, outs)]
    if diff:  # (a forward-only op's cases differentiate nothing)
        loss = torch_loss(outs, cts)
        if loss.requires_grad:  # (the reference of a call whose outputs use no input: all zero gradients)
            loss.backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return torch_result(outs, t_in, diff, time.perf_counter() - start)


def torch_inputs(case: Case, inputs: Dict[str, np.ndarray], device: str = "cpu", reference: bool = False):
    """(run_torch's tensors of ``inputs`` on ``device`` by name, the differentiated names): the
    differentiated ones leaves requiring grad, integer ones as they are, the rest in their own
    dtype (float64 with ``reference``)."""
    import torch

    def to_t(name, a):
        a = np.asarray(a)
        if a.dtype.kind in "iub":
            return torch.from_numpy(a.copy()).to(device)
        t = to_torch(a)
        t = (t.double() if reference else t).to(device)
        return t.requires_grad_(True) if name in diff else t

    diff = case.differentiated(list(inputs))
    return {n: to_t(n, a) for n, a in inputs.items()}, diff


def torch_loss(outs, cts):
    """run_torch's loss: sum(outputs * cotangents) in float64 (cts: float64 tensors)."""
    return sum((o.double() * c).sum() for o, c in zip(outs, cts))


def torch_result(outs, leaves: dict, diff, seconds: float = 0.0) -> Result:
    """The Result of outputs ``outs`` and the gradients of ``leaves`` named in ``diff`` (an input
    that no output depends on: zeros, where autograd leaves None)."""
    import torch

    grads = {n: _f64(leaves[n].grad if leaves[n].grad is not None else torch.zeros_like(leaves[n])) for n in diff}
    return Result([_f64(o) for o in outs], grads, seconds)


def _strided(t):
    """The values of ``t`` as a view whose last axis has stride 2 (differentiable)."""
    import torch

    return torch.stack((t, torch.zeros_like(t)), dim=-1)[..., 0]


def run_jax(case: Case, inputs: Dict[str, np.ndarray], jit: bool = True) -> Result:
    """ato_jax under jax.jit(jax.value_and_grad)."""
    import jax
    import jax.numpy as jnp

    import ato_jax

    names = list(inputs)
    diff = case.differentiated(names)
    op = getattr(ato_jax, case.op)
    probe = jax.eval_shape(lambda *a: case.call(op, dict(zip(names, a))), *[inputs[n] for n in names])
    cts = cotangents(case, probe)
    consts = {n: jnp.asarray(inputs[n]) for n in names if n not in diff}

    def loss(*arrays):
        outs = case.call(op, {**consts, **dict(zip(diff, arrays))})
        total = sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(outs, cts))
        return total, outs

    if diff:
        fn = jax.value_and_grad(loss, argnums=tuple(range(len(diff))), has_aux=True)
    else:  # forward only
        fn = lambda: ((None, loss()[1]), ())  # noqa: E731
    fn = jax.jit(fn) if jit else fn
    args = [jnp.asarray(inputs[n]) for n in diff]
    start = time.perf_counter()
    (_, outs), grads = fn(*args)
    jax.block_until_ready((outs, grads))
    secs = time.perf_counter() - start
    return Result([_f64(o) for o in outs], {n: _f64(g) for n, g in zip(diff, grads)}, secs)


# RMS below which a quantity is compared on an absolute scale. Some true gradients are
# pure cancellation: with one row, o_0 = v_0 whatever q_0 is, so dq is ~1e-8 of rounding
# noise in the reference and the kernel alike, and a relative error there means nothing.
# Below this floor the check becomes ||a - ref|| < tol * FLOOR_RMS * sqrt(n).
FLOOR_RMS = 1e-3


def rel_err(a: np.ndarray, ref: np.ndarray, floor: float = FLOOR_RMS) -> float:
    """||a - ref|| / max(||ref||, floor * sqrt(n)) over the finite entries of ref; inf if
    a has a NaN, or an infinity where ref has not the same one (an infinite reference entry,
    such as the lse -inf of a query that sees no key, must be matched exactly)."""
    a, ref = np.asarray(a), np.asarray(ref)
    same_inf = np.isinf(ref) & (a == ref)
    if np.isnan(a).any() or np.isinf(a[~same_inf]).any() or np.isinf(ref[~same_inf]).any():
        return float("inf")
    a, ref = a[~same_inf], ref[~same_inf]
    denom = max(float(np.linalg.norm(ref)), floor * np.sqrt(max(ref.size, 1)))
    return float(np.linalg.norm(a - ref) / denom)


def max_rel_err(res: Result, ref: Result) -> float:
    errs = [rel_err(a, b) for a, b in zip(res.outputs, ref.outputs)]
    errs += [rel_err(res.grads[n], ref.grads[n]) for n in ref.grads]
    return max(errs)


def bitwise_equal(a: Result, b: Result) -> bool:
    """Every output and gradient equal, a NaN to a NaN (a mean over no target is one)."""
    same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a.outputs, b.outputs))
    return same and all(np.array_equal(a.grads[n], b.grads[n], equal_nan=True) for n in a.grads)
