"""Fused transformer ops for PyTorch: layer_norm, rms_norm, dropout_residual_layer_norm,
softmax, rope, swiglu, cross_entropy. Each is a torch.autograd.Function over ato_core plans
(ato_core/norms.py, softmax.py, rope.py, swiglu.py, cross_entropy.py)."""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from ato_core import cross_entropy as ce_core
from ato_core import norms as norm_core
from ato_core import rope as rope_core
from ato_core import softmax as softmax_core
from ato_core import swiglu as swiglu_core

from .launcher import once_differentiable, run_plan, spec, target_for


def _spec(t):
    return None if t is None else spec(t)


def _needs_grad(*tensors) -> bool:
    """Whether autograd would record an op on these tensors (None entries ignored), or a
    forward-AD level is open (dual tensors: the Function raises that it has no jvp rule,
    where a plain call would drop the tangent). When not, the ops run their plan without a
    torch.autograd.Function, whose bookkeeping costs as much host time as the rest of the call."""
    if getattr(forward_ad, "_current_level", -1) >= 0:
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, bias, meta):
        plan, target = meta[:2]
        y, h, mean, rstd = run_plan(plan, {"x": x, "residual": residual, "weight": weight, "bias": bias}, target)
        ctx.save_for_backward(h if residual is not None else x, weight, mean, rstd)  # bias: not needed
        ctx.meta = meta
        if residual is None:
            return y
        ctx.set_materialize_grads(False)
        return y, h

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dh=None):
        hx, weight, mean, rstd = ctx.saved_tensors
        plan, target, bias_spec, rms, p, seed, has_res = ctx.meta
        dy = torch.zeros_like(hx) if dy is None else dy
        has_dh = dh is not None
        # hx: x (as the forward plan saw it) or h (a fresh buffer of the plan): the same spec every call
        bwd = plan.memoised(("backward", has_dh), lambda: norm_core.backward_plan(
            spec(hx), _spec(weight), bias_spec, rms=rms, has_residual=has_res, has_dh=has_dh, p=p, seed=seed,
            target=target))
        dx, dres, dw, db = run_plan(bwd, {"hx": hx, "weight": weight, "dy": dy, "dh": dh, "mean": mean,
                                          "rstd": rstd}, target)
        return (dx, dres if has_res else None, dw if weight is not None else None,
                db if bias_spec is not None else None, None)


def _norm(x, residual, weight, bias, rms, eps, p, seed):
    """(y, h): h is None without a residual."""
    # The plan is built (and the arguments checked, on its first use) out here, once per call.
    target = target_for(x)
    bias_spec = _spec(bias)
    plan = norm_core.forward_plan(spec(x), _spec(residual), _spec(weight), bias_spec, rms=rms, eps=eps, p=p,
                                  seed=seed, target=target)
    if not _needs_grad(x, residual, weight, bias):
        y, h = run_plan(plan, {"x": x, "residual": residual, "weight": weight, "bias": bias}, target)[:2]
        return y, (h if residual is not None else None)
    out = _Norm.apply(x, residual, weight, bias, (plan, target, bias_spec, rms, p, seed, residual is not None))
    return out if residual is not None else (out, None)


def layer_norm(x, weight=None, bias=None, *, eps=1e-5):
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

    x: any shape [..., N], N in 1..65536, fp32/fp16/bf16 (fp32 statistics); weight, bias:
    [N] or None. Returns y (x's shape and dtype); differentiable in x, weight and bias
    (weight and bias gradients reduced in a fixed order: deterministic)."""
    return _norm(x, None, weight, bias, False, eps, 0.0, 0)[0]


def rms_norm(x, weight=None, *, eps=1e-6):
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. Shapes as layer_norm."""
    return _norm(x, None, weight, None, True, eps, 0.0, 0)[0]


def dropout_residual_layer_norm(x, residual, weight, bias, *, p=0.0, seed=0, eps=1e-5, training=True):
    """h = dropout(x) + residual and y = layer_norm(h); returns (y, h).

    x, residual: [..., N] of one dtype; weight, bias: [N] or None. Dropout (training and
    p > 0) keeps an element iff Philox U(0,1) on (seed, its flat index) is >= p and scales
    it by 1/(1-p): the same seed gives the same mask in both frameworks, on CPU and GPU;
    the backward draws it again (no mask is stored). p in [0, 1), seed in [0, 2**31)."""
    p = norm_core.check_dropout(p, seed, training)  # the plan checks the rest
    return _norm(x, residual, weight, bias, False, eps, p, seed)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, meta):
        plan, target, temperature = meta
        (y,) = run_plan(plan, {"x": x}, target)
        ctx.save_for_backward(y)
        ctx.meta = meta
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        plan, target, temperature = ctx.meta
        bwd = plan.memoised("backward", lambda: softmax_core.backward_plan(spec(y), temperature=temperature,
                                                                         target=target))
        return run_plan(bwd, {"y": y, "dy": dy}, target)[0], None


def softmax(x, *, temperature=1.0):
    """softmax(x / temperature) over the last axis, any width (online past 8192). The
    backward uses the output alone."""
    target = target_for(x)
    plan = softmax_core.forward_plan(spec(x), temperature=temperature, target=target)
    if not _needs_grad(x):
        return run_plan(plan, {"x": x}, target)[0]
    return _Softmax.apply(x, (plan, target, temperature))


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, meta):
        plan, target = meta
        (y,) = run_plan(plan, {"gate": gate, "up": up}, target)
        ctx.save_for_backward(gate, up)
        ctx.meta = meta
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        plan, target = ctx.meta
        bwd = plan.memoised("backward", lambda: swiglu_core.backward_plan(spec(gate), target=target))
        return (*run_plan(bwd, {"gate": gate, "up": up, "dy": dy}, target), None)


