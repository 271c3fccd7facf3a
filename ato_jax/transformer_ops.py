"""Fused transformer ops for JAX: layer_norm, rms_norm, dropout_residual_layer_norm,
softmax, rope, swiglu, cross_entropy, as jax.custom_vjp over the ato_core plans; same names,
arguments and results as ato_torch. All work under jax.jit and jax.grad."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ato_core import cross_entropy as ce_core
from ato_core import norms as norm_core
from ato_core import rope as rope_core
from ato_core import softmax as softmax_core
from ato_core import swiglu as swiglu_core

from .launcher import platform_of, run_plan, spec, target_for


def _spec(x):
    return None if x is None else spec(x)


def _arr(x):
    return None if x is None else jnp.asarray(x)


# static = (rms, eps, p, seed)
@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _norm(x, residual, weight, bias, static):
    return _norm_fwd(x, residual, weight, bias, static)[0]


def _norm_fwd(x, residual, weight, bias, static):
    rms, eps, p, seed = static
    target = target_for(x)
    plan = norm_core.forward_plan(spec(x), _spec(residual), _spec(weight), _spec(bias), rms=rms, eps=eps, p=p,
                                  seed=seed, target=target)
    y, h, mean, rstd = run_plan(plan, {"x": x, "residual": residual, "weight": weight, "bias": bias}, target)
    hx = h if residual is not None else x
    out = (y, h) if residual is not None else y
    return out, (hx, weight, bias, mean, rstd, residual is not None)


def _norm_bwd(static, res, cotangent):
    rms, eps, p, seed = static
    hx, weight, bias, mean, rstd, has_res = res
    dy, dh = cotangent if has_res else (cotangent, None)
    target = target_for(hx)
    plan = norm_core.backward_plan(spec(hx), _spec(weight), _spec(bias), rms=rms, has_residual=has_res,
                                   has_dh=dh is not None, p=p, seed=seed, target=target)
    dx, dres, dw, db = run_plan(plan, {"hx": hx, "weight": weight, "dy": dy, "dh": dh, "mean": mean, "rstd": rstd},
                                target)
    return (dx, dres if has_res else None, dw if weight is not None else None, db if bias is not None else None)


_norm.defvjp(_norm_fwd, _norm_bwd)


def layer_norm(x, weight=None, bias=None, *, eps=1e-5):
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

    x: any shape [..., N], N in 1..65536, fp32/fp16/bf16 (fp32 statistics); weight, bias:
    [N] or None. Returns y (x's shape and dtype); differentiable in x, weight and bias
    (weight and bias gradients reduced in a fixed order: deterministic)."""
    x, weight, bias = jnp.asarray(x), _arr(weight), _arr(bias)
    norm_core.check_norm("x", spec(x), _spec(weight), _spec(bias), eps)
    return _norm(x, None, weight, bias, (False, float(eps), 0.0, 0))


