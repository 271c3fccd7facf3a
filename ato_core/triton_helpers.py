"""@triton.jit helpers shared by every kernel family."""

import triton
import triton.language as tl


@triton.jit
def aligned(x, ALIGN: tl.constexpr):
    """``x`` (an integer argument: a size or a stride), declared a multiple of ALIGN.

    Integer arguments carry no divisibility specialisation in ato (jax-triton passes none,
    and torch's is switched off so that both compile the same binary, see
    ato_core.launch.Launch). The plan computes ALIGN from the actual values
    (ato_core.launch.alignment) and this rewrites x as (x // ALIGN) * ALIGN, an identity for
    such x from which the compiler infers the divisibility it needs to vectorise loads,
    stores and masks.
    """
    if ALIGN > 1:
        x = x // ALIGN * ALIGN
    return x
