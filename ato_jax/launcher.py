"""Executes ato_core launch plans on JAX arrays.

On a GPU each launch is a ``jax_triton.triton_call`` (compiled kernel). On a CPU (or
with ATO_INTERPRET=1) the whole plan runs in one ``jax.pure_callback`` under Triton's
interpreter (ato_core.interpreter, on torch CPU tensors, which it needs): the identical
kernels and plan as ``ato_torch``, so the two frameworks agree bit for bit there.
No launch decision is made here.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import types
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ato_core import interpreter
from ato_core.launch import ArraySpec, Plan, row_major_strides
from ato_core.target import INTERPRETER, Target, cuda_target, force_interpret


def spec(x) -> ArraySpec:
    """The ArraySpec of a JAX array: row-major strides (JAX has no other layout)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"expected a jax.Array, got {type(x).__name__}")
    return ArraySpec(tuple(x.shape), str(jnp.dtype(x.dtype)), row_major_strides(x.shape), "jax")


def platform_of(arrays) -> str:
    """The platform ("cpu", "gpu") of the first concrete array, else JAX's default backend."""
    for x in arrays:
        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
            return next(iter(x.devices())).platform
    return jax.default_backend()


def target_for(*arrays) -> Target:
    if force_interpret() or platform_of(arrays) != "gpu":
        return INTERPRETER
    target = cuda_target(0)
    if target.gluon and not gluon_launches():
        return dataclasses.replace(target, gluon=False)
    return target


_jax_triton = None


def import_jax_triton():
    """Imports jax_triton, leaving TRITON_CACHE_DIR as it was: jax-triton 0.2.0 to 0.3.1
    set it to "" at import (breaking every later Triton compile in the process, torch's
    included) and 0.4.x deletes it."""
    global _jax_triton
    if _jax_triton is None:
        saved = os.environ.get("TRITON_CACHE_DIR")
        try:
            import jax_triton
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved
        lib = getattr(jax_triton, "triton_lib", None)
        if lib is not None and not _api_04(jax_triton):
            _take_maxnreg(lib)
            _compile_gluon(lib)
        _jax_triton = jax_triton
    return _jax_triton


MAXNREG = "ato_maxnreg"
# A Gluon launch's declaration that its last output is the kernel's global scratch (Launch.scratch),
# a metaparameter as MAXNREG; _compile_gluon refuses a kernel whose need differs from it.
SCRATCH = "ato_scratch"


def _take_maxnreg(triton_lib) -> None:
    """jax-triton 0.3.x compiles with fixed options. A launch's register cap travels as the
    metaparameter MAXNREG (triton_call_kwargs); this wraps get_or_create_triton_kernel to move
    it from the kernel's constants into the options it compiles with (on the fresh backend
    each call makes). Its cache key then lacks the cap: a plan gives each kernel and its
    constants one cap."""
    create = triton_lib.get_or_create_triton_kernel
    if getattr(create, "ato_maxnreg", False):
        return

    def get_or_create(backend_init_func, *args, metaparams, **kw):
        cap = metaparams.get(MAXNREG)
        if cap is None:
            return create(backend_init_func, *args, metaparams=metaparams, **kw)
        metaparams = {k: v for k, v in metaparams.items() if k != MAXNREG}

        def init(*a):
            backend = backend_init_func(*a)
            parse = backend.parse_options
            backend.parse_options = lambda opts: parse({**opts, "maxnreg": cap})
            return backend

        return create(init, *args, metaparams=metaparams, **kw)

    get_or_create.ato_maxnreg = True
    triton_lib.get_or_create_triton_kernel = get_or_create


