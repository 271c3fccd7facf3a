"""based_attention, based_step, taylor_feature_map: the declarations.

Based linear attention (Arora et al. 2024): linear attention with the second-order Taylor
feature map, phi(q) . phi(k) = 1 + s + s^2 / 2, s = scale q . k. kernels.py (Triton),
plans.py (checks, tiles; the segment split and scan are linear_attention's), reference.py,
cases.py.
"""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.op import Op

from ..linear_attention import pack_state, state_pair
from . import plans, reference


class Based(NamedTuple):
    causal: bool
    scale: object
    eps: float
    output_final_state: bool = False
    exact_state: bool = True
    layout: str = "bhnd"


def based_attention(q, k, v, *, causal=True, scale=None, eps=1e-6, initial_state=None, output_final_state=False,
                    exact_state=True, layout="bhnd"):
    """Based linear attention, o_i = sum_j w_ij v_j / (sum_j w_ij + eps) with
    w_ij = phi(q_i) . phi(k_j) = 1 + s_ij + s_ij^2 / 2, s_ij = scale q_i . k_j.

    Args:
      q, k: [B, H, N, d], d in 1..32; v: [B, H, N, Dv], Dv in 1..256; fp32, fp16 or bf16,
        one dtype and device; any N >= 0 (0: the state passes through); any strides.
      causal: sum over j <= i (default) instead of over all j.
      scale: default 1/sqrt(d); a positive float.
      eps: added to the normaliser.
      initial_state: (S0 [B, H, F, Dv], z0 [B, H, F]) fp32 with F = 1 + d + d^2, in the
        layout of taylor_feature_map (causal only).
      output_final_state: also return the state after the last row.
      exact_state: the state pass multiplies the features unrounded, so the final state is
        the fp32 sum (default); False rounds them to the dot's operand type (bf16; tf32 for
        fp16), as linear_attention(exact_state=False).
      layout: "bhnd" (the shapes above) or "bnhd": q, k, v and o as [B, N, H, D], read and
        written in place through strides (no transpose); states keep their shapes.

    Returns:
      o [B, H, N, Dv] (or [B, N, H, Dv]) in q's dtype, or (o, (S_N, z_N)) with S_N = S0 +
      sum phi(k_j) v_j^T and z_N = z0 + sum phi(k_j), fp32. Differentiable in q, k, v and the
      initial state.
    """
    checks.check_bool("output_final_state", output_final_state)
    checks.check_bool("exact_state", exact_state)
    S0, z0 = state_pair(initial_state, "initial_state")
    return (q, k, v, S0, z0), Based(causal, scale, eps, output_final_state, exact_state, layout)


def _forward(s, st: Based, target):
    init = None if s["init_S"] is None else (s["init_S"], s["init_z"])
    return plans.forward_plan(s["q"], s["k"], s["v"], causal=st.causal, scale=st.scale, eps=st.eps,
                              initial_state=init, target=target, exact_state=st.exact_state,
                              final=st.output_final_state, layout=st.layout)[0]


def _backward(s, st: Based, target):
    plan = plans.backward_plan(s["q"], s["k"], s["v"], s["do"], causal=st.causal, scale=st.scale, eps=st.eps,
                               has_dfinal=s.get("dS_final") is not None, target=target, layout=st.layout)
    return plan.renamed({"dfinal_S": "dS_final", "dfinal_z": "dz_final"})


BASED_ATTENTION = Op(
    based_attention, inputs=("q", "k", "v", "init_S", "init_z"),
    results=("o", "S_final", "z_final", "rden", "S_res", "z_res"),
    returns=lambda st: ("o", "S_final", "z_final") if st.output_final_state else ("o",), pack=pack_state,
    optional=("init_S", "init_z"), optional_cotangents=(("dS_final", "dz_final"),),
    saved=("q", "k", "v", "o", "rden", "S_res", "z_res"),
    differentiable=("q", "k", "v", "init_S", "init_z"), forward=_forward, backward=_backward,
    reference=reference.based_attention, family="based",
    batch=("q", "k", "v", "init_S", "init_z"))


def based_step(q, k, v, state, *, scale=None, eps=1e-6):
    """One causal decoding step that continues based_attention(..., causal=True,
    output_final_state=True).

    Args: q, k: [B, H, d]; v: [B, H, Dv]; state: (S [B, H, F, Dv], z [B, H, F]) fp32.
    Returns: (o [B, H, Dv] in q's dtype, (S1, z1)) with S1 = S + phi(k) v^T, z1 = z + phi(k).
    """
    if state is None:
        raise TypeError("state: expected a pair (S, z), got NoneType")
    S, z = state_pair(state, "state")
    return (q, k, v, S, z), Based(True, scale, eps)


def _step_forward(s, st: Based, target, grad):
    return plans.step_plan(s["q"], s["k"], s["v"], (s["state_S"], s["state_z"]), scale=st.scale, eps=st.eps,
                           target=target, grad=grad)


def _step_backward(s, st: Based, target):
    plan = plans.step_backward_plan(s["q"], s["k"], s["v"], s["do"], scale=st.scale, eps=st.eps, target=target)
    return plan.renamed({"o": "o32", "S_res": "state_S", "z_res": "state_z", "dfinal_S": "dS1", "dfinal_z": "dz1"})


# forward_takes_grad: o is saved in fp32 (o32) when a gradient will be wanted
BASED_STEP = Op(
    based_step, inputs=("q", "k", "v", "state_S", "state_z"), results=("o", "S1", "z1", "rden", "o32"),
    returns=("o", "S1", "z1"), pack=pack_state, saved=("q", "k", "v", "o32", "rden", "state_S", "state_z"),
    forward_takes_grad=True, differentiable=("q", "k", "v", "state_S", "state_z"), forward=_step_forward,
    backward=_step_backward, reference=reference.based_step, family="based",
    batch=("q", "k", "v", "state_S", "state_z"))


def taylor_feature_map(x, *, scale=None):
    """The Taylor feature map of Based, phi(x) = [1, x sqrt(scale), vec(x x^T) scale / sqrt(2)]
    (row-major outer product), so that phi(q) . phi(k) = 1 + s + s^2 / 2, s = scale q . k.

    Args: x [..., d], d in 1..32, fp32/fp16/bf16; scale: default 1/sqrt(d).
    Returns: [..., 1 + d + d^2] in x's dtype; differentiable.
    """
    return (x,), scale


TAYLOR_FEATURE_MAP = Op(
    taylor_feature_map, inputs=("x",), results=("y",), saved=("x",), differentiable=("x",),
    forward=lambda s, scale, target: plans.taylor_plan(s["x"], scale=scale, target=target),
    backward=lambda s, scale, target: plans.taylor_backward_plan(s["x"], s["dy"], scale=scale, target=target),
    reference=reference.taylor_feature_map, family="based", batch=("x",),
    batch_min_rank=2)

OPS = (TAYLOR_FEATURE_MAP, BASED_ATTENTION, BASED_STEP)
