"""swiglu: argument checks and launch plans (kernels.py beside it). Flat row-major arrays of any
shape."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ato_core import checks
from . import kernels as kern
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, numel
from ato_core.target import Target


class Settings(NamedTuple):
    """Elements per program and warps of the forward and the backward (GPU)."""

    fwd_block: int
    fwd_warps: int
    bwd_block: int
    bwd_warps: int


# Swept on an H100 (benchmarks/tools/ops_sweep.py --fwd; results index: transformer_ops-fwd-sweep):
# 1024 x 8 warps (8 bytes per thread and array) the fastest forward.
SETTINGS = Settings(1024, 8, 2048, 8)


def _block(target: Target, gpu_block: int) -> int:
    return 8192 if target.interpret else gpu_block


def check_swiglu(gate: ArraySpec, up: ArraySpec) -> None:
    checks.check_float("gate", gate, float64=True)
    checks.check_float("up", up, float64=True)
    checks.check_same_dtype(("gate", "up"), (gate, up))
    checks.check_same_device(("gate", "up"), (gate, up))
    checks.check_shape("up", up, tuple(gate.shape), "the shape of gate")


@cached_plan
def forward_plan(gate: ArraySpec, up: ArraySpec, *, target: Target, settings: Optional[Settings] = None) -> Plan:
    """Inputs: gate, up. Results: y. ``settings``: default SETTINGS."""
    check_swiglu(gate, up)
    settings = settings or SETTINGS
    n, block = numel(gate.shape), _block(target, settings.fwd_block)
    launch = Launch(kern.swiglu_fwd_kernel, (cdiv(n, block),), ("gate", "up"), (n,),
                    (Buffer("y", tuple(gate.shape), gate.dtype),),
                    {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=settings.fwd_warps)
    return Plan((launch,), ("y",), dense=("gate", "up"))


@cached_plan
def backward_plan(gate: ArraySpec, *, target: Target, settings: Optional[Settings] = None) -> Plan:
    """Inputs: gate, up, dy. Results: dgate, dup. ``settings``: default SETTINGS."""
    settings = settings or SETTINGS
    n, block = numel(gate.shape), _block(target, settings.bwd_block)
    launch = Launch(kern.swiglu_bwd_kernel, (cdiv(n, block),), ("gate", "up", "dy"), (n,),
                    (Buffer("dgate", tuple(gate.shape), gate.dtype), Buffer("dup", tuple(gate.shape), gate.dtype)),
                    {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=settings.bwd_warps)
    return Plan((launch,), ("dgate", "dup"), dense=("gate", "up", "dy"))
