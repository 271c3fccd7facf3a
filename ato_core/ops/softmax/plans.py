"""softmax: argument checks and launch plans (kernels.py beside it). Row-major [M, N] over the
last axis."""

from __future__ import annotations

import math

from ato_core import checks
from . import kernels as kern
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, next_pow2, numel
from ato_core.target import Target

SINGLE_MAX = 8192


def _block(N: int, target: Target):
    single_max = 64 if target.interpret else SINGLE_MAX
    return (max(next_pow2(N), 16), True) if N <= single_max else ((32 if target.interpret else 4096), False)


def check_softmax(x: ArraySpec, temperature) -> None:
    checks.check_float("x", x)
    if x.ndim < 1 or numel(x.shape) < 1:
        raise ValueError(f"x: expected a non-empty array of at least 1 dimension, got shape {tuple(x.shape)}")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0
            and math.isfinite(temperature)):
        raise ValueError(f"temperature: expected a positive float, got {temperature!r}")


def _launch(kernel, inputs, x: ArraySpec, out: str, temperature: float, target: Target) -> Launch:
    N = x.shape[-1]
    M = numel(x.shape[:-1])
    block, single = _block(N, target)
    return Launch(kernel, (M,), inputs, (M, N, 1.0 / float(temperature)), (Buffer(out, tuple(x.shape), x.dtype),),
                  {"BLOCK_N": block, "SINGLE": single, "ALIGN": alignment(N)},
                  num_warps=4 if block <= 1024 else 8 if block <= 4096 else 16)


@cached_plan
def forward_plan(x: ArraySpec, *, temperature: float, target: Target) -> Plan:
    """Inputs: x. Results: y (x's shape and dtype)."""
    check_softmax(x, temperature)
    return Plan((_launch(kern.softmax_fwd_kernel, ("x",), x, "y", temperature, target),), ("y",), dense=("x",))


@cached_plan
def backward_plan(y: ArraySpec, *, temperature: float, target: Target) -> Plan:
    """Inputs: y, dy. Results: dx."""
    return Plan((_launch(kern.softmax_bwd_kernel, ("y", "dy"), y, "dx", temperature, target),), ("dx",),
                dense=("y", "dy"))