def _compile_gluon(triton_lib) -> None:
    """jax-triton 0.3.x compiles every kernel through the tl front end and launches num_warps
    warps. This wraps get_or_create_triton_kernel so that a Gluon kernel (Launch.kernel made by
    ato_core.launch.kernel(gluon=True)) is compiled from a GluonASTSource, with the signature,
    pointer specialisation and constants jax-triton builds (its own code, below), and launched
    with the warps of all its partitions (metadata.num_warps) and its register cap (MAXNREG):
    the binary torch's launcher builds from the same launch. A kernel that uses global scratch
    reads it from its last output (scratch_from_last_output), which its launch must declare
    (SCRATCH)."""
    create = triton_lib.get_or_create_triton_kernel
    if getattr(create, "ato_gluon", False):
        return
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    lib, cache = triton_lib.triton_kernel_call_lib, {}

    def get_or_create(backend_init_func, platform, fn, arg_dtypes, scalar_args, *, num_warps, num_stages, num_ctas,
                      compute_capability, enable_fp_fusion, metaparams, dump):
        declared = metaparams.get(SCRATCH, False)
        metaparams = {k: v for k, v in metaparams.items() if k != SCRATCH}
        if not getattr(fn, "is_gluon", lambda: False)():
            if declared:
                raise RuntimeError(f"{fn.__name__}: a global scratch output on a kernel that is not Gluon (jax-triton "
                                   "passes its scratch parameter as null)")
            return create(backend_init_func, platform, fn, arg_dtypes, scalar_args, num_warps=num_warps,
                          num_stages=num_stages, num_ctas=num_ctas, compute_capability=compute_capability,
                          enable_fp_fusion=enable_fp_fusion, metaparams=metaparams, dump=dump)
        cc = compute_capability or lib.get_compute_capability(0)
        cap = metaparams.get(MAXNREG)  # a register cap (triton_call_kwargs): an option, not a constant
        metaparams = {k: v for k, v in metaparams.items() if k != MAXNREG}
        backend = backend_init_func(0, cc)
        signature = {fn.arg_names[i]: v for i, v in enumerate(arg_dtypes)}
        alignments = [16] * len(arg_dtypes)  # every pointer 16-byte aligned, scalars unspecialised
        for i, _, _ in scalar_args:
            alignments[i] = 0
        spec = [triton_lib._triton.native_specialize_impl(
            backend, types.SimpleNamespace(data_ptr=lambda a=a: a, dtype=d.removeprefix("*")), False, True, a > 0)
            for d, a in zip(arg_dtypes, alignments)]
        attrs = {(i,): backend.parse_attr(attr) for i, (_, attr) in enumerate(spec)}
        constants = dict(metaparams)
        constants.update({k: None for _, k, v in scalar_args if v is None})
        constants.update({fn.arg_names[i]: 1 for i, _, v in scalar_args if v == 1})
        signature.update((c, "constexpr") for c in constants)
        key = (fn, tuple(signature.items()), tuple(spec), tuple(constants.items()), num_warps, num_stages, num_ctas, cc,
               enable_fp_fusion, cap, declared)
        if key not in cache:
            options = {"num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas,
                       "enable_fp_fusion": enable_fp_fusion}
            if cap is not None:
                options["maxnreg"] = cap
            compiled = triton.compile(GluonASTSource(fn, signature, constexprs=constants, attrs=attrs),
                                      target=GPUTarget("cuda", cc, 32), options=options)
            meta, ptx = compiled.metadata, compiled.asm["ptx"]
            if bool(meta.global_scratch_size) != declared:  # a scratch read from a real output: wrong results
                raise RuntimeError(f"{meta.name}: {meta.global_scratch_size} bytes of global scratch a program, its "
                                   f"launch declares {'a' if declared else 'no'} scratch output "
                                   "(ato_core.launch.scratch_buffer, its last)")
            if meta.global_scratch_size:
                ptx = scratch_from_last_output(ptx, meta.name, meta.global_scratch_align)
            cache[key] = lib.TritonKernel(meta.name, meta.num_warps, num_ctas, meta.shared, ptx, "", cc)
        return cache[key], attrs

    get_or_create.ato_gluon = True
    triton_lib.get_or_create_triton_kernel = get_or_create


def scratch_from_last_output(ptx: str, name: str, align: int) -> str:
    """The PTX of a kernel that uses Triton's global scratch (where TMA descriptors made in the
    kernel live), reading it from its last output instead. jaxlib passes that hidden parameter
    (the second-to-last; the last is the profiler's) as a null pointer, so a launch whose kernel
    needs it gives the kernel a last output of global_scratch_size x programs + align - 1 bytes;
    its address is rounded up to ``align`` here."""
    n = 1 + max(int(i) for i in re.findall(rf"\.param [^\n]*\b{name}_param_(\d+)\b", ptx))
    load = re.compile(rf"ld\.param\.b64 \t(%rd\d+), \[{name}_param_{n - 2}\];")

    def from_output(m):
        r = m[1]
        return (f"ld.param.b64 \t{r}, [{name}_param_{n - 3}];\n\tadd.s64 \t{r}, {r}, {align - 1};\n\t"
                f"and.b64 \t{r}, {r}, {-align};")

    ptx, found = load.subn(from_output, ptx)
    if found != 1:
        raise RuntimeError(f"{name}: expected one load of its global scratch parameter in the PTX, found {found}")
    return ptx


@functools.lru_cache(maxsize=None)
def gluon_launches() -> bool:
    """Whether the installed jax-triton can launch Gluon kernels (0.3.x, through
    _compile_gluon; 0.4.x compiles through the tl front end only)."""
    return not _api_04(import_jax_triton())


def _shape_dtype(buffer) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(buffer.shape, jnp.dtype(buffer.dtype))


def _api_04(jt) -> bool:
    """jax-triton 0.4.x: ``out_type`` and ``backend_options`` (0.3.x: ``out_shape`` and an
    ``enable_fp_fusion`` keyword, which 0.4.x would take for a kernel metaparameter)."""
    return "backend_options" in inspect.signature(jt.triton_call).parameters


def kernel_scalars(scalars, api_04: bool = False) -> tuple:
    """A launch's scalars as jax-triton must receive them to match torch's Triton launcher,
    where a Python float is an fp32 kernel argument. jax-triton 0.3.x passes a Python float
    as fp64 (the kernel then computes in fp64: slower, and different bits), so floats go as
    np.float32; 0.4.x types a float as fp32 when fp32 holds it (np.float32 is deprecated
    there), so floats go as the Python float of their fp32 value, np.float32 only where fp32
    would be subnormal (0.4.x would pick fp64). Integers and bools are unchanged."""
    tiny = np.finfo(np.float32).tiny

    def one(x):
        if not isinstance(x, float):
            return x
        x32 = np.float32(x)
        if api_04 and (x32 == 0 or abs(x32) >= tiny or not np.isfinite(x32)):
            return float(x32)
        return x32

    return tuple(one(x) for x in scalars)


