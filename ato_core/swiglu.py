"""swiglu: argument checks and launch plans (kernels: ato_core/kernels/swiglu.py;
reference: ato_core/reference/swiglu.py). Flat row-major arrays of any shape."""

from __future__ import annotations

from . import checks
from .kernels import swiglu as kern
from .launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, numel
from .target import Target


# Elements per program of the forward and its warps. Swept on an H100 (benchmarks/ops_sweep.py
# --fwd, 16384 x 7168 bf16, two leases): 1024 x 8 warps (8 bytes per thread and array) the
# fastest in both, 234.0 and 234.5 us, against 235.8 and 236.1 us at 2048 x 8; 512-4096
# elements on 1-16 warps within 234-238 us; 256 elements, or 64 or fewer per warp, 266-290 us.
FWD_BLOCK = 1024
FWD_WARPS = 8


def _block(target: Target, gpu_block: int = 2048) -> int:
    return 8192 if target.interpret else gpu_block


def check_swiglu(gate: ArraySpec, up: ArraySpec) -> None:
    checks.check_float("gate", gate)
    checks.check_float("up", up)
    checks.check_same_dtype(("gate", "up"), (gate, up))
    checks.check_same_device(("gate", "up"), (gate, up))
    checks.check_shape("up", up, tuple(gate.shape), "the shape of gate")


@cached_plan
def forward_plan(gate: ArraySpec, up: ArraySpec, *, target: Target) -> Plan:
    """Inputs: gate, up. Results: y."""
    check_swiglu(gate, up)
    n, block = numel(gate.shape), _block(target, FWD_BLOCK)
    launch = Launch(kern.swiglu_fwd_kernel, (max(cdiv(n, block), 1),), ("gate", "up"), (n,),
                    (Buffer("y", tuple(gate.shape), gate.dtype),),
                    {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=FWD_WARPS)
    return Plan((launch,), ("y",), dense=("gate", "up"))


@cached_plan
def backward_plan(gate: ArraySpec, *, target: Target) -> Plan:
    """Inputs: gate, up, dy. Results: dgate, dup."""
    n, block = numel(gate.shape), _block(target)
    launch = Launch(kern.swiglu_bwd_kernel, (max(cdiv(n, block), 1),), ("gate", "up", "dy"), (n,),
                    (Buffer("dgate", tuple(gate.shape), gate.dtype), Buffer("dup", tuple(gate.shape), gate.dtype)),
                    {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=8)
    return Plan((launch,), ("dgate", "dup"), dense=("gate", "up", "dy"))
