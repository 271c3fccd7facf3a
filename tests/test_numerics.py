"""Numerics that a wrong result could hide behind (issue 27), beside the fuzzing tier:
bf16 rounding under the interpreter, subnormal numbers in both frameworks, cross-entropy at
the largest logits."""

import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_core import interpreter
from helpers import (UNSEEN_KEY_CASES, bf16_cast_kernel, bf16_rounding_values, check_bf16_ops,
                     check_unseen_nan_value, helper_calls_kernel, min_max_kernel, run_bf16_ops, tanh_abs_kernel,
                     tanh_slope_kernel)


def test_interpreter_rounds_bf16_to_nearest_even():
    """Every fp32 -> bf16 conversion of an interpreted kernel (a store to bf16, an explicit
    cast) rounds to nearest even, as the GPU does (Triton's interpreter truncates)."""
    x = torch.from_numpy(bf16_rounding_values())
    y, z = torch.empty(len(x), dtype=torch.bfloat16), torch.empty(len(x), dtype=torch.bfloat16)
    interpreter.interpreted(bf16_cast_kernel)[(1,)](x, y, z, len(x), BLOCK=4096)
    ref = x.to(torch.bfloat16)
    nan = torch.isnan(x)
    for out in (y, z):
        assert torch.isnan(out[nan]).all()
        assert torch.equal(out[~nan].view(torch.int16), ref[~nan].view(torch.int16))


def test_interpreter_computes_bf16_as_the_gpu():
    """bf16 arithmetic in an interpreted kernel is IEEE bf16 arithmetic (Triton's interpreter
    computes on the uint16 bit patterns it stores bf16 as: inf - inf = 0, -1 < -2)."""
    check_bf16_ops(run_bf16_ops("cpu"))


def test_interpreter_min_max_drop_nan_as_the_gpu():
    """tl.minimum / tl.maximum drop a NaN operand by default (the GPU's min.f32 / max.f32, so a
    kernel that needs the NaN must ask for propagate_nan=ALL, and the CPU tier sees one that
    does not) and keep it with propagate_nan=ALL, under every Triton the tier runs."""
    nan = float("nan")
    x = torch.tensor([nan, 1.0, nan, -2.0, 3.0])
    y = torch.tensor([0.0, nan, nan, 5.0, -1.0])
    out = torch.empty(4, len(x))
    interpreter.interpreted(min_max_kernel)[(1,)](x, y, out, len(x), BLOCK=8)
    np.testing.assert_array_equal(out[0].numpy(), [0.0, 1.0, nan, -2.0, -1.0])
    np.testing.assert_array_equal(out[1].numpy(), [0.0, 1.0, nan, 5.0, 3.0])
    np.testing.assert_array_equal(out[2].numpy(), [nan, nan, nan, -2.0, -1.0])
    np.testing.assert_array_equal(out[3].numpy(), [nan, nan, nan, 5.0, 3.0])


def test_bf16_output_rounds_to_nearest_even():
    """An op's bf16 output is its fp32 result rounded to nearest even: rope (a multiply and a
    subtract per element, fp32) against torch doing the same arithmetic."""
    rng = np.random.default_rng(1)
    q = torch.from_numpy(rng.standard_normal((1, 2, 64, 32)).astype(np.float32)).bfloat16()
    cos = torch.from_numpy(rng.uniform(-1, 1, (64, 16)).astype(np.float32))
    sin = torch.from_numpy(rng.uniform(-1, 1, (64, 16)).astype(np.float32))
    out, _ = ato_torch.rope(q, q, cos, sin)
    x1, x2 = q.float()[..., :16], q.float()[..., 16:]
    ref = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).bfloat16()
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))


def test_interpreter_patches_the_language_once_a_launch(monkeypatch):
    """ato_core.interpreter keeps Triton's interpreter from re-patching triton.language at each
    call of a @triton.jit helper inside a launch (a quarter of CI's interpreter time): a launch
    whose kernel calls a helper 4 times patches once, and computes what it should."""
    import triton.runtime.interpreter as ti

    x = torch.zeros(16)
    interpreter.interpreted(helper_calls_kernel)[(1,)](x, BLOCK=16)  # installs the patch
    assert getattr(ti._patch_lang, "_ato_once", False), "the interpreter's structure changed: re-check the patch"
    calls, real = [], ti._patch_lang.original
    monkeypatch.setattr(ti._patch_lang, "original", lambda fn: calls.append(fn) or real(fn))
    interpreter.interpreted(helper_calls_kernel)[(1,)](x, BLOCK=16)
    assert len(calls) == 1 and torch.equal(x, torch.full((16,), 8.0))


