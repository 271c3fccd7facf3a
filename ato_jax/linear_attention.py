"""Linear attention for JAX: elu_plus_one, linear_attention, linear_attention_step.

Each op is a jax.custom_vjp whose forward and backward run ato_core plans; all work
under jax.jit and jax.grad. Same names, arguments and results as ato_torch.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ato_core import checks
from ato_core import feature_maps as fm_core
from ato_core import linear_attention as core

from .launcher import run_plan, spec, target_for


@jax.custom_vjp
def _elu_plus_one(x):
    target = target_for(x)
    return run_plan(fm_core.elu_plus_one_plan(spec(x), target), {"x": x}, target)[0]


def _elu_fwd(x):
    return _elu_plus_one(x), x


def _elu_bwd(x, dy):
    target = target_for(x)
    plan = fm_core.elu_plus_one_backward_plan(spec(x), spec(dy), target)
    return (run_plan(plan, {"x": x, "dy": dy}, target)[0],)


_elu_plus_one.defvjp(_elu_fwd, _elu_bwd)


def elu_plus_one(x: jax.Array) -> jax.Array:
    """ELU(x) + 1, elementwise, any shape; differentiable. Same dtype and shape as x."""
    x = jnp.asarray(x)
    checks.check_float("x", spec(x))
    return _elu_plus_one(x)


def _state_specs(state, name="initial_state"):
    if state is None:
        return None
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise TypeError(f"{name}: expected a pair (S, z), got {type(state).__name__}")
    return (spec(jnp.asarray(state[0])), spec(jnp.asarray(state[1])))


# static = (causal, feature_map, eps, output_final_state, has_init)
@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _linear_attention(q, k, v, init, static):
    return _la_fwd(q, k, v, init, static)[0]


def _la_fwd(q, k, v, init, static):
    causal, feature_map, eps, output_final_state, has_init = static
    target = target_for(q, k, v)
    init_specs = (spec(init[0]), spec(init[1])) if has_init else None
    plan, _ = core.forward_plan(spec(q), spec(k), spec(v), causal=causal, feature_map=feature_map, eps=eps,
                                initial_state=init_specs, target=target)
    S0, z0 = init if has_init else (None, None)
    o, S_final, z_final, rden, S_res, z_res = run_plan(
        plan, {"q": q, "k": k, "v": v, "init_S": S0, "init_z": z0}, target)
    out = (o, (S_final, z_final)) if output_final_state else o
    return out, (q, k, v, o, rden, S_res, z_res)


def _la_bwd(static, res, cotangent):
    causal, feature_map, eps, output_final_state, has_init = static
    q, k, v, o, rden, S_res, z_res = res
    if output_final_state:
        do, (dS_final, dz_final) = cotangent
    else:
        do, dS_final, dz_final = cotangent, None, None
    target = target_for(q, k, v)
    plan = core.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=causal, feature_map=feature_map,
                              eps=eps, has_dfinal=output_final_state, target=target)
    dq, dk, dv, dS0, dz0 = run_plan(plan, {
        "q": q, "k": k, "v": v, "o": o, "do": do, "rden": rden, "S_res": S_res, "z_res": z_res,
        "dfinal_S": dS_final, "dfinal_z": dz_final}, target)
    return dq, dk, dv, ((dS0, dz0) if has_init else None)


_linear_attention.defvjp(_la_fwd, _la_bwd)


def linear_attention(q, k, v, *, causal=False, feature_map=None, eps=1e-6, initial_state=None,
                     output_final_state=False):
    """Linear attention, o_i = phi(q_i) S_i / (phi(q_i) . z_i + eps).

    Args:
      q, k: [B, H, N, Dk]; v: [B, H, N, Dv]; fp32, fp16 or bf16, one dtype.
        Dk, Dv in 1..256; any N >= 1.
      causal: sum over j <= i (chunked kernels) instead of over all j.
      feature_map: None (q, k are already non-negative features) or "elu" (ELU+1 applied
        inside the kernels).
      eps: added to the normaliser.
      initial_state: (S0 [B, H, Dk, Dv], z0 [B, H, Dk]) fp32, causal only.
      output_final_state: also return the state after the last row.

    Returns:
      o [B, H, N, Dv] in q's dtype, or (o, (S_N, z_N)) with fp32 states. Differentiable
      with respect to q, k, v and the initial state; works under jax.jit.
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    init = _state_specs(initial_state)
    core.check_linear_attention(spec(q), spec(k), spec(v), causal=causal, feature_map=feature_map, eps=eps,
                                initial_state=init)
    if initial_state is not None:
        initial_state = (jnp.asarray(initial_state[0]), jnp.asarray(initial_state[1]))
    static = (causal, feature_map, float(eps), bool(output_final_state), initial_state is not None)
    return _linear_attention(q, k, v, initial_state, static)


# static = (feature_map, eps)
@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _step(q, k, v, state, static):
    return _step_fwd(q, k, v, state, static)[0]


def _step_fwd(q, k, v, state, static):
    feature_map, eps = static
    target = target_for(q, k, v)
    S, z = state
    plan = core.step_plan(spec(q), spec(k), spec(v), (spec(S), spec(z)), feature_map=feature_map, eps=eps,
                          target=target)
    o, S1, z1, rden = run_plan(plan, {"q": q, "k": k, "v": v, "state_S": S, "state_z": z}, target)
    return (o, (S1, z1)), (q, k, v, o, rden, S, z)


def _step_bwd(static, res, cotangent):
    feature_map, eps = static
    q, k, v, o, rden, S, z = res
    do, (dS1, dz1) = cotangent
    target = target_for(q, k, v)
    plan = core.step_backward_plan(spec(q), spec(k), spec(v), spec(do), feature_map=feature_map, eps=eps,
                                   target=target)
    dq, dk, dv, dS, dz = run_plan(plan, {
        "q": q, "k": k, "v": v, "o": o, "do": do, "rden": rden, "S_res": S, "z_res": z,
        "dfinal_S": dS1, "dfinal_z": dz1}, target)
    return dq, dk, dv, (dS, dz)


_step.defvjp(_step_fwd, _step_bwd)


def linear_attention_step(q, k, v, state, *, feature_map=None, eps=1e-6):
    """One causal decoding step that continues linear_attention(..., causal=True,
    output_final_state=True).

    Args: q, k: [B, H, Dk]; v: [B, H, Dv]; state: (S [B, H, Dk, Dv], z [B, H, Dk]) fp32.
    Returns: (o [B, H, Dv] in q's dtype, (S1, z1)) with S1 = S + phi(k) v^T, z1 = z + phi(k).
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    specs = _state_specs(state, "state")
    core.check_step(spec(q), spec(k), spec(v), specs, feature_map, eps)
    state = (jnp.asarray(state[0]), jnp.asarray(state[1]))
    return _step(q, k, v, state, (feature_map, float(eps)))
