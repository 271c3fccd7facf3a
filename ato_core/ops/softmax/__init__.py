"""softmax: the declaration. kernels.py (Triton), plans.py (checks, grids), reference.py, cases.py."""

from __future__ import annotations

from ato_core.op import Op

from . import plans, reference


def softmax(x, *, temperature=1.0):
    """softmax(x / temperature) over the last axis, any width (online past 8192).

    x: [..., N], fp32/fp16/bf16/fp64; returns y of x's shape and dtype. temperature: a positive
    Python float (fixed: one compiled kernel per value), or a 0-d float array / tensor on x's
    device, which may be traced under jit (read by the kernel: no retrace) and takes the
    gradient of softmax(x / t) (its value is not checked: 0 gives inf / NaN). The backward
    uses the output, and with a traced temperature x too (kept for it)."""
    if isinstance(temperature, (int, float)):
        return (x, None), temperature
    return (x, temperature), None


def _forward(s, temperature, target):
    return plans.forward_plan(s["x"], s["temperature"], temperature=temperature, target=target)


def _backward(s, temperature, target):
    return plans.backward_plan(s["y"], s["temperature"], temperature=temperature, target=target)


SOFTMAX = Op(
    softmax, inputs=("x", "temperature"), results=("y",), saved=("y", "temperature", "x"),
    unsaved=lambda temperature: () if temperature is None else ("x",),  # dL/dt reads x
    differentiable=("x", "temperature"), optional=("temperature",), forward=_forward, backward=_backward,
    reference=reference.softmax, family="softmax", batch=("x",), batch_min_rank=2)

OPS = (SOFTMAX,)