@pytest.mark.parametrize("scale", [1.0, 0.02, 3.0])
def test_tanh_abs_absolute_error(scale):
    """flash attention's softcap tanh(scale x) (triton_helpers.tanh_abs) under the interpreter:
    within 2^-22 of tanh absolutely (a score's absolute error is what the softmax sees), +-1
    at +-inf, NaN for NaN; random values over many magnitudes, both signs. The GPU's form
    (approximate exp2 and reciprocal): test_gpu.py::test_tanh_abs_gpu."""
    x = tanh_abs_inputs(scale)
    y = torch.empty(len(x))
    interpreter.interpreted(tanh_abs_kernel)[(1,)](torch.from_numpy(x), y, len(x), scale, BLOCK=8192)
    check_tanh_abs(x, y.numpy(), scale, 2.0 ** -22)


@pytest.mark.parametrize("scale", [1.0, 0.02, 3.0])
def test_tanh_slope(scale):
    """cross_entropy's softcap (triton_helpers.tanh_slope) under the interpreter: 1 - 2 r as
    tanh_abs (2^-22 absolutely), the slope 4 e r^2 relatively accurate also where tanh
    saturates (check_tanh_slope), 0 at +-inf, NaN for NaN. The GPU's: test_gpu.py."""
    x = tanh_abs_inputs(scale)
    r, slope = torch.empty(len(x)), torch.empty(len(x))
    interpreter.interpreted(tanh_slope_kernel)[(1,)](torch.from_numpy(x), r, slope, len(x), scale, BLOCK=8192)
    check_tanh_abs(x, 1.0 - 2.0 * r.numpy().astype(np.float64), scale, 2.0 ** -22)
    check_tanh_slope(x, slope.numpy(), scale, 2.0 ** -21)


def check_tanh_slope(x, s, scale, ulps):
    """s against 1 - tanh^2 = 1 / cosh^2 (float64): relatively within ``ulps`` plus what the
    exponent's fp32 rounding costs (z = 2 scale x log2 e rounded twice: e off by up to |z| ln 2
    2^-23 relatively), where the slope is a normal fp32 number (above 1e-30); below, within
    1e-30 (a reciprocal under 2^-126 flushes to 0)."""
    y = np.float32(scale) * x.astype(np.float64)
    with np.errstate(over="ignore"):
        ref = 1.0 / np.cosh(y) ** 2
    nan = np.isnan(x)
    assert np.isnan(s[nan]).all() and not np.isnan(s[~nan]).any()
    s, ref, y = s[~nan].astype(np.float64), ref[~nan], y[~nan]
    big = ref > 1e-30
    bound = ulps + 2.0 * np.abs(y[big]) * 2.0 ** -23
    err = np.abs(s[big] - ref[big]) / ref[big]
    assert (err <= bound).all(), f"slope: relative error {err.max():.3g} at {y[big][np.argmax(err - bound)]}"
    assert np.abs(s[~big] - ref[~big]).max() <= 1e-30
    assert s[np.isinf(y)].tolist() == [0.0, 0.0]


def tanh_abs_inputs(scale):
    rng = np.random.default_rng(2)
    special = [0.0, -0.0, 1e-30, 0.25, 1.0, 9.0, 20.0, 1e30, np.inf, np.nan]
    x = np.concatenate([special, rng.standard_normal(2000) * 10.0 ** rng.uniform(-8, 2, 2000) / scale])
    return np.concatenate([x, -x]).astype(np.float32)


def check_tanh_abs(x, y, scale, bound):
    ref = np.tanh(np.float32(scale) * x.astype(np.float64))
    nan = np.isnan(x)
    assert np.isnan(y[nan]).all() and not np.isnan(y[~nan]).any()
    err = np.abs(y[~nan] - ref[~nan]).max()
    assert err <= bound, f"max |tanh_abs - tanh| {err:.3g} > {bound:.3g}"
    assert y[x == np.inf].tolist() == [1.0] and y[x == -np.inf].tolist() == [-1.0]


