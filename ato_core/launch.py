"""Launch descriptions: what a framework adapter needs to run a Triton kernel.

Every op's forward and backward is described here, once, as data: a :class:`Plan` is a
sequence of :class:`Launch` es, each naming a kernel, its grid, the arrays it reads (by
name), its runtime scalars, the buffers it writes and its constexprs. The adapters
(``ato_torch``, ``ato_jax``) only *execute* plans; they never choose a block size, a grid
or a dtype, so the two frameworks cannot drift apart.

Kernel signature convention (what jax-triton passes): input pointers, then runtime
scalars, then output pointers, then ``tl.constexpr`` s. A float scalar is an fp32 kernel
argument in both frameworks (ato_jax.launcher.kernel_scalars).

Specialisation. Both frameworks must compile one kernel into the same binary, so they must
specialise its arguments alike. jax-triton declares every pointer 16-byte aligned, turns
integers equal to 1 into constants, and says nothing of other integers; torch's Triton
launcher would also mark integers divisible by 16. Kernels are therefore declared with
:func:`kernel`, which switches that last marking off for their scalar arguments, and a kernel
learns what it may assume of its sizes and strides from an ``ALIGN`` constexpr that the plan
computes (:func:`alignment`; applied in the kernel by ato_core.triton_helpers.aligned).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, Mapping, NamedTuple, Optional, Sequence

FLOAT_DTYPES = ("float16", "bfloat16", "float32")
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "uint32": 4}


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (an ArraySpec's or a Buffer's)."""
    return _ITEMSIZE[dtype]


class ArraySpec(NamedTuple):
    """Shape, dtype name, element strides and device of an array an adapter holds.

    ``strides`` are in elements. JAX arrays are always row-major; torch tensors report
    their own strides, so a transposed view is read in place. ``device`` is only compared
    for equality (torch: ``str(tensor.device)``; JAX: a platform name). A NamedTuple: the
    adapters make several per call, and the plan caches hash them.
    """

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]
    device: str = "cpu"
    # Whether the data starts at a 16-byte aligned address (a JAX array's always does; a torch
    # view with a storage offset may not): kernels that copy 16-byte rows asynchronously need it.
    aligned: bool = True

    @property
    def ndim(self) -> int:
        return len(self.shape)


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


