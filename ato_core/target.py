"""Where a plan will run: Triton's interpreter (any CPU array, or ATO_INTERPRET=1) or a
compiled CUDA kernel. Plans read only ``num_sms``, ``interpret`` and ``gluon`` from it."""

from __future__ import annotations

import dataclasses
import functools
import os


@dataclasses.dataclass(frozen=True)
class Target:
    interpret: bool
    num_sms: int
    # Whether plans may choose Hopper kernels written in Gluon (an sm_90 GPU, a Triton of
    # GLUON_TRITON, ATO_PORTABLE unset): the portable Triton kernels otherwise.
    gluon: bool = False


# The interpreter runs one program at a time; a small "SM count" keeps grids small while
# still giving several segments to the multi-program paths that the tests exercise.
INTERPRETER = Target(interpret=True, num_sms=4)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def force_interpret() -> bool:
    """True when ATO_INTERPRET is set to a true value: run the interpreter on a GPU too."""
    return _env_flag("ATO_INTERPRET")


def force_portable() -> bool:
    """True when ATO_PORTABLE is set to a true value: no Gluon (Hopper-only) kernels."""
    return _env_flag("ATO_PORTABLE")


# The Triton releases whose Gluon front end the Hopper kernels are written for and were run
# with (Gluon is experimental: 3.9 renamed thread_barrier to barrier, among others).
GLUON_TRITON = ("3.6.",)


@functools.lru_cache(maxsize=None)
def has_gluon() -> bool:
    """Whether the installed Triton is one of GLUON_TRITON, with Gluon's Hopper language."""
    import triton

    if not triton.__version__.startswith(GLUON_TRITON):
        return False
    try:
        from triton.experimental.gluon.language.nvidia import hopper  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def cuda_target(device_index: int = 0) -> Target:
    if force_interpret():
        return INTERPRETER
    from triton.runtime import driver

    props = driver.active.utils.get_device_properties(device_index)
    major, minor = driver.active.get_device_capability(device_index)
    hopper = (major, minor) == (9, 0) and not force_portable() and has_gluon()
    return Target(interpret=False, num_sms=int(props["multiprocessor_count"]), gluon=hopper)
