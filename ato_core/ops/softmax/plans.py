"""softmax: argument checks and launch plans (kernels.py beside it). Row-major [M, N] over the
last axis. The temperature is a Python number (a scalar argument of the kernel) or a 0-d array
(``temperature`` among the inputs: read by the kernel, differentiable)."""

from __future__ import annotations

import math
from typing import Optional

import triton.language as tl

from ato_core import checks
from . import kernels as kern
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, next_pow2, numel,
                             optional_output)
from ato_core.target import Target

SINGLE_MAX = 8192


def _block(N: int, target: Target):
    single_max = 64 if target.interpret else SINGLE_MAX
    return (max(next_pow2(N), 16), True) if N <= single_max else ((32 if target.interpret else 4096), False)


def check_softmax(x: ArraySpec, temperature, traced: Optional[ArraySpec]) -> None:
    checks.check_float("x", x, float64=True)
    if x.ndim < 1:
        raise ValueError(f"x: expected an array of at least 1 dimension, got shape {tuple(x.shape)}")
    if traced is not None:
        checks.check_float("temperature", traced, float64=True)
        if traced.ndim != 0:
            raise ValueError(f"temperature: expected a float or a 0-d array, got an array of shape "
                             f"{tuple(traced.shape)}")
        checks.check_same_device(("x", "temperature"), (x, traced))
    elif not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0
              and math.isfinite(temperature)):
        raise ValueError(f"temperature: expected a positive float or a 0-d float array, got {temperature!r}")


def _launch(kernel, inputs, x: ArraySpec, outs, temperature, traced: bool, target: Target) -> Launch:
    N = x.shape[-1]
    M = numel(x.shape[:-1])
    block, single = _block(N, target)
    inv = 1.0 if traced else 1.0 / float(temperature)
    return Launch(kernel, (M if N else 0,), inputs, (M, N, inv), outs,
                  {"BLOCK_N": block, "SINGLE": single, "ALIGN": alignment(N), "TRACED": traced,
                   "ACC": tl.float64 if x.dtype == "float64" else tl.float32},
                  num_warps=4 if block <= 1024 else 8 if block <= 4096 else 16)


@cached_plan
def forward_plan(x: ArraySpec, traced: Optional[ArraySpec], *, temperature, target: Target) -> Plan:
    """Inputs: x, temperature (when ``traced``: its spec). Results: y (x's shape and dtype)."""
    check_softmax(x, temperature, traced)
    t = traced is not None
    return Plan((_launch(kern.softmax_fwd_kernel, ("x", "temperature" if t else "x"), x,
                         (Buffer("y", tuple(x.shape), x.dtype),), temperature, t, target),), ("y",), dense=("x",))


@cached_plan
def backward_plan(y: ArraySpec, traced: Optional[ArraySpec], *, temperature, target: Target) -> Plan:
    """Inputs: y, dy; temperature and x (when ``traced``). Results: dx, dtemperature (0-d,
    the temperature's dtype; a placeholder when not traced)."""
    t = traced is not None
    M = numel(y.shape[:-1])
    bwd = _launch(kern.softmax_bwd_kernel, ("y", "dy", *(("temperature", "x") if t else ("y", "y"))), y,
                  (Buffer("dx", tuple(y.shape), y.dtype), optional_output("dt_row", (M,), checks.acc_dtype(y.dtype), t)),
                  temperature, t, target)
    if not t:
        return Plan((bwd,), ("dx", "dt_row"), dense=("y", "dy"))
    total = Launch(kern.softmax_sum_kernel, (1,), ("dt_row",), (M if y.shape[-1] else 0,),  # (empty rows: none)
                   (Buffer("dtemperature", (), traced.dtype),),
                   {"BLOCK": min(max(next_pow2(M), 16), 1024)})
    return Plan((bwd, total), ("dx", "dtemperature"), dense=("y", "dy", "x"))