@dataclasses.dataclass(frozen=True)
class Buffer:
    """An array a launch writes: a result or an intermediate of the plan (row-major)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    zeroed: bool = False
    # The name of a launch input that this output overwrites in place: no new memory. The
    # input must be the plan's own intermediate (a buffer its caller handed over), never an
    # array the user still holds. (JAX: an input_output_alias, copied first if still live.)
    alias: str | None = None
    # A pointer the kernel takes but never reads or writes (a constexpr switches its use off:
    # an absent optional output). An adapter may pass any array of this dtype: ato_torch one
    # shared scratch tensor instead of an allocation per call; JAX an output of ``shape``.
    placeholder: bool = False
    # Triton's global scratch (scratch_buffer): a launch's last output, if any (Launch.scratch).
    scratch: bool = False


# Triton aligns its global scratch to at most this; ato_jax rounds the buffer's address up to it.
SCRATCH_ALIGN = 128


def scratch_buffer(name: str, grid: Sequence[int], per_program: int) -> Buffer:
    """A launch's global scratch (Launch.scratch): ``per_program`` bytes for each program of
    ``grid``, SCRATCH_ALIGN - 1 more for the rounding up (int32 words)."""
    return Buffer(name, (cdiv(math.prod(grid) * per_program + SCRATCH_ALIGN - 1, 4),), "int32", scratch=True)


def optional_output(name: str, shape: Sequence[int], dtype: str, present: bool, zeroed: bool = False) -> Buffer:
    """An output a kernel writes only when ``present`` (its constexpr switch on): the Buffer,
    else a (1,) placeholder of the same name and dtype that the kernel never touches."""
    if present:
        return Buffer(name, tuple(shape), dtype, zeroed=zeroed)
    return Buffer(name, (1,), dtype, placeholder=True)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch.

    ``inputs`` name arrays of the plan's environment (the caller's arguments or buffers
    written by earlier launches), in the kernel's pointer order; ``scalars`` follow them;
    then one pointer per entry of ``outputs``; then ``constexprs`` by keyword.
    """

    kernel: Any
    grid: tuple[int, ...]
    inputs: tuple[str, ...]
    scalars: tuple[Any, ...]
    outputs: tuple[Buffer, ...]
    constexprs: Mapping[str, Any]
    num_warps: int = 4
    num_stages: int = 2
    # Let the compiler contract a*b+c into FMAs (Triton's enable_fp_fusion). Off: torch's
    # Triton and XLA assemble the same PTX with different ptxas builds, and only PTX with no
    # contraction left to the assembler is sure to give both frameworks the same bits.
    fp_fusion: bool = False
    # A cap on registers a thread (Triton's maxnreg; None: the compiler's choice), so that more
    # programs fit an SM. It changes register allocation, not the instructions' results.
    maxnreg: Optional[int] = None
    # Filled by an adapter that launches compiled binaries itself (ato_torch.launcher): its
    # per-launch cache of them. Not part of the launch's description.
    compiled: dict = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self):
        check_launch(self)
        # every constexpr passed, defaults too: jax-triton 0.3.1 passes None for one left out
        defaults = constexpr_defaults(self.kernel)
        if any(n not in self.constexprs for n in defaults):
            object.__setattr__(self, "constexprs", {**defaults, **self.constexprs})

    @property
    def scratch(self) -> bool:
        """Whether the kernel uses Triton's global scratch (TMA descriptors made in the kernel):
        its last output is that scratch (scratch_buffer), which ato_torch hands to Triton's
        launcher as its allocation and ato_jax's PTX reads in place of the parameter jaxlib
        passes as null."""
        return bool(self.outputs) and self.outputs[-1].scratch

    @property
    def empty(self) -> bool:
        """A grid with no program (an empty input): the adapters allocate the outputs
        (zeroed ones zeroed, others empty or zeros) and launch nothing."""
        return 0 in self.grid

    @property
    def name(self) -> str:
        fn = getattr(self.kernel, "fn", self.kernel)
        return getattr(fn, "__name__", repr(fn))


def kernel(*, inputs: int, outputs: int, gluon: bool = False):
    """``@triton.jit`` for a kernel that plans launch, in the convention of this module:
    ``inputs`` input pointers, then runtime scalars, then ``outputs`` output pointers, then
    ``tl.constexpr`` s. Its scalars are not specialised on divisibility by 16, as jax-triton
    compiles them, so both frameworks build one binary (a kernel learns what it may assume
    from its ALIGN constexpr instead). :func:`check_launch` checks every Launch against it.
    ``gluon``: a Gluon kernel (``triton.experimental.gluon.jit``; compiled only, no
    interpreter: plans choose one only for a GPU that Target.gluon names)."""
    import inspect

    import triton

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        runtime = [p.name for p in params if "constexpr" not in str(p.annotation)]
        if [p.name for p in params[:len(runtime)]] != runtime:
            raise TypeError(f"{fn.__name__}: constexpr parameters must come last")
        if inputs + outputs > len(runtime):
            raise TypeError(f"{fn.__name__}: {inputs} input and {outputs} output pointers declared, but only "
                            f"{len(runtime)} runtime parameters")
        if gluon:
            from triton.experimental import gluon as gluon_front

            jit = gluon_front.jit
        else:
            jit = triton.jit
        jitted = jit(fn, do_not_specialize_on_alignment=runtime[inputs:len(runtime) - outputs])
        jitted.ato_io = (inputs, outputs)
        return jitted

    return wrap


def constexpr_defaults(kernel) -> dict:
    """{name: default} of a kernel's constexprs that have a default."""
    got = getattr(kernel, "ato_constexpr_defaults", None)
    if got is None:
        params = inspect.signature(kernel.fn).parameters
        got = {p.name: params[p.name].default for p in kernel.params
               if p.is_constexpr and params[p.name].default is not inspect.Parameter.empty}
        kernel.ato_constexpr_defaults = got
    return got


