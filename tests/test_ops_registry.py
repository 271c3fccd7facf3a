"""The op declarations (ato_core.op.Op) and the generic adapters built from them: a new op is
a kernel, its plans and one declaration; both frameworks then run it, differentiate it and
agree bit for bit. Plans are checked against their kernels' signatures when built."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import triton.language as tl

import ato_jax
import ato_jax.ops
import ato_torch
import ato_torch.ops
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, alignment, cdiv, kernel, numel, scratch_buffer
from ato_core.op import Op
from ato_core.ops import OPS
from ato_core.target import INTERPRETER


# -- a toy op, declared as a family's folder would declare it: y = alpha * x -------------------

@kernel(inputs=1, outputs=1)
def scale_kernel(X, n, alpha, Y, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * alpha).to(Y.dtype.element_ty), mask=mask)


def _scale_plan(x: ArraySpec, alpha: float, src: str, out: str) -> Plan:
    n = numel(x.shape)
    launch = Launch(scale_kernel, (max(cdiv(n, 256), 1),), (src,), (n, float(alpha)),
                    (Buffer(out, tuple(x.shape), x.dtype),), {"BLOCK": 256})
    return Plan((launch,), (out,), dense=(src,))


def scaled_copy(x, *, alpha=2.0):
    """alpha * x, elementwise (a toy op: the whole declaration of a new op)."""
    return (x,), float(alpha)


SCALED_COPY = Op(
    scaled_copy, inputs=("x",), results=("y",), saved=(), differentiable=("x",),
    forward=lambda s, alpha, target: _scale_plan(s["x"], alpha, "x", "y"),
    backward=lambda s, alpha, target: _scale_plan(s["dy"], alpha, "dy", "dx"),
    reference=lambda x, *, alpha=2.0: alpha * x)


def test_a_declared_op_runs_and_differentiates_in_both_frameworks():
    t_op, j_op = ato_torch.ops.build(SCALED_COPY), ato_jax.ops.build(SCALED_COPY)
    assert inspect.signature(t_op) == inspect.signature(j_op) == inspect.signature(scaled_copy)
    assert t_op.__doc__ == j_op.__doc__ == SCALED_COPY.doc and SCALED_COPY.doc.startswith(scaled_copy.__doc__)
    x = np.random.default_rng(0).standard_normal((3, 333)).astype(np.float32)
    dy = np.random.default_rng(1).standard_normal((3, 333)).astype(np.float32)

    xt = torch.from_numpy(x).requires_grad_()
    yt = t_op(xt, alpha=1.5)
    yt.backward(torch.from_numpy(dy))
    yj, vjp = jax.vjp(lambda a: j_op(a, alpha=1.5), jnp.asarray(x))
    (gj,) = vjp(jnp.asarray(dy))
    np.testing.assert_array_equal(yt.detach().numpy(), np.float32(1.5) * x)
    np.testing.assert_array_equal(xt.grad.numpy(), np.float32(1.5) * dy)
    np.testing.assert_array_equal(np.asarray(yj), yt.detach().numpy())
    np.testing.assert_array_equal(np.asarray(gj), xt.grad.numpy())
    jitted = jax.jit(jax.grad(lambda a: jnp.sum(j_op(a, alpha=3.0) * jnp.asarray(dy))))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(jitted), np.float32(3.0) * dy)


def test_every_declared_op_is_in_both_frameworks_with_one_signature_and_docstring():
    for name, op in OPS.items():
        t_op, j_op = getattr(ato_torch, name), getattr(ato_jax, name)
        assert t_op.op is op and j_op.op is op, name
        assert inspect.signature(t_op) == inspect.signature(j_op) == inspect.signature(op.signature), name
        assert t_op.__doc__ == j_op.__doc__ == op.doc and op.doc, name
        assert op.reference is not None and op.family, name
        assert set(op.differentiable) <= set(op.inputs) and set(op.optional) <= set(op.inputs)
        assert set(op.saved) <= set(op.inputs) | set(op.results)
    # every op, and the host-side helpers both adapters export
    assert sorted(ato_torch.__all__) == sorted(ato_jax.__all__) == sorted(
        [*OPS, "decode_schedule", "vocab_parallel_linear_cross_entropy"])


def test_a_launch_is_checked_against_its_kernel_signature():
    """A scalar too many or too few, a missing or unknown constexpr, a pointer miscounted:
    TypeError at plan time, naming the kernel, on any machine."""
    out = (Buffer("y", (4,), "float32"),)
    Launch(scale_kernel, (1,), ("x",), (4, 1.0), out, {"BLOCK": 16})  # the right one
    bad = [
        dict(scalars=(4,)),                      # alpha missing: the output pointer would take its place
        dict(scalars=(4, 1.0, 7)),               # one scalar too many
        dict(inputs=("x", "x")),                 # two input pointers
        dict(constexprs={}),                     # BLOCK missing
        dict(constexprs={"BLOCK": 16, "ALIGN": 4}),  # not a parameter of the kernel
    ]
    for change in bad:
        args = dict(kernel=scale_kernel, grid=(1,), inputs=("x",), scalars=(4, 1.0), outputs=out,
                    constexprs={"BLOCK": 16}, **{})
        args.update(change)
        with pytest.raises(TypeError, match="scale_kernel"):
            Launch(**args)


@kernel(inputs=1, outputs=2)
def scale_pair_kernel(X, n, alpha, Y, Z, BLOCK: tl.constexpr):  # (never launched: its Launch is checked)
    pass


def test_a_launch_scratch_is_its_last_output():
    """Launch.scratch (the kernel's global scratch, which the adapters hand it) is whether its
    last output is a scratch_buffer; a scratch buffer anywhere else is refused at plan time."""
    y = Buffer("y", (4,), "float32")
    scratch = scratch_buffer("scratch", (3, 2), 256)
    assert scratch.shape == (cdiv(6 * 256 + 127, 4),) and scratch.dtype == "int32"
    args = dict(kernel=scale_pair_kernel, grid=(1,), inputs=("x",), scalars=(4, 1.0), constexprs={"BLOCK": 16})
    assert Launch(outputs=(y, scratch), **args).scratch
    assert not Launch(outputs=(y, Buffer("z", (4,), "float32")), **args).scratch
    with pytest.raises(TypeError, match="scale_pair_kernel: a global scratch buffer .* must be the last output"):
        Launch(outputs=(scratch, y), **args)


def test_a_plan_that_reads_what_it_is_not_given_fails_when_built():
    """A declaration whose backward reads an array that is neither saved nor a cotangent
    fails at plan time (on the CPU), not with a KeyError deep in a launch."""
    wrong = Op(scaled_copy, inputs=("x",), results=("y",), saved=(), differentiable=("x",),
               forward=lambda s, alpha, target: _scale_plan(s["x"], alpha, "x", "y"),
               backward=lambda s, alpha, target: _scale_plan(s["x"], alpha, "x", "dx"))  # x is not saved
    spec = ArraySpec((8,), "float32", (1,), "cpu")
    plan = wrong.forward_plan((spec,), 2.0, INTERPRETER)
    with pytest.raises(TypeError, match=r"backward plan reads \['x'\]"):
        wrong.backward_plan(plan, (spec,), 2.0, (spec,), INTERPRETER)


def test_kernel_declaration_turns_off_scalar_alignment_specialisation_only():
    """Scalars are compiled as jax-triton compiles them (no divisibility-by-16 marking),
    pointers keep theirs: what makes torch's and JAX's binaries one."""
    flags = {p.name: p.do_not_specialize_on_alignment for p in scale_kernel.params if not p.is_constexpr}
    assert flags == {"X": False, "n": True, "alpha": True, "Y": False}
    assert alignment(48, 96) == 16 and alignment(6) == 2


def test_wrong_argument_types_name_the_argument():
    with pytest.raises(TypeError, match="weight: expected a torch.Tensor, got tuple"):
        ato_torch.layer_norm(torch.ones(2, 4), (1.0, 2.0, 3.0, 4.0))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got ndarray"):
        ato_torch.softmax(np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got list"):
        ato_torch.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError, match="weight: expected an array, got tuple"):
        ato_jax.layer_norm(jnp.ones((2, 4)), (1.0, 2.0, 3.0, 4.0))
    with pytest.raises(TypeError, match="x: expected an array, got list"):
        ato_jax.softmax([[1.0, 2.0]])
    assert ato_jax.softmax(np.ones((2, 4), np.float32)).shape == (2, 4)  # NumPy arrays are arrays


def test_ato_jax_runs_without_importing_ato_torch():
    """The JAX CPU path runs the interpreter through ato_core.interpreter (torch tensors, but
    not ato_torch): a JAX user's process never imports the torch adapter."""
    import subprocess
    import sys

    code = ("import sys, jax.numpy as jnp, ato_jax; ato_jax.softmax(jnp.ones((2, 8))); "
            "print('ato_torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_required_array_given_as_none_is_named(framework):
    ops, expected = (ato_torch, "expected a torch.Tensor, got NoneType") if framework == "torch" else \
        (ato_jax, "expected an array, got NoneType")
    x = np.ones((2, 8), np.float32)
    x = torch.from_numpy(x) if framework == "torch" else jnp.asarray(x)
    with pytest.raises(TypeError, match=f"x: {expected}"):
        ops.layer_norm(None)
    with pytest.raises(TypeError, match=f"up: {expected}"):
        ops.swiglu(x, None)
    with pytest.raises(TypeError, match=f"residual: {expected}"):
        ops.dropout_residual_layer_norm(x, None, None, None)
    assert ops.layer_norm(x, None, None).shape == (2, 8)  # weight and bias may be absent


def test_jax_second_order_differentiation_names_the_op():
    """ato's derivatives are first-order reverse mode (custom_vjp). Differentiating what they
    run (grad of grad, jax.hessian) fails with an error naming the op, not deep inside
    pure_callback or jax-triton; the first-order gradient is unaffected."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    g = jax.grad(lambda a: jnp.sum(ato_jax.layer_norm(a) ** 2))(x)
    assert g.shape == x.shape and bool(jnp.all(jnp.isfinite(g)))
    with pytest.raises(NotImplementedError, match="ato_jax.layer_norm: first-order reverse mode only"):
        jax.grad(lambda a: jnp.sum(jax.grad(lambda b: jnp.sum(ato_jax.layer_norm(b) ** 2))(a)))(x)
    with pytest.raises(NotImplementedError, match="ato_jax.softmax: first-order reverse mode only"):
        jax.hessian(lambda a: jnp.sum(ato_jax.softmax(a)))(x)


def test_jax_forward_mode_names_the_op():
    """Forward mode (jax.jvp, jax.jacfwd) is not supported: the error names the op and says what
    is, instead of JAX's message about a custom_vjp the user never wrote; jax.jacrev works."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3,)).astype(np.float32))
    with pytest.raises(NotImplementedError, match="ato_jax.elu_plus_one: forward-mode differentiation"):
        jax.jvp(ato_jax.elu_plus_one, (x,), (x,))
    with pytest.raises(NotImplementedError, match="ato_jax.softmax: forward-mode differentiation"):
        jax.jit(jax.jacfwd(ato_jax.softmax))(x)
    jac = jax.jacrev(ato_jax.elu_plus_one)(x)
    np.testing.assert_allclose(np.diag(np.asarray(jac)), np.where(x > 0, 1.0, np.exp(x)), rtol=1e-6)


def test_torch_absent_cotangents_are_zeros_as_jax_passes_them():
    """torch hands None for an output the loss does not use; the generic adapter fills it with
    zeros (an optional group wholly absent stays None). The gradients must be JAX's, whose
    cotangents are always given, bit for bit: rope with only q_rot used, linear_attention with
    only the final S used (o's and z's cotangents absent)."""
    rng = np.random.default_rng(3)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    q, k, cos, sin = r(1, 2, 5, 8), r(1, 1, 5, 8), r(5, 4), r(5, 4)
    qt, kt = torch.from_numpy(q).requires_grad_(), torch.from_numpy(k).requires_grad_()
    ato_torch.rope(qt, kt, torch.from_numpy(cos), torch.from_numpy(sin))[0].sum().backward()
    _, vjp = jax.vjp(lambda a, b: ato_jax.rope(a, b, jnp.asarray(cos), jnp.asarray(sin)), jnp.asarray(q), jnp.asarray(k))
    gq, gk = vjp((jnp.ones(q.shape, jnp.float32), jnp.zeros(k.shape, jnp.float32)))
    np.testing.assert_array_equal(qt.grad.numpy(), np.asarray(gq))
    np.testing.assert_array_equal(kt.grad.numpy(), np.asarray(gk))
    assert not kt.grad.any()

    a, b, c = np.abs(r(1, 2, 7, 4)), np.abs(r(1, 2, 7, 4)), r(1, 2, 7, 3)
    leaves = [torch.from_numpy(x).requires_grad_() for x in (a, b, c)]
    _, (S, _) = ato_torch.linear_attention(*leaves, causal=True, output_final_state=True)
    S.sum().backward()
    f = lambda *x: ato_jax.linear_attention(*x, causal=True, output_final_state=True)  # noqa: E731
    (o, (Sj, zj)), vjp = jax.vjp(f, *map(jnp.asarray, (a, b, c)))
    grads = vjp((jnp.zeros_like(o), (jnp.ones_like(Sj), jnp.zeros_like(zj))))
    for t, g in zip(leaves, grads):
        np.testing.assert_array_equal(t.grad.numpy(), np.asarray(g))
