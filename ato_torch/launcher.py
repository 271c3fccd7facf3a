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

import contextlib
import functools
import inspect
import os
from typing import Mapping

import torch
from torch._C import _functions

from ato_core import interpreter
from ato_core.launch import ArraySpec, Launch, Plan
from ato_core.target import INTERPRETER, Target, cuda_target, force_interpret

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}


_NAMES = {dt: name for name, dt in _DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    name = _NAMES.get(dtype)
    return name if name is not None else str(dtype).removeprefix("torch.")


_DEVICE_NAMES: dict = {}


def spec(t, name: str = "argument") -> ArraySpec:
    """The ArraySpec of a tensor: its shape, dtype, own strides and device. Anything else
    raises TypeError naming the argument (``name``)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    device = t.device
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return ArraySpec(tuple(t.shape), _NAMES.get(t.dtype) or dtype_name(t.dtype), t.stride(), name, _aligned(t))


def _aligned(t: torch.Tensor) -> bool:
    """Whether t's data is 16-byte aligned, from its storage offset (allocators align a
    storage's start; a fake tensor under torch.compile has no data pointer to ask)."""
    offset = t.storage_offset()
    return isinstance(offset, int) and offset * t.element_size() % 16 == 0


def once_differentiable(backward, name: str):
    """A backward that refuses a second differentiation, naming the op.

    With grad mode off (a backward without ``create_graph=True``) it just runs. With it on,
    it runs under no_grad and its gradients carry a node that raises, when something
    differentiates them, that ``ato_torch.<name>`` has no double backward (torch's own
    once_differentiable does so only when a cotangent requires grad, and otherwise hands back
    gradients that silently do not require grad)."""
    message = (f"ato_torch.{name}: its backward is not differentiable (no double backward, e.g. "
               "torch.autograd.grad(..., create_graph=True) then differentiating the result)").encode()

    @functools.wraps(backward)
    def wrapper(ctx, *args):
        if not torch.is_grad_enabled():
            return backward(ctx, *args)
        with torch.no_grad():
            grads = backward(ctx, *args)
        tensors = [g for g in grads if isinstance(g, torch.Tensor)]
        if not tensors:
            return grads
        delayed = _functions.DelayedError(message, len(tensors))(*[g.detach().requires_grad_() for g in tensors])
        delayed = iter(delayed if isinstance(delayed, tuple) else (delayed,))
        return tuple(next(delayed) if isinstance(g, torch.Tensor) else g for g in grads)

    return wrapper


def fill_cotangents(op, plan: Plan, static, names, cotangents) -> tuple:
    """Cotangents as the backward plan takes them: an absent one zeros, unless its whole
    optional group is absent (then None)."""
    present = {n: c is not None for n, c in zip(names, cotangents)}
    if all(present.values()):
        return cotangents
    keep_none = op.absent_cotangents(static, present)
    device = next(c for c in cotangents if c is not None).device
    out = []
    for n, c in zip(names, cotangents):
        if c is None and n not in keep_none:
            s = op.result_spec(plan, n[1:], str(device))  # the result's shape and dtype
            c = torch.zeros(s.shape, dtype=getattr(torch, s.dtype), device=device)
        out.append(c)
    return tuple(out)


def target_for(t: torch.Tensor) -> Target:
    if t.device.type == "cuda" and not force_interpret():
        return cuda_target(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return INTERPRETER


def run_plan(plan: Plan, arrays: Mapping[str, torch.Tensor | None], target: Target) -> tuple:
    """Runs every launch of ``plan`` in order and returns its results.

    ``arrays`` maps the plan's input names to tensors (None for an absent optional
    input). Outputs are allocated on the device of the first input (ato_core.interpreter.execute).
    """
    if target.interpret:
        return interpreter.run_plan(plan, arrays)
    device = next(t for t in arrays.values() if t is not None).device
    # Triton launches on the current device: make it the arrays' (nothing to do when it is, as
    # it always is with one visible GPU).
    if _several_gpus() and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            return interpreter.execute(plan, arrays, _cuda_launch)
    return interpreter.execute(plan, arrays, _cuda_launch)


@functools.lru_cache(maxsize=None)
def _several_gpus() -> bool:
    """Whether this process sees more than one CUDA device (fixed once CUDA is initialised)."""
    return torch.cuda.device_count() > 1


def _jit_launch(kernel, launch: Launch, args):
    """Through Triton's JITFunction (binds, specialises, compiles if needed); returns what
    it returns (the CompiledKernel on a GPU)."""
    options = {"maxnreg": launch.maxnreg} if launch.maxnreg else {}
    return kernel[launch.grid](*args, **launch.constexprs, num_warps=launch.num_warps,
                               num_stages=launch.num_stages, enable_fp_fusion=launch.fp_fusion, **options)


JIT_LAUNCH_ONLY = os.environ.get("ATO_TRITON_JIT_LAUNCH", "").strip().lower() not in ("", "0", "false", "no")


def _cuda_launch(launch: Launch, inputs, outs, device: torch.device) -> None:
    """Launches a compiled kernel (Launch.scratch: with its last output as Triton's global
    scratch, _scratch)."""
    if not launch.scratch:
        return _launch(launch, inputs, outs, device)
    with _scratch(outs[-1]):
        return _launch(launch, inputs, outs, device)


@contextlib.contextmanager
def _scratch(buffer: torch.Tensor):
    """Triton's launcher allocates a kernel's global scratch through the allocator of the
    calling context (triton.set_allocator): for this launch, ``buffer``, its last output."""
    from triton.runtime import _allocation

    def allocate(size: int, alignment: int, stream):
        if size > buffer.numel() * buffer.element_size() or buffer.data_ptr() % alignment:
            raise RuntimeError(f"global scratch: {size} bytes aligned to {alignment} asked, the launch's last output "
                               f"has {buffer.numel() * buffer.element_size()} at {buffer.data_ptr():#x}")
        return buffer

    token = _allocation._allocator.set(allocate)
    try:
        yield
    finally:
        _allocation._allocator.reset(token)


def _launch(launch: Launch, inputs, outs, device: torch.device) -> None:
    """Launches a compiled kernel: the binary cached on ``launch`` for this device and
    pointer alignment if there is one, else through Triton (and caches what it returns)."""
    # A plan fixes its inputs' dtypes, but a caller's cotangent may not match them: both are in
    # the key, with each input's device and alignment (the outputs are fresh, aligned
    # allocations on ``device``).
    ptrs = [t.data_ptr() for t in inputs]
    key = (device.index, *[(t.dtype, p % 16 == 0, t.get_device()) for t, p in zip(inputs, ptrs)])
    hit = launch.compiled.get(key)
    if hit and not JIT_LAUNCH_ONLY and not _observed(launch):
        run, function, metadata, gx, gy, gz, tail = hit
        # Addresses as integers: Triton's launcher takes them as they are. Handed a tensor, it
        # calls data_ptr() and asks the driver whether the address is device memory
        # (cuPointerGetAttribute: a driver call per pointer per launch). A hit means Triton's
        # own launch took inputs on these devices (a tensor elsewhere, e.g. on the CPU, is a
        # different key, and goes through Triton, which refuses it).
        run(gx, gy, gz, _current_stream(device.index), function, metadata, None, None, None,
            *ptrs, *launch.scalars, *[t.data_ptr() for t in outs], *tail)
        return
    compiled = _jit_launch(launch.kernel, launch, [*inputs, *launch.scalars, *outs])
    if hit is None and not JIT_LAUNCH_ONLY:
        launch.compiled[key] = _direct(launch, compiled, len(inputs) + len(launch.scalars) + len(outs))


_runtime_knobs = None


def _observed(launch: Launch) -> bool:
    """Whether something watches Triton's launches (a profiler's launch hooks, a kernel's
    pre-run hooks): then every launch goes through Triton, which calls them."""
    global _runtime_knobs
    if _runtime_knobs is None:
        import triton

        _runtime_knobs = triton.knobs.runtime
    runtime = _runtime_knobs
    return _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook) or bool(launch.kernel.pre_run_hooks)


def _hooked(hook) -> bool:
    """Whether a Triton launch hook is set: None or an empty HookChain (Triton >= 3.5) is not."""
    return hook is not None and bool(getattr(hook, "calls", True))


_get_stream = None


def _current_stream(index: int):
    """The raw handle of the current CUDA stream of device ``index``, as Triton's launcher
    takes it: Triton's driver's own getter (looked up once)."""
    global _get_stream
    if _get_stream is None:
        from triton.runtime import driver

        _get_stream = driver.active.get_current_stream
    return _get_stream(index)


def _direct(launch: Launch, compiled, nargs: int) -> tuple:
    """What a direct launch of ``compiled`` needs: (its launcher, CUfunction, packed metadata,
    the grid as 3 numbers, the values of the kernel's constexpr parameters in signature
    order). () when ``compiled`` is not a Triton CompiledKernel whose launcher takes (grid x3,
    stream, function, packed metadata, launch metadata, enter hook, exit hook, *every
    parameter) as in Triton 3.6-3.9: that launch then always goes through Triton."""
    params = launch.kernel.params
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return ()
    if any(p.is_constexpr for p in params[:nargs]) or not all(p.is_constexpr for p in params[nargs:]):
        return ()
    tail = []
    for p in params[nargs:]:
        if p.name in launch.constexprs:
            tail.append(launch.constexprs[p.name])
        elif p.default is not inspect.Parameter.empty:
            tail.append(p.default)
        else:
            return ()
    grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    return (compiled.run, compiled.function, compiled.packed_metadata, *grid, tuple(tail))