def rms_norm(x, weight=None, *, eps=1e-6):
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. Shapes as layer_norm."""
    x, weight = jnp.asarray(x), _arr(weight)
    norm_core.check_norm("x", spec(x), _spec(weight), None, eps)
    return _norm(x, None, weight, None, (True, float(eps), 0.0, 0))


def dropout_residual_layer_norm(x, residual, weight, bias, *, p=0.0, seed=0, eps=1e-5, training=True):
    """h = dropout(x) + residual and y = layer_norm(h); returns (y, h).

    x, residual: [..., N] of one dtype; weight, bias: [N] or None. Dropout (training and
    p > 0) keeps an element iff Philox U(0,1) on (seed, its flat index) is >= p and scales
    it by 1/(1-p): the same seed gives the same mask as ato_torch, on CPU and GPU; the
    backward draws it again (no mask is stored). p in [0, 1), seed in [0, 2**31) (a Python
    int: it selects the mask at trace time)."""
    x, residual, weight, bias = jnp.asarray(x), jnp.asarray(residual), _arr(weight), _arr(bias)
    norm_core.check_norm("x", spec(x), _spec(weight), _spec(bias), eps)
    p = norm_core.check_dropout(p, seed, training)
    return _norm(x, residual, weight, bias, (False, float(eps), p, int(seed)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _softmax(x, temperature):
    return _softmax_fwd(x, temperature)[0]


def _softmax_fwd(x, temperature):
    target = target_for(x)
    (y,) = run_plan(softmax_core.forward_plan(spec(x), temperature=temperature, target=target), {"x": x}, target)
    return y, y


def _softmax_bwd(temperature, y, dy):
    target = target_for(y)
    return (run_plan(softmax_core.backward_plan(spec(y), temperature=temperature, target=target),
                     {"y": y, "dy": dy}, target)[0],)


_softmax.defvjp(_softmax_fwd, _softmax_bwd)


def softmax(x, *, temperature=1.0):
    """softmax(x / temperature) over the last axis, any width (online past 8192). The
    backward uses the output alone."""
    x = jnp.asarray(x)
    softmax_core.check_softmax(spec(x), temperature)
    return _softmax(x, float(temperature))


@jax.custom_vjp
def _swiglu(gate, up):
    return _swiglu_fwd(gate, up)[0]


def _swiglu_fwd(gate, up):
    target = target_for(gate)
    (y,) = run_plan(swiglu_core.forward_plan(spec(gate), spec(up), target=target), {"gate": gate, "up": up}, target)
    return y, (gate, up)


def _swiglu_bwd(res, dy):
    gate, up = res
    target = target_for(gate)
    return tuple(run_plan(swiglu_core.backward_plan(spec(gate), target=target), {"gate": gate, "up": up, "dy": dy},
                          target))


_swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def swiglu(gate, up):
    """silu(gate) * up, elementwise; gate and up of one shape and dtype."""
    gate, up = jnp.asarray(gate), jnp.asarray(up)
    swiglu_core.check_swiglu(spec(gate), spec(up))
    return _swiglu(gate, up)


def _rope_run(q, k, cos, sin, positions, interleaved, inverse):
    target = target_for(q)
    plan = rope_core.plan(spec(q), spec(k), spec(cos), spec(sin), _spec(positions), interleaved=interleaved,
                          inverse=inverse, target=target)
    return tuple(run_plan(plan, {"q": q, "k": k, "cos": cos, "sin": sin, "positions": positions}, target))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _rope(q, k, cos, sin, positions, interleaved):
    return _rope_run(q, k, cos, sin, positions, interleaved, False)


def _rope_fwd(q, k, cos, sin, positions, interleaved):
    return _rope_run(q, k, cos, sin, positions, interleaved, False), (cos, sin, positions)


def _rope_bwd(interleaved, res, cotangent):
    cos, sin, positions = res
    dq, dk = _rope_run(*cotangent, cos, sin, positions, interleaved, True)
    # cos and sin are constants of the op (documented): no gradient flows to them
    return dq, dk, jnp.zeros_like(cos), jnp.zeros_like(sin), None


_rope.defvjp(_rope_fwd, _rope_bwd)


def rope(q, k, cos, sin, *, positions=None, interleaved=False):
    """Rotary position embedding of q [B, Hq, N, D] and k [B, Hkv, N, D] (D even).

    cos, sin: [max_positions, D/2]; positions: [B, N] integer (default 0..N-1, e.g. offsets
    when decoding). interleaved=False rotates (x[i], x[i + D/2]) (LLaMA); True rotates
    (x[2i], x[2i+1]) (GPT-J). Returns new (q_rot, k_rot). Differentiable in q and k; cos
    and sin are constants (zero gradient). A position outside [0, max_positions) gives zeros."""
    q, k, cos, sin, positions = jnp.asarray(q), jnp.asarray(k), jnp.asarray(cos), jnp.asarray(sin), _arr(positions)
    rope_core.check_rope(spec(q), spec(k), spec(cos), spec(sin), _spec(positions), interleaved)
    return _rope(q, k, cos, sin, positions, interleaved)


# static = (ignore_index, reduction, label_smoothing)
@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _cross_entropy(logits, targets, static):
    return _ce_run(logits, targets, static, grad=False)[0]


def _ce_run(logits, targets, static, grad):
    ignore_index, reduction, label_smoothing = static
    target = target_for(logits)
    plan = ce_core.forward_plan(spec(logits), spec(targets), ignore_index=ignore_index, reduction=reduction,
                                label_smoothing=label_smoothing, grad=grad, target=target)
    return run_plan(plan, {"logits": logits, "targets": targets}, target)


def _ce_fwd(logits, targets, static):
    loss, dlogits = _ce_run(logits, targets, static, grad=True)
    return loss, (dlogits,)


def _ce_bwd(static, res, dloss):
    (dlogits,) = res
    target = target_for(dlogits)
    (dlogits,) = run_plan(ce_core.backward_plan(spec(dlogits), spec(dloss), target=target),
                          {"dlogits": dlogits, "dloss": dloss}, target)
    return dlogits, None


_cross_entropy.defvjp(_ce_fwd, _ce_bwd)


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits [T, V] (V up to 262144) against integer targets [T].

    Online log-sum-exp over the vocabulary (no fp32 copy of the logits). reduction: "none"
    ([T] fp32), "sum" or "mean" (a scalar, fp32); targets equal to ignore_index contribute
    nothing, and "mean" divides by the count of the others. Targets outside [0, V) that are
    not ignored raise ValueError when their values are on the host (CPU arrays outside
    jax.jit); on a GPU or under jit such a row's loss and gradient are NaN.

    Under differentiation the gradient is computed in the forward (one more read of each
    row) and kept as the residual; the backward scales it by dloss in place
    (nothing to do when dloss is 1). It is rounded to the logits' dtype before that scaling
    (once more when dloss != 1)."""
    logits, targets = jnp.asarray(logits), jnp.asarray(targets)
    ce_core.check_cross_entropy(spec(logits), spec(targets), ignore_index, reduction, label_smoothing)
    if not isinstance(targets, jax.core.Tracer) and platform_of([targets]) == "cpu":
        ce_core.check_target_values(np.asarray(targets), logits.shape[1], ignore_index)
    return _cross_entropy(logits, targets, (int(ignore_index), reduction, float(label_smoothing)))
