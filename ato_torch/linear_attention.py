"""Linear attention for PyTorch: elu_plus_one, linear_attention, linear_attention_step.

Each op is a torch.autograd.Function whose forward and backward run ato_core plans.
"""

from __future__ import annotations

import torch

from ato_core import feature_maps as fm_core
from ato_core import linear_attention as core

from .launcher import once_differentiable, run_plan, spec, target_for


class _EluPlusOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        target = target_for(x)
        (y,) = run_plan(fm_core.elu_plus_one_plan(spec(x), target), {"x": x}, target)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        target = target_for(x)
        plan = fm_core.elu_plus_one_backward_plan(spec(x), spec(dy), target)
        (dx,) = run_plan(plan, {"x": x, "dy": dy}, target)
        return dx


def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """ELU(x) + 1, elementwise, any shape; differentiable. Same dtype and shape as x."""
    fm_core.checks.check_float("x", spec(x))
    return _EluPlusOne.apply(x)


def _state_specs(state):
    if state is None:
        return None
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise TypeError(f"initial_state: expected a pair (S, z), got {type(state).__name__}")
    return (spec(state[0]), spec(state[1]))


class _LinearAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, S0, z0, causal, feature_map, eps):
        target = target_for(q)
        init = None if S0 is None else (spec(S0), spec(z0))
        plan, _ = core.forward_plan(spec(q), spec(k), spec(v), causal=causal, feature_map=feature_map, eps=eps,
                                    initial_state=init, target=target)
        o, S_final, z_final, rden, S_res, z_res = run_plan(
            plan, {"q": q, "k": k, "v": v, "init_S": S0, "init_z": z0}, target)
        ctx.save_for_backward(q, k, v, o, rden, S_res, z_res)
        ctx.args = (causal, feature_map, eps, S0 is not None)
        ctx.set_materialize_grads(False)
        return o, S_final, z_final

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dS_final, dz_final):
        q, k, v, o, rden, S_res, z_res = ctx.saved_tensors
        causal, feature_map, eps, has_init = ctx.args
        do = torch.zeros_like(o) if do is None else do
        has_dfinal = dS_final is not None or dz_final is not None
        if has_dfinal:
            B, H, _, Dk = q.shape
            Dv = v.shape[-1]
            dS_final = q.new_zeros((B, H, Dk, Dv), dtype=torch.float32) if dS_final is None else dS_final
            dz_final = q.new_zeros((B, H, Dk), dtype=torch.float32) if dz_final is None else dz_final
        target = target_for(q)
        plan = core.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, feature_map=feature_map,
                                  eps=eps, has_dfinal=has_dfinal, target=target)
        dq, dk, dv, dS0, dz0 = run_plan(plan, {
            "q": q, "k": k, "v": v, "o": o, "do": do, "rden": rden, "S_res": S_res, "z_res": z_res,
            "dfinal_S": dS_final, "dfinal_z": dz_final}, target)
        if not has_init:
            dS0 = dz0 = None
        return dq, dk, dv, dS0, dz0, None, None, None


def linear_attention(q, k, v, *, causal=False, feature_map=None, eps=1e-6, initial_state=None,
                     output_final_state=False):
    """Linear attention, o_i = phi(q_i) S_i / (phi(q_i) . z_i + eps).

    Args:
      q, k: [B, H, N, Dk]; v: [B, H, N, Dv]; fp32, fp16 or bf16, one dtype and device.
        Dk, Dv in 1..256; any N >= 1; any strides (a transposed [B, N, H, D] view works).
      causal: sum over j <= i (chunked kernels) instead of over all j.
      feature_map: None (q, k are already non-negative features) or "elu" (ELU+1 applied
        inside the kernels).
      eps: added to the normaliser.
      initial_state: (S0 [B, H, Dk, Dv], z0 [B, H, Dk]) fp32, causal only.
      output_final_state: also return the state after the last row.

    Returns:
      o [B, H, N, Dv] in q's dtype, or (o, (S_N, z_N)) with fp32 states. Differentiable
      with respect to q, k, v and the initial state.
    """
    init = _state_specs(initial_state)
    core.check_linear_attention(spec(q), spec(k), spec(v), causal=causal, feature_map=feature_map, eps=eps,
                                initial_state=init)
    S0, z0 = (None, None) if initial_state is None else initial_state
    o, S, z = _LinearAttention.apply(q, k, v, S0, z0, causal, feature_map, float(eps))
    return (o, (S, z)) if output_final_state else o


class _LinearAttentionStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, S, z, feature_map, eps):
        target = target_for(q)
        plan = core.step_plan(spec(q), spec(k), spec(v), (spec(S), spec(z)), feature_map=feature_map, eps=eps,
                              target=target)
        o, S1, z1, rden = run_plan(plan, {"q": q, "k": k, "v": v, "state_S": S, "state_z": z}, target)
        ctx.save_for_backward(q, k, v, o, rden, S, z)
        ctx.args = (feature_map, eps)
        ctx.set_materialize_grads(False)
        return o, S1, z1

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dS1, dz1):
        q, k, v, o, rden, S, z = ctx.saved_tensors
        feature_map, eps = ctx.args
        do = torch.zeros_like(o) if do is None else do
        dS1 = torch.zeros_like(S, dtype=torch.float32) if dS1 is None else dS1
        dz1 = torch.zeros_like(z, dtype=torch.float32) if dz1 is None else dz1
        target = target_for(q)
        plan = core.step_backward_plan(spec(q), spec(k), spec(v), spec(do), feature_map=feature_map, eps=eps,
                                       target=target)
        dq, dk, dv, dS, dz = run_plan(plan, {
            "q": q, "k": k, "v": v, "o": o, "do": do, "rden": rden, "S_res": S, "z_res": z,
            "dfinal_S": dS1, "dfinal_z": dz1}, target)
        return dq, dk, dv, dS, dz, None, None


def linear_attention_step(q, k, v, state, *, feature_map=None, eps=1e-6):
    """One causal decoding step that continues linear_attention(..., causal=True,
    output_final_state=True).

    Args: q, k: [B, H, Dk]; v: [B, H, Dv]; state: (S [B, H, Dk, Dv], z [B, H, Dk]) fp32.
    Returns: (o [B, H, Dv] in q's dtype, (S1, z1)) with S1 = S + phi(k) v^T, z1 = z + phi(k).
    """
    specs = _state_specs(state)
    core.check_step(spec(q), spec(k), spec(v), specs, feature_map, eps)
    o, S1, z1 = _LinearAttentionStep.apply(q, k, v, state[0], state[1], feature_map, float(eps))
    return o, (S1, z1)