def check_launch(launch: "Launch") -> None:
    """A launch matches its kernel's signature (declared by :func:`kernel`): as many input
    pointers, scalars and output pointers, constexprs that the kernel has, and every
    constexpr without a default. Raises TypeError naming the kernel: at plan time, on any
    machine, instead of a wrong launch on the device."""
    io = getattr(launch.kernel, "ato_io", None)
    if io is None:
        raise TypeError(f"{launch.name}: not declared with ato_core.launch.kernel(inputs=, outputs=)")
    n_in, n_out = io
    params = launch.kernel.params
    runtime = sum(not p.is_constexpr for p in params)
    got = (len(launch.inputs), len(launch.scalars), len(launch.outputs))
    want = (n_in, runtime - n_in - n_out, n_out)
    if got != want:
        raise TypeError(f"{launch.name}: expected (inputs, scalars, outputs) = {want}, got {got}")
    if any(b.scratch for b in launch.outputs[:-1]):
        raise TypeError(f"{launch.name}: a global scratch buffer (scratch_buffer) must be the last output")
    names = {p.name: p for p in params if p.is_constexpr}
    unknown = sorted(set(launch.constexprs) - set(names))
    missing = sorted(n for n, p in names.items() if n not in launch.constexprs and p.default is inspect.Parameter.empty)
    if unknown or missing:
        raise TypeError(f"{launch.name}: constexprs not in its signature {unknown}, missing {missing}")


def alignment(*values: int, limit: int = 16) -> int:
    """The largest power of two <= ``limit`` that divides every value (0 divides by
    anything): the ALIGN constexpr that lets a kernel vectorise over these sizes/strides."""
    a = limit
    for v in values:
        v = abs(int(v))
        if v:
            a = min(a, v & -v)
    return a


def row_alignment(sizes: Sequence[int], arrays: Sequence["ArraySpec"]) -> int:
    """ALIGN of a launch over [..., rows, features] arrays: divides the feature sizes and every
    stride but the last (contiguous) one of the arrays it reads. What a launch writes is
    row-major, its strides multiples of the feature sizes, so it needs no term here."""
    return alignment(*sizes, *(st for a in arrays for st in a.strides[:-1]))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A sequence of launches and the names of the arrays handed back to the caller.

    ``dense`` names caller arrays that kernels address as row-major (small state
    tensors): a torch adapter makes them contiguous first; JAX arrays always are.
    """

    launches: tuple[Launch, ...]
    results: tuple[str, ...]
    dense: tuple[str, ...] = ()
    # An adapter's per-plan memo (ato_torch: its prepared steps, the backward plan of a
    # forward plan). Plans are cached, so what is derived once from one is derived once.
    # Not part of the plan's description.
    memo: dict = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    def memoised(self, key, build):
        """``build()``, kept in ``memo`` under ``key``: what an adapter derives from this plan
        alone (and ``key``) is derived once."""
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = build()
        return got

    def renamed(self, names: Mapping[str, str]) -> "Plan":
        """The same plan reading its inputs under other names (``names``: old -> new)."""
        launches = tuple(dataclasses.replace(launch, inputs=tuple(names.get(n, n) for n in launch.inputs))
                         for launch in self.launches)
        return Plan(launches, tuple(names.get(n, n) for n in self.results), tuple(names.get(n, n) for n in self.dense))

    def external(self) -> set:
        """The names its launches read that no launch of it writes: the plan's inputs."""
        written, out = set(), set()
        for launch in self.launches:
            out.update(n for n in launch.inputs if n not in written)
            written.update(b.name for b in launch.outputs)
        return out

    def buffer(self, name: str) -> Buffer:
        for launch in self.launches:
            for out in launch.outputs:
                if out.name == name:
                    return out
        raise KeyError(name)


def cached_plan(fn):
    """Memoises a plan constructor on its (hashable) arguments: specs, flags, the Target.

    A plan depends on nothing else, and building one (argument checks, configuration,
    launch descriptions) costs tens of microseconds of Python per call, as much as a short
    kernel. Unhashable arguments skip the cache; errors are raised afresh every call.
    ``cache_clear()`` empties it (after changing a module-level tuning constant).
    """
    cache = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def plan(*args, **kwargs):
        try:
            return cache(*args, **kwargs)
        except TypeError:  # an unhashable argument, or fn's own TypeError: fn raises it again
            pass  # (outside the except clause, so that error is not chained to this one)
        return fn(*args, **kwargs)

    plan.cache_clear = cache.cache_clear
    return plan


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))
