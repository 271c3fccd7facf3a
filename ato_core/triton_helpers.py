"""@triton.jit helpers shared by every kernel family."""

import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

TWO_LOG2E = tl.constexpr(2.8853900817779268)  # e^(2 x) = 2^(x TWO_LOG2E)


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


@triton.jit
def widen(x):
    """x in its accumulation dtype: float64 stays float64 (the row ops' gradcheck precision);
    every other dtype becomes float32."""
    if x.dtype == tl.float64:
        return x
    else:
        return x.to(tl.float32)


@triton.jit
def const_like(value: tl.constexpr, x):
    """The float ``value`` as a scalar of x's dtype. A float constexpr is an fp32 constant
    wherever no operand promotes it (tl.fma's operands, for one), so a float64 kernel would
    compute with it rounded to fp32; the interpreter keeps it exact."""
    return tl.full([], value, x.dtype)


@triton.jit
def tanh_rcp(x, scale, num):
    """num / (1 + e^(2 scale x)) (fp32, scale > 0): tanh(scale x) = 1 - tanh_rcp(x, scale, 2),
    and a cap c times it c - tanh_rcp(x, scale, 2 c). To an absolute error of a few 2^-24 of
    num, NaN for NaN: for a softcapped score, whose absolute error is what a softmax sees. One
    exp2 and one approximate division (MUFU.RCP and a multiply; libdevice.fast_dividef, which
    Triton's interpreter runs as a division): the denominator lies in [1, inf], where it needs
    no range fix-up (inf gives 0, as it should)."""
    return libdevice.fast_dividef(num, 1.0 + tl.exp2(x * (scale * TWO_LOG2E)))


@triton.jit
def tanh_slope(x, scale):
    """(r, s) of x (fp32 or fp64, scale > 0): r = 1 / (1 + e) with e = e^(2 scale x), so that
    tanh(scale x) = 1 - 2 r to an absolute few ulps of 1 (fp32: the approximate reciprocal of
    tanh_rcp), and s = 1 - tanh^2 = 4 e r^2, its slope, accurate relatively also where tanh
    saturates (0 where e overflows); NaN for NaN."""
    if x.dtype == tl.float64:  # (scale, an fp32 argument, times the constant would round to fp32)
        e = tl.exp2((x * scale) * TWO_LOG2E)
        r = 1.0 / (1.0 + e)
    else:
        e = tl.exp2(x * (scale * TWO_LOG2E))
        r = libdevice.fast_dividef(1.0, 1.0 + e)
    return r, tl.where(e == float("inf"), 0.0, 4.0 * (e * r) * r)


@triton.jit
def tanh_abs(x, scale):
    """tanh(scale * x) (fp32, scale > 0) to an absolute error of a few 2^-24: tanh_rcp."""
    return 1.0 - tanh_rcp(x, scale, 2.0)


@triton.jit
def dropout_seed(SEED, seed, SEED_WORDS: tl.constexpr):
    """A dropout seed: the scalar ``seed`` (SEED_WORDS 0), or read by the kernel, so that one
    compiled kernel serves every seed: SEED_WORDS 1, a 0-d integer array; 2, two uint32 words,
    high first (a JAX key's data). Seed s reads the same whichever way it comes."""
    if SEED_WORDS == 1:
        return tl.load(SEED)
    elif SEED_WORDS == 2:
        hi = tl.load(SEED).to(tl.uint32, bitcast=True).to(tl.uint64)
        lo = tl.load(SEED + 1).to(tl.uint32, bitcast=True).to(tl.uint64)
        return (hi << 32) | lo
    else:
        return seed
