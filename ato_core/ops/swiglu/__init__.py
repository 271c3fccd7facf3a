"""swiglu: the declaration. kernels.py (Triton), plans.py (checks, grids), reference.py, cases.py."""

from __future__ import annotations

from ato_core.op import Op

from . import plans, reference


def swiglu(gate, up):
    """silu(gate) * up, elementwise; gate and up of one shape and dtype (fp32/fp16/bf16,
    computed in fp32; or fp64)."""
    return (gate, up), ()


SWIGLU = Op(
    swiglu, inputs=("gate", "up"), results=("y",), saved=("gate", "up"), differentiable=("gate", "up"),
    forward=lambda s, static, target: plans.forward_plan(s["gate"], s["up"], target=target),
    backward=lambda s, static, target: plans.backward_plan(s["gate"], target=target),
    reference=reference.swiglu, family="swiglu", batch=("gate", "up"))

OPS = (SWIGLU,)
