"""softmax: the declaration. kernels.py (Triton), plans.py (checks, grids), reference.py, cases.py."""

from __future__ import annotations

from ato_core.op import Op

from . import plans, reference


def softmax(x, *, temperature=1.0):
    """softmax(x / temperature) over the last axis, any width (online past 8192). The
    backward uses the output alone."""
    return (x,), temperature


SOFTMAX = Op(
    softmax, inputs=("x",), results=("y",), saved=("y",), differentiable=("x",),
    forward=lambda s, temperature, target: plans.forward_plan(s["x"], temperature=temperature, target=target),
    backward=lambda s, temperature, target: plans.backward_plan(s["y"], temperature=temperature, target=target),
    reference=reference.softmax, family="softmax", batch=("x",), batch_min_rank=2)

OPS = (SOFTMAX,)
