"""rope: the declaration. kernels.py (Triton), plans.py (checks, grids), reference.py, cases.py."""

from __future__ import annotations

from ato_core.op import Op

from . import plans, reference


def rope(q, k, cos, sin, *, positions=None, interleaved=False):
    """Rotary position embedding of q [B, Hq, N, D] and k [B, Hkv, N, D] (D even).

    cos, sin: [max_positions, D/2], or [max_positions, D] as Hugging Face builds them (cat(c,
    c); interleaved: c repeated element-wise), whose value at each pair's first element is
    read; positions: [B, N] integer (default 0..N-1, e.g. offsets when decoding).
    interleaved=False rotates (x[i], x[i + D/2]) (LLaMA); True rotates (x[2i], x[2i+1])
    (GPT-J). fp32/fp16/bf16 (computed in fp32) or fp64. Returns new (q_rot, k_rot).
    Differentiable in q and k; cos and sin are constants (no gradient). A position outside
    [0, max_positions) gives zeros."""
    return (q, k, cos, sin, positions), interleaved


def _forward(s, interleaved, target):
    return plans.plan(s["q"], s["k"], s["cos"], s["sin"], s["positions"], interleaved=interleaved, inverse=False,
                      target=target)


def _backward(s, interleaved, target):
    """The inverse rotation, applied to the cotangents."""
    plan = plans.plan(s["dq_rot"], s["dk_rot"], s["cos"], s["sin"], s["positions"], interleaved=interleaved,
                      inverse=True, target=target)
    return plan.renamed({"q": "dq_rot", "k": "dk_rot"})


ROPE = Op(rope, inputs=("q", "k", "cos", "sin", "positions"), results=("q_rot", "k_rot"),
          optional=("positions",), saved=("cos", "sin", "positions"), differentiable=("q", "k"), forward=_forward,
          backward=_backward, reference=reference.rope, family="rope", batch=("q", "k", "positions"))

OPS = (ROPE,)
