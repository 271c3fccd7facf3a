"""Fused transformer ops for PyTorch: layer_norm, rms_norm, dropout_residual_layer_norm,
softmax, rope, swiglu, cross_entropy. Each is a torch.autograd.Function over ato_core plans
(ato_core/norms.py, softmax.py, rope.py, swiglu.py, cross_entropy.py)."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ato_core import cross_entropy as ce_core
from ato_core import norms as norm_core
from ato_core import rope as rope_core
from ato_core import softmax as softmax_core
from ato_core import swiglu as swiglu_core

from .launcher import run_plan, spec, target_for


def _spec(t):
    return None if t is None else spec(t)


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, bias, rms, eps, p, seed):
        target = target_for(x)
        plan = norm_core.forward_plan(spec(x), _spec(residual), _spec(weight), _spec(bias), rms=rms, eps=eps, p=p,
                                      seed=seed, target=target)
        y, h, mean, rstd = run_plan(plan, {"x": x, "residual": residual, "weight": weight, "bias": bias}, target)
        ctx.save_for_backward(h if residual is not None else x, weight, bias, mean, rstd)
        ctx.args = (rms, p, seed, residual is not None)
        ctx.set_materialize_grads(False)
        if residual is None:
            return y, None
        return y, h

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dh):
        hx, weight, bias, mean, rstd = ctx.saved_tensors
        rms, p, seed, has_res = ctx.args
        dy = torch.zeros_like(hx) if dy is None else dy
        target = target_for(hx)
        plan = norm_core.backward_plan(spec(hx), _spec(weight), _spec(bias), rms=rms, has_residual=has_res,
                                       has_dh=dh is not None, p=p, seed=seed, target=target)
        dx, dres, dw, db = run_plan(plan, {"hx": hx, "weight": weight, "dy": dy, "dh": dh, "mean": mean,
                                           "rstd": rstd}, target)
        return (dx, dres if has_res else None, dw if weight is not None else None, db if bias is not None else None,
                None, None, None, None)


def layer_norm(x, weight=None, bias=None, *, eps=1e-5):
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

    x: any shape [..., N], N in 1..65536, fp32/fp16/bf16 (fp32 statistics); weight, bias:
    [N] or None. Returns y (x's shape and dtype); differentiable in x, weight and bias
    (weight and bias gradients reduced in a fixed order: deterministic)."""
    norm_core.check_norm("x", spec(x), _spec(weight), _spec(bias), eps)
    return _Norm.apply(x, None, weight, bias, False, float(eps), 0.0, 0)[0]