def swiglu(gate, up):
    """silu(gate) * up, elementwise; gate and up of one shape and dtype."""
    target = target_for(gate)
    plan = swiglu_core.forward_plan(spec(gate), spec(up), target=target)
    if not _needs_grad(gate, up):
        return run_plan(plan, {"gate": gate, "up": up}, target)[0]
    return _SwiGLU.apply(gate, up, (plan, target))


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, plan, target, interleaved):
        out = run_plan(plan, {"q": q, "k": k, "cos": cos, "sin": sin, "positions": positions}, target)
        ctx.save_for_backward(cos, sin, positions)
        ctx.args = (target, interleaved, tuple(q.shape), tuple(k.shape))
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dq, dk):
        cos, sin, positions = ctx.saved_tensors
        target, interleaved, q_shape, k_shape = ctx.args
        if dq is None and dk is None:
            return (None,) * 8
        ref = dq if dq is not None else dk
        dq = torch.zeros(q_shape, dtype=ref.dtype, device=ref.device) if dq is None else dq
        dk = torch.zeros(k_shape, dtype=ref.dtype, device=ref.device) if dk is None else dk
        plan = rope_core.plan(spec(dq), spec(dk), spec(cos), spec(sin), _spec(positions), interleaved=interleaved,
                              inverse=True, target=target)
        gq, gk = run_plan(plan, {"q": dq, "k": dk, "cos": cos, "sin": sin, "positions": positions}, target)
        return gq, gk, None, None, None, None, None, None


def rope(q, k, cos, sin, *, positions=None, interleaved=False):
    """Rotary position embedding of q [B, Hq, N, D] and k [B, Hkv, N, D] (D even).

    cos, sin: [max_positions, D/2]; positions: [B, N] integer (default 0..N-1, e.g. offsets
    when decoding). interleaved=False rotates (x[i], x[i + D/2]) (LLaMA); True rotates
    (x[2i], x[2i+1]) (GPT-J). Returns new (q_rot, k_rot). Differentiable in q and k; cos
    and sin are constants (no gradient). A position outside [0, max_positions) gives zeros."""
    target = target_for(q)
    plan = rope_core.plan(spec(q), spec(k), spec(cos), spec(sin), _spec(positions), interleaved=interleaved,
                          inverse=False, target=target)
    if not _needs_grad(q, k):
        return run_plan(plan, {"q": q, "k": k, "cos": cos, "sin": sin, "positions": positions}, target)
    return _Rope.apply(q, k, cos, sin, positions, plan, target, interleaved)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, plan, target, grad):
        loss, dlogits = run_plan(plan, {"logits": logits, "targets": targets}, target)
        # An intermediate of ours, not saved_tensors: the backward hands this very buffer over
        # (None where the plan computed no gradient: its dlogits is then a placeholder).
        ctx.dlogits = dlogits if grad else None
        ctx.target = target
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, dloss):
        dlogits, ctx.dlogits = ctx.dlogits, None
        if dlogits is None:
            raise RuntimeError("ato_torch.cross_entropy: backward called a second time (retain_graph). The gradient "
                               "is computed in the forward and handed to the first backward, scaled in place; "
                               "compute the loss again for another backward.")
        (dlogits,) = run_plan(ce_core.backward_plan(spec(dlogits), spec(dloss), target=ctx.target),
                              {"dlogits": dlogits, "dloss": dloss}, ctx.target)
        return dlogits, None, None, None, None


def cross_entropy(logits, targets, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits [T, V] (V up to 262144) against integer targets [T].

    Online log-sum-exp over the vocabulary (no fp32 copy of the logits). reduction: "none"
    ([T] fp32), "sum" or "mean" (a scalar, fp32); targets equal to ignore_index contribute
    nothing, and "mean" divides by the count of the others. Targets outside [0, V) that are
    not ignored raise ValueError for CPU tensors; on a GPU (where checking would cost a
    synchronisation every call) such a row's loss and gradient are NaN.

    When logits require grad, the gradient is computed in the forward (one more read of
    each row) and held until the backward, which scales it by dloss in place
    (nothing to do for ``loss.backward()``): [T, V] in the logits' dtype, the memory the
    backward would allocate anyway. The gradient is rounded to the logits' dtype before that
    scaling (once more when dloss != 1), and the graph allows one backward: a second
    (retain_graph) raises RuntimeError."""
    grad = torch.is_grad_enabled() and logits.requires_grad
    target = target_for(logits)
    plan = ce_core.forward_plan(spec(logits), spec(targets), ignore_index=ignore_index, reduction=reduction,
                                label_smoothing=label_smoothing, grad=grad, target=target)
    if targets.device.type == "cpu":
        ce_core.check_target_values(targets.numpy(), logits.shape[1], ignore_index)
    if not _needs_grad(logits):  # (grad is False then too)
        return run_plan(plan, {"logits": logits, "targets": targets}, target)[0]
    return _CrossEntropy.apply(logits, targets, plan, target, grad)
