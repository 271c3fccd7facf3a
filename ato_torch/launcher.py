"""Executes ato_core launch plans on torch tensors.

CUDA tensors run the compiled kernel; CPU tensors (or any tensor with ATO_INTERPRET=1)
run the same kernel under Triton's interpreter. No launch decision is made here.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ato_core.interpreter import interpreted
from ato_core.launch import ArraySpec, Plan
from ato_core.target import INTERPRETER, Target, cuda_target, force_interpret

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def spec(t) -> ArraySpec:
    """The ArraySpec of a tensor: its shape, dtype, own strides and device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
    return ArraySpec(tuple(t.shape), dtype_name(t.dtype), tuple(t.stride()), str(t.device))


def target_for(t: torch.Tensor) -> Target:
    if t.device.type == "cuda" and not force_interpret():
        return cuda_target(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return INTERPRETER


def run_plan(plan: Plan, arrays: Mapping[str, torch.Tensor | None], target: Target) -> tuple:
    """Runs every launch of ``plan`` in order and returns its results.

    ``arrays`` maps the plan's input names to tensors (None for an absent optional
    input). Buffers are allocated on the device of the first input.
    """
    env = {name: t for name, t in arrays.items() if t is not None}
    for name in plan.dense:
        if name in env:
            env[name] = env[name].contiguous()
    device = next(iter(env.values())).device
    with torch.cuda.device(device) if device.type == "cuda" else _nullcontext():
        for launch in plan.launches:
            outs = [
                (torch.zeros if b.zeroed else torch.empty)(b.shape, dtype=_DTYPES[b.dtype], device=device)
                for b in launch.outputs
            ]
            args = [env[name] for name in launch.inputs] + list(launch.scalars) + outs
            kernel = interpreted(launch.kernel) if target.interpret else launch.kernel
            kernel[launch.grid](*args, **launch.constexprs, num_warps=launch.num_warps,
                                num_stages=launch.num_stages, enable_fp_fusion=launch.fp_fusion)
            env.update((b.name, out) for b, out in zip(launch.outputs, outs))
    return tuple(env[name] for name in plan.results)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
