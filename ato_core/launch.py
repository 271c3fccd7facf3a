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
launcher would also mark integers divisible by 16. A Launch therefore switches that last
marking off for its scalar arguments, and a kernel learns what it may assume of its sizes
and strides from an ``ALIGN`` constexpr that the plan computes (:func:`alignment`; applied
in the kernel by ato_core.kernels.common.aligned).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, NamedTuple, Sequence

FLOAT_DTYPES = ("float16", "bfloat16", "float32")
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}


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

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_row_major(self) -> bool:
        return all(st == rs for st, rs, n in zip(self.strides, row_major_strides(self.shape), self.shape) if n > 1)


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
    # Filled by an adapter that launches compiled binaries itself (ato_torch.launcher): its
    # per-launch cache of them. Not part of the launch's description.
    compiled: dict = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self):
        _no_alignment_specialisation(self.kernel, len(self.inputs), len(self.scalars))

    @property
    def name(self) -> str:
        fn = getattr(self.kernel, "fn", self.kernel)
        return getattr(fn, "__name__", repr(fn))


def _no_alignment_specialisation(kernel, first: int, count: int) -> None:
    """Marks a JITFunction's scalar parameters [first, first + count) as not specialised on
    divisibility by 16 (as jax-triton compiles them). Idempotent; drops the compiled-kernel
    caches the first time, so no binary compiled under the old rule is reused."""
    params = getattr(kernel, "params", None)
    if params is None:
        return
    changed = False
    for p in params[first:first + count]:
        if not p.do_not_specialize_on_alignment:
            p.do_not_specialize_on_alignment = True
            changed = True
    if changed and hasattr(kernel, "device_caches"):
        kernel.device_caches.clear()


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
