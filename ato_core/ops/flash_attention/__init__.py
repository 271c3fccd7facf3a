"""flash_attention: the declaration. kernels.py (Triton), plans.py (checks, tiles),
reference.py, cases.py."""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.op import Op

from . import plans, reference


class Flash(NamedTuple):
    causal: bool
    softmax_scale: object
    return_lse: bool
    layout: str = "bhnd"


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, layout="bhnd"):
    """Softmax attention, o = softmax(q k^T * softmax_scale) v, tiled (never Nq x Nk in memory).

    Args:
      q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D], Hq a multiple of Hkv (grouped-query and
        multi-query attention: query head h reads kv head h // (Hq / Hkv)). fp32, fp16 or
        bf16, one dtype and device; D in 1..256; any Nq, Nk >= 1; any strides (torch).
      causal: query i sees key j iff j <= i + Nk - Nq (aligned to the bottom right, as in
        FlashAttention 2); a query that sees no key gets zeros.
      softmax_scale: defaults to 1 / sqrt(D).
      return_lse: also return the log-sum-exp of the scores (natural log, fp32,
        [B, Hq, Nq]; -inf for a query that sees no key).
      layout: "bhnd" (the shapes above) or "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D], o
        likewise (FlashAttention's and flax's layout), read and written in place through
        strides, no transpose; lse stays [B, Hq, Nq].

    Returns:
      o [B, Hq, Nq, D] (or [B, Nq, Hq, D]) in q's dtype, or (o, lse). Differentiable with
      respect to q, k and v (through lse too).
    """
    checks.check_bool("return_lse", return_lse)
    checks.check_choice("layout", layout, plans.LAYOUTS)
    return (q, k, v), Flash(causal, softmax_scale, return_lse, layout)


def _forward(s, st: Flash, target):
    return plans.forward_plan(s["q"], s["k"], s["v"], causal=st.causal, softmax_scale=st.softmax_scale,
                              target=target, layout=st.layout)


def _backward(s, st: Flash, target):
    return plans.backward_plan(s["q"], s["k"], s["v"], s["do"], causal=st.causal, softmax_scale=st.softmax_scale,
                               has_dlse=s.get("dlse") is not None, target=target, layout=st.layout)


FLASH_ATTENTION = Op(
    flash_attention, inputs=("q", "k", "v"), results=("o", "lse"),
    returns=lambda st: ("o", "lse") if st.return_lse else ("o",), optional_cotangents=(("dlse",),),
    saved=("q", "k", "v", "o", "lse"), differentiable=("q", "k", "v"), forward=_forward, backward=_backward,
    reference=reference.flash_attention, family="flash_attention", batch=("q", "k", "v"))

OPS = (FLASH_ATTENTION,)