# op: (its float inputs from x [8, 5] ~ N(0, 1), drawn so that results or gradients are
# subnormal; the call, differentiated in the first input)
TARGETS = np.arange(8) % 5
SUBNORMAL_OPS = {
    "elu_plus_one": (lambda x: (x - 87.5,), lambda ops, a: ops.elu_plus_one(a)),
    "swiglu": (lambda x: (x * 1e-20, x * 1e-19), lambda ops, g, u: ops.swiglu(g, u)),
    "softmax": (lambda x: (x * 0.1 - np.arange(5) * 23.0,), lambda ops, a: ops.softmax(a)),  # e^-92 ...
    "cross_entropy": (lambda x: (x * 40.0,), lambda ops, a: ops.cross_entropy(a, _targets(ops))),
}


def _targets(ops):
    import jax.numpy as jnp

    return torch.from_numpy(TARGETS) if ops is ato_torch else jnp.asarray(TARGETS)


@pytest.mark.parametrize("op", sorted(SUBNORMAL_OPS))
def test_subnormals_same_in_torch_and_jax(op):
    """Results and gradients below 1e-38 are the same bits in both frameworks: JAX's CPU
    threads flush subnormals to zero, so ato_jax's interpreter runs with IEEE defaults."""
    import jax
    import jax.numpy as jnp

    prep, call = SUBNORMAL_OPS[op]
    arrays = [a.astype(np.float32) for a in prep(np.random.default_rng(2).standard_normal((8, 5)))]
    cot = np.random.default_rng(3).standard_normal(8 if op == "cross_entropy" else (8, 5)).astype(np.float32)
    cot = cot[0] if op == "cross_entropy" else cot  # a mean: one number
    at = [torch.from_numpy(a).requires_grad_() for a in arrays]
    yt = call(ato_torch, *at)
    (gt,) = torch.autograd.grad((yt * torch.from_numpy(np.asarray(cot))).sum(), at[0])
    yj, vjp = jax.vjp(lambda *a: call(ato_jax, *a), *[jnp.asarray(a) for a in arrays])
    gj = vjp(jnp.asarray(cot))[0]
    tiny = lambda a: int(((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)).sum())  # noqa: E731
    assert tiny(yt.detach().numpy()) + tiny(gt.numpy()) > 0, "the case produces no subnormal"
    assert np.array_equal(yt.detach().numpy(), np.asarray(yj))
    assert np.array_equal(gt.numpy(), np.asarray(gj))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_at_the_largest_logits(dtype):
    """Rows of one logit repeated (+-largest finite: loss log V), and rows whose target holds
    the largest logit and the rest its negative (loss 0): exact and finite, with exact
    gradients (uniform, or zero)."""
    big = torch.finfo(dtype).max
    V = 7
    logits = torch.tensor([[big] * V, [-big] * V, [big] + [-big] * (V - 1), [0.0] * (V - 1) + [big]], dtype=dtype)
    targets = torch.tensor([3, 3, 0, V - 1])
    x = logits.clone().requires_grad_()
    loss = ato_torch.cross_entropy(x, targets, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), x)
    # the loss is fp32 whatever the logits: a few fp32 ulps; the gradient, in the logits' dtype,
    # one ulp of it
    np.testing.assert_allclose(loss.detach().float().numpy(), [np.log(V), np.log(V), 0.0, 0.0], rtol=1e-6)
    uniform = np.full(V, 1.0 / V) - np.eye(V)[3]
    rtol = 1e-6 if dtype == torch.float32 else 8e-3
    np.testing.assert_allclose(grad.float().numpy()[:2], [uniform, uniform], rtol=rtol)
    assert torch.equal(grad.float()[2:], torch.zeros(2, V))
    import jax.numpy as jnp

    jl = ato_jax.cross_entropy(jnp.asarray(logits.float().numpy()).astype(str(dtype).split(".")[1]),
                               jnp.asarray(targets.numpy()), reduction="none")
    assert np.array_equal(np.asarray(jl).astype(np.float32), loss.detach().float().numpy())


@pytest.mark.parametrize("name", UNSEEN_KEY_CASES)
def test_attention_nan_value_no_query_sees(name):
    """helpers.check_unseen_nan_value on the interpreted kernels. Found by the fuzzing tier
    (ATO_FUZZ_SEED=14, the window case; seed 23, the block-sparse one)."""
    check_unseen_nan_value(name, "cpu")