def triton_call_kwargs(launch, api_04: bool) -> dict:
    """Keyword arguments of jax_triton.triton_call for one launch, for either API."""
    out = [_shape_dtype(b) for b in launch.outputs]
    kw = dict(kernel=launch.kernel, grid=launch.grid, num_warps=launch.num_warps, num_stages=launch.num_stages,
              zeroed_outputs=tuple(i for i, b in enumerate(launch.outputs) if b.zeroed), **launch.constexprs)
    aliases = {launch.inputs.index(b.alias): i for i, b in enumerate(launch.outputs) if b.alias}
    if aliases:  # indices among the array arguments, which come first
        kw["input_output_aliases"] = aliases
    if api_04:
        options = {"enable_fp_fusion": launch.fp_fusion}
        if launch.maxnreg:
            options["maxnreg"] = launch.maxnreg
        kw.update(out_type=out, backend_options=options)
    else:
        kw.update(out_shape=out, enable_fp_fusion=launch.fp_fusion)
        if launch.maxnreg:
            kw[MAXNREG] = launch.maxnreg  # (taken out by _take_maxnreg)
        if launch.scratch:
            kw[SCRATCH] = True  # (taken out by _compile_gluon)
    return kw


def _run_compiled(plan: Plan, env: dict) -> tuple:
    jt = import_jax_triton()
    api_04 = _api_04(jt)
    for launch in plan.launches:
        if launch.empty:  # nothing to launch (an empty input): zeros, or the aliased input
            env.update((b.name, env[b.alias] if b.alias else jnp.zeros(b.shape, b.dtype)) for b in launch.outputs)
            continue
        outs = jt.triton_call(*[env[name] for name in launch.inputs], *kernel_scalars(launch.scalars, api_04),
                              **triton_call_kwargs(launch, api_04))
        env.update((b.name, out) for b, out in zip(launch.outputs, outs))
    return tuple(env[name] for name in plan.results)


def _to_torch(a):
    import torch

    a = np.array(a, copy=True)
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _to_numpy(t):
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(jnp.bfloat16)
    return t.numpy()


def _run_interpreted(plan: Plan, env: dict, target: Target) -> tuple:
    names = tuple(env)
    result_specs = tuple(_shape_dtype(plan.buffer(name)) for name in plan.results)

    def host(*arrays):
        with interpreter.LOCK:  # the conversions too: the first imports torch, which parses source
            outs = interpreter.run_plan(plan, {n: _to_torch(a) for n, a in zip(names, arrays)})
            return tuple(_to_numpy(o.cpu()) for o in outs)

    return tuple(jax.pure_callback(host, result_specs, *[env[n] for n in names]))


def run_plan(plan: Plan, arrays: Mapping[str, jax.Array | None], target: Target) -> tuple:
    """Runs ``plan`` on JAX arrays (None for an absent optional input); returns its results.

    Under ``jax.vmap`` the plan (built for the unbatched shapes, which is what a vmapped
    function sees) runs once per mapped slice, in a loop (jax.custom_batching.sequential_vmap):
    jax-triton has no batching rule. ato_jax.folding calls this only where it cannot fold the
    mapped axis into the op's batch (one launch).
    """
    env = {name: x for name, x in arrays.items() if x is not None}
    names = tuple(env)

    @jax.custom_batching.sequential_vmap
    def run(*xs):
        inner = dict(zip(names, xs))
        if target.interpret:
            return _run_interpreted(plan, inner, target)
        return _run_compiled(plan, inner)

    return _varying_as(run(*[env[n] for n in names]), env.values())


def varying(x) -> frozenset:
    """The shard_map mesh axes along which x varies (its type's; empty outside shard_map)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "mat", None)  # JAX 0.10; later versions: aval.vma
    return frozenset(mat.varying) if mat is not None else frozenset(getattr(aval, "vma", ()))


def _varying_as(outs: tuple, inputs) -> tuple:
    """The results typed as varying along every mesh axis an input varies along: a kernel's
    results (a callback's, a triton_call's) come back typed invariant, which shard_map's type
    check refuses as a custom_vjp's gradient of a varying input."""
    want = frozenset().union(*[varying(x) for x in inputs])
    return outs if not want else tuple(typed_varying(o, want | varying(o)) for o in outs)


def typed_varying(x, axes: frozenset):
    """x typed as varying along exactly ``axes``: cast to varying where it is not, summed
    (psum) over the axes it varies along beyond them (the transpose of the implicit cast of an
    invariant input: its gradient)."""
    have = varying(x)
    extra, missing = tuple(have - axes), tuple(axes - have)
    if extra:
        x = jax.lax.psum(x, extra)
    if missing:
        x = jax.lax.pcast(x, missing, to="varying") if hasattr(jax.lax, "pcast") else jax.lax.pvary(x, missing)
    return x
