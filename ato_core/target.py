"""Where a plan will run: Triton's interpreter (any CPU array, or ATO_INTERPRET=1) or a
compiled CUDA kernel. Plans read only ``num_sms`` and ``interpret`` from it."""

from __future__ import annotations

import dataclasses
import functools
import os


@dataclasses.dataclass(frozen=True)
class Target:
    interpret: bool
    num_sms: int


# The interpreter runs one program at a time; a small "SM count" keeps grids small while
# still giving several segments to the multi-program paths that the tests exercise.
INTERPRETER = Target(interpret=True, num_sms=4)


def force_interpret() -> bool:
    """True when ATO_INTERPRET is set to a true value: run the interpreter on a GPU too."""
    return os.environ.get("ATO_INTERPRET", "").strip().lower() not in ("", "0", "false", "no")


@functools.lru_cache(maxsize=None)
def cuda_target(device_index: int = 0) -> Target:
    if force_interpret():
        return INTERPRETER
    from triton.runtime import driver

    props = driver.active.utils.get_device_properties(device_index)
    return Target(interpret=False, num_sms=int(props["multiprocessor_count"]))
