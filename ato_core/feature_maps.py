"""elu_plus_one: launch plans (kernels in ato_core/kernels/feature_maps.py)."""

from __future__ import annotations

from . import checks
from .kernels import feature_maps as kern
from .launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, numel
from .target import Target

FEATURE_MAPS = {None: kern.IDENTITY, "elu": kern.ELU_PLUS_ONE}


def feature_map_code(feature_map) -> int:
    checks.check_choice("feature_map", feature_map, tuple(FEATURE_MAPS))
    return FEATURE_MAPS[feature_map]


def _block(target: Target) -> int:
    # The interpreter pays per program, so it gets fewer, larger blocks.
    return 8192 if target.interpret else 1024


@cached_plan
def elu_plus_one_plan(x: ArraySpec, target: Target) -> Plan:
    """y = ELU(x)+1, any shape. Inputs: x. Results: y (x's shape and dtype)."""
    checks.check_float("x", x)
    n, block = numel(x.shape), _block(target)
    launch = Launch(
        kern.elu_plus_one_fwd_kernel, (max(cdiv(n, block), 1),), ("x",), (n,),
        (Buffer("y", tuple(x.shape), x.dtype),), {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=4,
    )
    return Plan((launch,), ("y",), dense=("x",))


@cached_plan
def elu_plus_one_backward_plan(x: ArraySpec, dy: ArraySpec, target: Target) -> Plan:
    """dx = dy * ELU'(x). Inputs: x, dy. Results: dx."""
    checks.check_shape("dy", dy, x.shape, "the shape of x")
    n, block = numel(x.shape), _block(target)
    launch = Launch(
        kern.elu_plus_one_bwd_kernel, (max(cdiv(n, block), 1),), ("x", "dy"), (n,),
        (Buffer("dx", tuple(x.shape), x.dtype),), {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=4,
    )
    return Plan((launch,), ("dx",), dense=("x", "dy"))
