"""linear_attention, linear_attention_step, elu_plus_one: the declarations.

kernels.py (Triton: chunked state, scan and output passes), feature_maps.py (the feature
maps as Triton helpers, and elu_plus_one's kernels), plans.py (checks, segments, tiles),
reference.py, cases.py.
"""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.op import Op

from . import plans, reference


class LA(NamedTuple):
    causal: bool
    feature_map: object
    eps: float
    output_final_state: bool = False
    exact_state: bool = True
    layout: str = "bhnd"


def state_pair(state, name):
    """(S, z) of a state argument (None: (None, None)); a TypeError naming it otherwise."""
    if state is None:
        return None, None
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise TypeError(f"{name}: expected a pair (S, z), got {type(state).__name__}")
    return state[0], state[1]


def linear_attention(q, k, v, *, causal=False, feature_map=None, eps=1e-6, initial_state=None,
                     output_final_state=False, exact_state=True, layout="bhnd"):
    """Linear attention, o_i = phi(q_i) S_i / (phi(q_i) . z_i + eps).

    Args:
      q, k: [B, H, N, Dk]; v: [B, H, N, Dv]; fp32, fp16 or bf16, one dtype and device.
        Dk, Dv in 1..256; any N >= 0 (0: the state passes through); any strides (torch: a
        transposed [B, N, H, D] view works).
      causal: sum over j <= i (chunked kernels) instead of over all j.
      feature_map: None (q, k are already non-negative features) or "elu" (ELU+1 applied
        inside the kernels).
      eps: added to the normaliser.
      initial_state: (S0 [B, H, Dk, Dv], z0 [B, H, Dk]) fp32, causal only.
      output_final_state: also return the state after the last row.
      exact_state: the state pass multiplies phi(k) unrounded, so the final state is the fp32
        sum (default). False rounds phi(k) to the dot's operand type (bf16; tf32 for fp16),
        as the output pass does: a faster forward (H100, B8 H16 N4096 D64 bf16: causal 254
        against 294 us), a final state about 2e-3 relative off in bf16.
      layout: "bhnd" (the shapes above) or "bnhd": q, k, v and o as [B, N, H, D], read and
        written in place through strides (no transpose); states keep their shapes.

    Returns:
      o [B, H, N, Dv] (or [B, N, H, Dv]) in q's dtype, or (o, (S_N, z_N)) with fp32 states.
      Differentiable with respect to q, k, v and the initial state.
    """
    checks.check_bool("output_final_state", output_final_state)
    checks.check_bool("exact_state", exact_state)
    S0, z0 = state_pair(initial_state, "initial_state")
    return (q, k, v, S0, z0), LA(causal, feature_map, eps, output_final_state, exact_state, layout)


def _la_forward(s, st: LA, target):
    init = None if s["init_S"] is None else (s["init_S"], s["init_z"])
    return plans.forward_plan(s["q"], s["k"], s["v"], causal=st.causal, feature_map=st.feature_map, eps=st.eps,
                              initial_state=init, target=target, exact_state=st.exact_state, layout=st.layout)[0]


def _la_backward(s, st: LA, target):
    plan = plans.backward_plan(s["q"], s["k"], s["v"], s["do"], causal=st.causal, feature_map=st.feature_map,
                               eps=st.eps, has_dfinal=s.get("dS_final") is not None, target=target,
                               layout=st.layout)
    return plan.renamed({"dfinal_S": "dS_final", "dfinal_z": "dz_final"})


def pack_state(static, outs):
    """o, or (o, (S, z)): what the ops with a state return."""
    return (outs[0], tuple(outs[1:])) if len(outs) == 3 else outs[0]


LINEAR_ATTENTION = Op(
    linear_attention, inputs=("q", "k", "v", "init_S", "init_z"),
    results=("o", "S_final", "z_final", "rden", "S_res", "z_res"),
    returns=lambda st: ("o", "S_final", "z_final") if st.output_final_state else ("o",), pack=pack_state,
    optional=("init_S", "init_z"), optional_cotangents=(("dS_final", "dz_final"),),
    saved=("q", "k", "v", "o", "rden", "S_res", "z_res"),
    differentiable=("q", "k", "v", "init_S", "init_z"), forward=_la_forward, backward=_la_backward,
    reference=reference.linear_attention, family="linear_attention",
    batch=("q", "k", "v", "init_S", "init_z"))


def linear_attention_step(q, k, v, state, *, feature_map=None, eps=1e-6):
    """One causal decoding step that continues linear_attention(..., causal=True,
    output_final_state=True).

    Args: q, k: [B, H, Dk]; v: [B, H, Dv]; state: (S [B, H, Dk, Dv], z [B, H, Dk]) fp32.
    Returns: (o [B, H, Dv] in q's dtype, (S1, z1)) with S1 = S + phi(k) v^T, z1 = z + phi(k).
    """
    if state is None:
        raise TypeError("state: expected a pair (S, z), got NoneType")
    S, z = state_pair(state, "state")
    return (q, k, v, S, z), LA(True, feature_map, eps)


def _step_forward(s, st: LA, target, grad):
    return plans.step_plan(s["q"], s["k"], s["v"], (s["state_S"], s["state_z"]), feature_map=st.feature_map,
                           eps=st.eps, target=target, grad=grad)


def _step_backward(s, st: LA, target):
    plan = plans.step_backward_plan(s["q"], s["k"], s["v"], s["do"], feature_map=st.feature_map, eps=st.eps,
                                    target=target)
    return plan.renamed({"o": "o32", "S_res": "state_S", "z_res": "state_z", "dfinal_S": "dS1", "dfinal_z": "dz1"})


# forward_takes_grad: o is saved in fp32 (o32) when a gradient will be wanted
LINEAR_ATTENTION_STEP = Op(
    linear_attention_step, inputs=("q", "k", "v", "state_S", "state_z"), results=("o", "S1", "z1", "rden", "o32"),
    returns=("o", "S1", "z1"), pack=pack_state, saved=("q", "k", "v", "o32", "rden", "state_S", "state_z"),
    forward_takes_grad=True,
    differentiable=("q", "k", "v", "state_S", "state_z"), forward=_step_forward, backward=_step_backward,
    reference=reference.linear_attention_step, family="linear_attention",
    batch=("q", "k", "v", "state_S", "state_z"))


def elu_plus_one(x):
    """ELU(x) + 1, elementwise, any shape; differentiable. Same dtype and shape as x."""
    return (x,), ()


ELU_PLUS_ONE = Op(
    elu_plus_one, inputs=("x",), results=("y",), saved=("x",), differentiable=("x",),
    forward=lambda s, static, target: plans.elu_plus_one_plan(s["x"], target),
    backward=lambda s, static, target: plans.elu_plus_one_backward_plan(s["x"], s["dy"], target),
    reference=reference.elu_plus_one, family="linear_attention", batch=("x",))

OPS = (ELU_PLUS_ONE, LINEAR_ATTENTION, LINEAR_ATTENTION_STEP)
