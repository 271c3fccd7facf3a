"""Executes ato_core launch plans on torch tensors.

CUDA tensors run the compiled kernel; CPU tensors (or any tensor with ATO_INTERPRET=1)
run the same kernel under Triton's interpreter. No launch decision is made here.

Compiled launches skip Triton's per-call binding after the first. ``kernel[grid](...)``
binds and specialises every argument on every call (tens of microseconds of Python, as
long as a short kernel runs). A plan's launch has fixed dtypes, scalars, grid and
constexprs, so the binary Triton picks for it can only change with the 16-byte alignment
of its pointers: the first call of a launch goes through Triton (compiling or finding the
binary), and later calls with the same pointer alignment on the same device call that
binary's launcher directly. ATO_TRITON_JIT_LAUNCH=1 turns this off (every call through
Triton), as does a Triton launch hook (profilers) or a pre-run hook.
"""

from __future__ import annotations

import inspect
import os
from typing import Mapping

import torch

from ato_core.interpreter import interpreted
from ato_core.launch import ArraySpec, Launch, Plan
from ato_core.target import INTERPRETER, Target, cuda_target, force_interpret

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}


_NAMES = {dt: name for name, dt in _DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    name = _NAMES.get(dtype)
    return name if name is not None else str(dtype).removeprefix("torch.")


def spec(t) -> ArraySpec:
    """The ArraySpec of a tensor: its shape, dtype, own strides and device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
    return ArraySpec(tuple(t.shape), dtype_name(t.dtype), t.stride(), str(t.device))


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
        t = env.get(name)
        if t is not None:
            env[name] = t.contiguous()
    device = next(iter(env.values())).device
    # Triton launches on the current device: make it the arrays' (a no-op context when it is).
    guard = device.type == "cuda" and device.index != torch.cuda.current_device()
    with torch.cuda.device(device) if guard else _nullcontext():
        for launch in plan.launches:
            inputs = [env[name] for name in launch.inputs]
            outs = []
            for b in launch.outputs:
                if b.alias:
                    out = env[b.alias]
                else:
                    out = (torch.zeros if b.zeroed else torch.empty)(b.shape, dtype=_DTYPES[b.dtype], device=device)
                outs.append(out)
                env[b.name] = out
            if target.interpret:
                _jit_launch(interpreted(launch.kernel), launch, inputs + list(launch.scalars) + outs)
            else:
                _cuda_launch(launch, inputs, outs, device)
    return tuple(env[name] for name in plan.results)


def _jit_launch(kernel, launch: Launch, args):
    """Through Triton's JITFunction (binds, specialises, compiles if needed); returns what
    it returns (the CompiledKernel on a GPU)."""
    return kernel[launch.grid](*args, **launch.constexprs, num_warps=launch.num_warps,
                               num_stages=launch.num_stages, enable_fp_fusion=launch.fp_fusion)


JIT_LAUNCH_ONLY = os.environ.get("ATO_TRITON_JIT_LAUNCH", "").strip().lower() not in ("", "0", "false", "no")


def _cuda_launch(launch: Launch, inputs, outs, device) -> None:
    """Launches a compiled kernel: the binary cached on ``launch`` for this device and
    pointer alignment if there is one, else through Triton (and caches what it returns)."""
    import triton

    args = inputs + list(launch.scalars) + outs
    # A plan fixes its inputs' dtypes, but a caller's cotangent may not match them: both are in
    # the key, with the inputs' alignment (the other outputs are fresh, aligned allocations).
    key = (device.index, tuple((t.dtype, t.data_ptr() % 16 == 0) for t in inputs))
    hit = launch.compiled.get(key)
    runtime = triton.knobs.runtime
    if (hit is None or JIT_LAUNCH_ONLY or _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook)
            or launch.kernel.pre_run_hooks):
        compiled = _jit_launch(launch.kernel, launch, args)
        if hit is None and not JIT_LAUNCH_ONLY:
            launch.compiled[key] = _direct(launch, compiled, len(args))
        return
    binary, constexpr_tail = hit
    if binary is None:  # this Triton's compiled kernel has no launcher we know how to call
        _jit_launch(launch.kernel, launch, args)
        return
    gx, gy, gz = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    binary.run(gx, gy, gz, triton.runtime.driver.active.get_current_stream(device.index), binary.function,
               binary.packed_metadata, None, None, None, *args, *constexpr_tail)


def _hooked(hook) -> bool:
    """Whether a Triton launch hook is set: None or an empty HookChain (Triton >= 3.5) is not."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _direct(launch: Launch, compiled, nargs: int):
    """(binary, the values of the kernel's remaining parameters, its constexprs, in
    signature order), or (None, ()) when ``compiled`` is not a Triton CompiledKernel whose
    launcher takes (grid x3, stream, function, packed metadata, launch metadata, enter hook,
    exit hook, *every parameter) as in Triton 3.6-3.9."""
    params = launch.kernel.params
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return None, ()
    if any(p.is_constexpr for p in params[:nargs]) or not all(p.is_constexpr for p in params[nargs:]):
        return None, ()
    tail = []
    for p in params[nargs:]:
        if p.name in launch.constexprs:
            tail.append(launch.constexprs[p.name])
        elif p.default is not inspect.Parameter.empty:
            tail.append(p.default)
        else:
            return None, ()
    return compiled, tuple(tail)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
