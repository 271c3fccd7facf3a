"""Launch descriptions: what a framework adapter needs to run a Triton kernel.

Every op's forward and backward is described here, once, as data: a :class:`Plan` is a
sequence of :class:`Launch` es, each naming a kernel, its grid, the arrays it reads (by
name), its runtime scalars, the buffers it writes and its constexprs. The adapters
(``ato_torch``, ``ato_jax``) only *execute* plans; they never choose a block size, a grid
or a dtype, so the two frameworks cannot drift apart.

Kernel signature convention (what jax-triton passes): input pointers, then runtime
scalars, then output pointers, then ``tl.constexpr`` s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

FLOAT_DTYPES = ("float16", "bfloat16", "float32")


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Shape, dtype name, element strides and device of an array an adapter holds.

    ``strides`` are in elements. JAX arrays are always row-major; torch tensors report
    their own strides, so a transposed view is read in place. ``device`` is only compared
    for equality (torch: ``str(tensor.device)``; JAX: a platform name).
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

    @property
    def name(self) -> str:
        fn = getattr(self.kernel, "fn", self.kernel)
        return getattr(fn, "__name__", repr(fn))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A sequence of launches and the names of the arrays handed back to the caller.

    ``dense`` names caller arrays that kernels address as row-major (small state
    tensors): a torch adapter makes them contiguous first; JAX arrays always are.
    """

    launches: tuple[Launch, ...]
    results: tuple[str, ...]
    dense: tuple[str, ...] = ()

    def buffer(self, name: str) -> Buffer:
        for launch in self.launches:
            for out in launch.outputs:
                if out.name == name:
                    return out
        raise KeyError(name)


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))