def rms_norm(x, weight=None, *, eps=1e-6):
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. Shapes as layer_norm."""
    norm_core.check_norm("x", spec(x), _spec(weight), None, eps)
    return _Norm.apply(x, None, weight, None, True, float(eps), 0.0, 0)[0]


def dropout_residual_layer_norm(x, residual, weight, bias, *, p=0.0, seed=0, eps=1e-5, training=True):
    """h = dropout(x) + residual and y = layer_norm(h); returns (y, h).

    x, residual: [..., N] of one dtype; weight, bias: [N] or None. Dropout (training and
    p > 0) keeps an element iff Philox U(0,1) on (seed, its flat index) is >= p and scales
    it by 1/(1-p): the same seed gives the same mask in both frameworks, on CPU and GPU;
    the backward draws it again (no mask is stored). p in [0, 1), seed in [0, 2**31)."""
    norm_core.check_norm("x", spec(x), _spec(weight), _spec(bias), eps)
    p = norm_core.check_dropout(p, seed, training)
    return _Norm.apply(x, residual, weight, bias, False, float(eps), p, int(seed))


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, temperature):
        target = target_for(x)
        (y,) = run_plan(softmax_core.forward_plan(spec(x), temperature=temperature, target=target), {"x": x}, target)
        ctx.save_for_backward(y)
        ctx.temperature = temperature
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        target = target_for(y)
        plan = softmax_core.backward_plan(spec(y), temperature=ctx.temperature, target=target)
        return run_plan(plan, {"y": y, "dy": dy}, target)[0], None


def softmax(x, *, temperature=1.0):
    """softmax(x / temperature) over the last axis, any width (online past 8192). The
    backward uses the output alone."""
    softmax_core.check_softmax(spec(x), temperature)
    return _Softmax.apply(x, float(temperature))


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        target = target_for(gate)
        (y,) = run_plan(swiglu_core.forward_plan(spec(gate), spec(up), target=target), {"gate": gate, "up": up}, target)
        ctx.save_for_backward(gate, up)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        target = target_for(gate)
        return run_plan(swiglu_core.backward_plan(spec(gate), target=target), {"gate": gate, "up": up, "dy": dy},
                        target)


def swiglu(gate, up):
    """silu(gate) * up, elementwise; gate and up of one shape and dtype."""
    swiglu_core.check_swiglu(spec(gate), spec(up))
    return _SwiGLU.apply(gate, up)


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, interleaved):
        target = target_for(q)
        plan = rope_core.plan(spec(q), spec(k), spec(cos), spec(sin), _spec(positions), interleaved=interleaved,
                              inverse=False, target=target)
        out = run_plan(plan, {"q": q, "k": k, "cos": cos, "sin": sin, "positions": positions}, target)
        ctx.save_for_backward(cos, sin, positions)
        ctx.interleaved = interleaved
        ctx.shapes = (tuple(q.shape), tuple(k.shape))
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dq, dk):
        cos, sin, positions = ctx.saved_tensors
        if dq is None and dk is None:
            return (None,) * 6
        ref = dq if dq is not None else dk
        dq = torch.zeros(ctx.shapes[0], dtype=ref.dtype, device=ref.device) if dq is None else dq
        dk = torch.zeros(ctx.shapes[1], dtype=ref.dtype, device=ref.device) if dk is None else dk
        target = target_for(dq)
        plan = rope_core.plan(spec(dq), spec(dk), spec(cos), spec(sin), _spec(positions), interleaved=ctx.interleaved,
                              inverse=True, target=target)
        gq, gk = run_plan(plan, {"q": dq, "k": dk, "cos": cos, "sin": sin, "positions": positions}, target)
        return gq, gk, None, None, None, None


def rope(q, k, cos, sin, *, positions=None, interleaved=False):
    """Rotary position embedding of q [B, Hq, N, D] and k [B, Hkv, N, D] (D even).

    cos, sin: [max_positions, D/2]; positions: [B, N] integer (default 0..N-1, e.g. offsets
    when decoding). interleaved=False rotates (x[i], x[i + D/2]) (LLaMA); True rotates
    (x[2i], x[2i+1]) (GPT-J). Returns new (q_rot, k_rot). Differentiable in q and k; cos
    and sin are constants (no gradient). A position outside [0, max_positions) gives zeros."""
    rope_core.check_rope(spec(q), spec(k), spec(cos), spec(sin), _spec(positions), interleaved)
    return _Rope.apply(q, k, cos, sin, positions, interleaved)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction, label_smoothing):
        target = target_for(logits)
        plan = ce_core.forward_plan(spec(logits), spec(targets), ignore_index=ignore_index, reduction=reduction,
                                    label_smoothing=label_smoothing, target=target)
        loss, lse, count = run_plan(plan, {"logits": logits, "targets": targets}, target)
        ctx.save_for_backward(logits, targets, lse, count)
        ctx.args = (ignore_index, reduction, label_smoothing)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, dloss):
        logits, targets, lse, count = ctx.saved_tensors
        ignore_index, reduction, label_smoothing = ctx.args
        target = target_for(logits)
        plan = ce_core.backward_plan(spec(logits), spec(targets), ignore_index=ignore_index, reduction=reduction,
                                     label_smoothing=label_smoothing, target=target)
        (dlogits,) = run_plan(plan, {"logits": logits, "targets": targets, "lse": lse, "dloss": dloss,
                                     "count": count}, target)
        return dlogits, None, None, None, None


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits [T, V] (V up to 262144) against integer targets [T].

    Online log-sum-exp over the vocabulary (no fp32 copy of the logits); the gradient is
    written in the logits' dtype. Targets equal to ignore_index contribute nothing, and
    "mean" divides by the count of the others. reduction: "none" ([T] fp32), "sum" or
    "mean" (a scalar, fp32). Targets outside [0, V) that are not ignored raise ValueError."""
    ce_core.check_cross_entropy(spec(logits), spec(targets), ignore_index, reduction, label_smoothing)
    ce_core.check_target_values(targets.cpu().numpy(), logits.shape[1], ignore_index)
    return _CrossEntropy.apply(logits, targets, int(ignore_index), reduction, float(label_smoothing))
