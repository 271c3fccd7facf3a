"""Shared by the CPU-tier test modules: one op case run in both frameworks and the reference."""

import contextlib
import os

import chex
import numpy as np
import pytest
import triton
import triton.language as tl

from ato_cli import harness as h
from ato_core.triton_helpers import tanh_abs, tanh_slope

# The slow tier: heavy variants of tests whose other variants run every time (each 15-60 s of a
# CPU). ATO_SLOW_TESTS=1 runs them (each GPU session's CPU-tier run); CI runs without them.
RUN_SLOW = bool(os.environ.get("ATO_SLOW_TESTS"))
SLOW = pytest.mark.skipif(not RUN_SLOW, reason="the slow tier: ATO_SLOW_TESTS=1 runs it")


def slow_variants(values, slow):
    """Parametrize values with those in ``slow`` marked SLOW."""
    return [pytest.param(v, marks=SLOW) if v in slow else v for v in values]


def cases_of(op: str):
    """The ato_core.ops.<family>.cases module of ``op`` (its test cases, fuzz strategy, MAGNITUDES)."""
    import importlib

    from ato_core.ops import OPS

    return importlib.import_module(f"ato_core.ops.{OPS[op].family}.cases")


def first_cases(gpu: bool, dtype: str) -> dict:
    """{op: the first of its family's check cases (ato check's, quick) in ``dtype``}, at the GPU's
    sizes or the CPU's: one case an op (test_torch_compile, test_gpu's CUDA-graph test)."""
    import importlib

    from ato_core.ops import FAMILIES

    out = {}
    for family in FAMILIES:
        for case in importlib.import_module(family.__name__ + ".cases").check_cases(gpu, dtype, True):
            out.setdefault(case.op, case)
    return out


def check(case, inputs=None):
    """Runs ``case`` in ato_torch, in ato_jax (jit(value_and_grad)) and in the float64
    reference; asserts every output and gradient within the dtype's tolerance
    (ato_cli.harness.TOLERANCE) and the two frameworks bitwise equal (on the CPU both run
    the identical interpreted kernels). Returns (torch, jax, reference) results."""
    inputs = h.make_inputs(case) if inputs is None else inputs
    t = h.run_torch(case, inputs)
    j = h.run_jax(case, inputs)
    r = h.run_torch(case, inputs, reference=True)
    tol = h.TOLERANCE[case.dtype]
    # NaN exactly where the reference has it (a NaN the math gives, such as cross_entropy's mean
    # over targets all ignore_index, is the right result), the rest within tolerance
    for name, res in (("torch", t), ("jax", j)):
        for i, (a, b) in enumerate(zip(res.outputs, r.outputs)):
            compare_special(f"{name} output {i}", a, b, tol, h.FLOOR_RMS)
        for n in r.grads:
            compare_special(f"{name} d{n}", res.grads[n], r.grads[n], tol, h.FLOOR_RMS)
    # Same interpreter, same plan: identical bits (chex for the JAX-side comparison).
    chex.assert_trees_all_equal(t.outputs, j.outputs)
    chex.assert_trees_all_equal(t.grads, j.grads)
    return t, j, r


def frontend(framework):
    """(the ato adapter module, its array-from-numpy function) of ``framework``, "torch" or
    "jax": for the tests that call an op in each framework by hand."""
    if framework == "torch":
        import torch

        import ato_torch
        return ato_torch, torch.from_numpy
    import jax.numpy as jnp

    import ato_jax
    return ato_jax, jnp.asarray


def bad_input_arrays(framework, shapes, seed=0):
    """For the bad-input tests: {name: array of ``framework``} of uniform fp32 values by shape,
    and "q_int", an int32 array of q's shape."""
    rng = np.random.default_rng(seed)
    arr = frontend(framework)[1]
    x = {n: arr(rng.random(s).astype(np.float32)) for n, s in shapes.items()}
    x["q_int"] = arr(np.ones(shapes["q"], np.int32))
    return x


def raises_naming(exc, fragment, fn, *args, **kwargs):
    """fn(*args, **kwargs) raises ``exc`` with ``fragment`` in its message."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert fragment in str(info.value)


def causal_masked(case) -> bool:
    """Whether ``case`` is masked attention: causal (an op with a ``causal`` argument, called
    with it true or defaulting to true) or restricted to some key blocks (Case option
    "block_masked": a block mask drawn with entries false, or one the op chooses), whose
    kernels skip or select away masked entries that the dense reference multiplies by a zero
    weight (``check_special``'s ``masked``)."""
    import inspect

    from ato_core.ops import OPS

    if dict(case.options).get("block_masked"):
        return True
    default = inspect.signature(OPS[case.op].signature).parameters.get("causal")
    return bool(dict(case.kwargs).get("causal", default.default if default else False))


def declared(op: str, table: str) -> tuple:
    """What ``op``'s family declares for it in cases.<table>, () where nothing: the inputs whose
    gradients a huge magnitude leaves undetermined to the dtype's tolerance (CANCELLING), the
    inputs whose infinity may come out NaN where the reference's output is infinite (INF_AS_NAN:
    values a kernel weights by probabilities that can round to zero, check_special's
    ``inf_as_nan``)."""
    return getattr(cases_of(op), table, {}).get(op, ())


def check_special(case, inputs, device="cpu", masked=False, cancelling=(), grads=True, note="", inf_as_nan=False):
    """``check`` for inputs holding NaN, infinities or extreme magnitudes: in every output and
    gradient, NaN and each infinity exactly where the float64 reference (torch autograd) has
    them, the finite entries within the dtype's tolerance, and the two frameworks bitwise
    equal (NaN included). The absolute floor of the comparison (ato_cli.harness.rel_err)
    shrinks with the case's magnitude, so that tiny values are compared relative to their
    size. With ``masked`` (causal attention), an output need only be NaN somewhere exactly
    when the reference's is, and a gradient's NaN are not compared: a NaN meets a zero weight
    (0 * NaN) at masked entries that the dense reference computes everywhere and a kernel
    only in the blocks it visits (none for a query that sees no key), so neither has the
    NaN-free pattern of the math there. With an infinity among the inputs, masked outputs'
    NaN are not compared at all: the dense reference's 0 * inf is NaN at masked entries, which a
    kernel may never meet. The entries finite in both agree within tolerance.
    ``cancelling``: inputs whose gradients the dtype does not determine here (dq of attention
    whose softmax is one-hot, a cancellation; its dv at scores of 1e5, cases.CANCELLING): only
    their NaN and infinities are compared.
    Without ``grads``, gradients are compared between the frameworks only. ``inf_as_nan``: an
    output may be NaN where the reference's is infinite (an infinity in one of
    declared(op, "INF_AS_NAN")).
    ``note`` follows the case's label in the messages (where the special value is). Returns
    (torch, jax, reference) results."""
    from ato_core.testing import magnitude_of

    t = h.run_torch(case, inputs, device)
    j = h.run_jax(case, inputs)
    r = h.run_torch(case, inputs, device, reference=True)
    tol = h.TOLERANCE[case.dtype]
    floor = h.FLOOR_RMS * min(1.0, magnitude_of(case))
    pairs = [(f"output {i}", a, b, c) for i, (a, b, c) in enumerate(zip(t.outputs, j.outputs, r.outputs))]
    pairs += [(f"d{n}", t.grads[n], j.grads[n], r.grads[n]) for n in r.grads]
    ints = {n for n, *_ in case.int_inputs}
    infinite = any(np.isinf(x.astype(np.float32)).any() for n, x in inputs.items() if n not in ints)
    for what, a, b, ref in pairs:
        assert np.array_equal(a, b, equal_nan=True), f"{case.label}{note}: {what}: torch and JAX differ"
        if what.startswith("d") and not grads:
            continue
        loose = masked and (what.startswith("d") or infinite)  # NaN not compared
        compare_special(f"{case.label}{note}: {what}", a, ref, tol, floor, masked and not loose, loose,
                        what in {"d" + n for n in cancelling}, inf_as_nan)
    return t, j, r


def compare_special(what, a, ref, tol, floor, nan_anywhere=False, nan_any=False, cancelling=False, inf_as_nan=False):
    """check_special's comparison of one result ``a`` with the float64 reference ``ref``: NaN and
    each infinity exactly where ``ref`` has them, the entries finite in both within ``tol``
    (ato_cli.harness.rel_err with ``floor``). ``nan_anywhere``: a NaN need only be somewhere in
    ``a`` exactly when ``ref`` has one; ``nan_any``: NaN not compared at all (check_special's
    masked outputs and gradients); ``cancelling``: the finite entries not compared; ``inf_as_nan``:
    NaN in ``a`` where ``ref`` is infinite agrees (check_special's)."""
    with np.errstate(over="ignore"):  # a true value past fp32's range is an infinity there
        ref = np.where(np.isfinite(ref), ref.astype(np.float32), ref).astype(np.float64)
    if inf_as_nan:
        ref = np.where(np.isinf(ref) & np.isnan(a), np.nan, ref)
    nan = np.isnan(ref)
    if nan_anywhere:
        assert np.isnan(a).any() == nan.any(), f"{what}: NaN {np.isnan(a).any()}, reference {nan.any()}"
    if nan_anywhere or nan_any:
        ref = np.where(np.isnan(a), np.nan, ref)
        nan = np.isnan(ref)
        a = np.where(nan, np.nan, a)
    assert np.array_equal(np.isnan(a), nan), (
        f"{what}: NaN at {np.argwhere(np.isnan(a) != nan)[:4].tolist()} (ato {np.isnan(a).sum()}, reference "
        f"{nan.sum()} NaN)")
    inf = np.isinf(ref)
    assert np.array_equal(a[inf], ref[inf]) and not np.isinf(a[~inf]).any(), f"{what}: infinities differ"
    if cancelling:
        return
    fin = np.isfinite(ref)
    err = h.rel_err(a[fin], ref[fin], floor)
    assert err < tol, f"{what}: {err:.3g} >= {tol} over the finite entries"

UNSEEN_KEY_CASES = ("window", "mask", "mask q_lengths", "segments", "segments causal", "block_sparse causal")
# those the Gluon kernels take (bf16, D 128 on sm_90), at sizes where the unseen key shares a tile
# with seen ones: the first tile below the window, a tile of segments, the diagonal tile of a block
# no later query block keeps; the value: whether the backward runs Gluon kernels too
GLUON_UNSEEN_KEY_CASES = {"window": True, "segments": False, "block_sparse causal": True}


def _gluon_unseen_key_case(name):
    """(case, key, given inputs) of GLUON_UNSEEN_KEY_CASES ``name``."""
    from ato_core.ops.block_sparse.cases import bs_case
    from ato_core.ops.flash_attention.cases import fa_case

    if name == "window":  # query i sees keys [i + 200, i + 300]: none sees keys 0-199
        return fa_case(1, 2, 1, 200, 500, 128, "bfloat16", causal=True, window=(100, None)), 150, {}
    if name == "segments":  # key 50 alone in segment 2, which no query is in
        q_seg = np.repeat([[0, 1]], [100, 156], axis=1)
        kv_seg = q_seg.copy()
        kv_seg[0, 50] = 2
        case = fa_case(1, 2, 1, 256, 256, 128, "bfloat16", segments=3)
        return case, 50, {"q_segment_ids": q_seg, "kv_segment_ids": kv_seg}
    block_mask = np.ones((1, 1, 3, 4), bool)  # query block 0 sees keys up to 143; blocks 1, 2 drop key block 1
    block_mask[0, 0, 1:, 1] = False
    case = bs_case(1, 1, 1, 384, 400, 128, 128, causal=True, dtype="bfloat16")
    return case, 200, {"block_mask": block_mask}


def _unseen_key_case(name, gluon=False):
    """(case, inputs, key): fp32 inputs (the portable kernels; with ``gluon``, bf16 ones of
    GLUON_UNSEEN_KEY_CASES) in which no query sees key ``key``, whose key and value hold a NaN
    (with q_lengths, so does a padded query)."""
    from ato_core.ops.block_sparse.cases import bs_case
    from ato_core.ops.flash_attention.cases import fa_case

    if gluon:
        case, key, given = _gluon_unseen_key_case(name)
    elif name == "window":  # query i sees keys [i + 5, i + 19]: none sees keys 0-4
        case, key, given = fa_case(1, 1, 1, 9, 28, 16, causal=True, window=(14, 13)), 2, {}
    elif name == "mask":  # key 3 masked for every query
        mask = np.ones((40, 40), bool)
        mask[:, 3] = False
        case, key, given = fa_case(1, 1, 1, 40, 40, 16, mask="pairs"), 3, {"mask": mask}
    elif name == "mask q_lengths":  # key 3 seen only by rows 30-39, past q_lengths (30)
        mask = np.ones((40, 40), bool)
        mask[:30, 3] = False
        case = fa_case(1, 1, 1, 40, 40, 16, mask="pairs", lengths="q")
        key, given = 3, {"mask": mask, "q_lengths": np.array([30])}
    elif name == "block_sparse causal":  # key 26 (block 1): past query block 0's diagonal, blocks 1, 2 drop it
        block_mask = np.ones((1, 1, 3, 4), bool)
        block_mask[0, 0, 1:, 1] = False
        case, key, given = bs_case(1, 1, 1, 48, 50, 16, 16, causal=True), 26, {"block_mask": block_mask}
    else:  # key 3 alone in segment 2, which no query is in
        q_seg = np.repeat([[0, 1]], [10, 30], axis=1)
        kv_seg = q_seg.copy()
        kv_seg[0, 3] = 2
        case = fa_case(1, 1, 1, 40, 40, 16, causal=name == "segments causal", segments=3)
        key, given = 3, {"q_segment_ids": q_seg, "kv_segment_ids": kv_seg}
    inputs = h.make_inputs(case)
    for n, a in given.items():
        inputs[n] = a.astype(inputs[n].dtype)
    inputs["k"][0, 0, key, 7] = np.nan
    inputs["v"][0, 0, key, 5] = np.nan
    if "q_lengths" in given:
        inputs["q"][0, 0, -1, 2] = np.nan
    return case, inputs, key


def unseen_nan_results(name, device, gluon=False):
    """(key, torch's, JAX's) results (ato_cli.harness.Result) of UNSEEN_KEY_CASES ``name`` (gluon:
    _unseen_key_case's), torch's on ``device``, and the number of query rows below q_lengths (all
    without)."""
    case, inputs, key = _unseen_key_case(name, gluon)
    q_len = int(inputs["q_lengths"][0]) if "q_lengths" in inputs else inputs["q"].shape[2]
    return key, h.run_torch(case, inputs, device), h.run_jax(case, inputs), q_len


def check_unseen_nan_value(name, device, gluon=False):
    """A NaN in the key and the value of a key no query sees (UNSEEN_KEY_CASES ``name``) and in
    a padded query reaches no output and no gradient, as in the math, which never reads them (the
    kernels read such keys and values as 0 in the tiles they visit, where a zero weight would
    meet them: 0 * NaN); dk and dv of that key are 0; torch and JAX bitwise equal.
    Every output and gradient is finite but lse (output 1) past q_lengths, which is -inf."""
    key, t, j, q_len = unseen_nan_results(name, device, gluon)
    lse = t.outputs[1]
    assert np.isneginf(lse[..., q_len:]).all(), f"{name}: lse past q_lengths is not -inf"
    lse = lse[..., :q_len]
    arrays = [("output 0", t.outputs[0]), ("output 1", lse)] + [(f"d{n}", g) for n, g in t.grads.items()]
    for what, a in arrays:
        assert np.isfinite(a).all(), f"{name}: torch {what} has {np.isnan(a).sum()} NaN"
    for n in ("k", "v"):
        assert not t.grads[n][0, 0, key].any(), f"{name}: d{n} of the unseen key is not 0"
    assert h.bitwise_equal(t, j), f"{name}: torch and JAX differ"


@triton.jit
def bf16_cast_kernel(X, Y, Z, n, BLOCK: tl.constexpr):
    """Stores fp32 values to bf16 twice, by a store's implicit cast (Y) and by an explicit
    ``.to`` (Z): ``bf16_cast_kernel[(1,)](x, y, z, n, BLOCK=...)``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    tl.store(Y + offs, x, mask=mask)
    tl.store(Z + offs, x.to(tl.bfloat16), mask=mask)


@triton.jit
def bf16_ops_kernel(X, Y, OUT, FLAGS, INTS, HALF, n, BLOCK: tl.constexpr):
    """bf16 arithmetic on bf16 X, Y without widening: OUT [7, n] bf16 (x + y, x - y, x * y,
    x / y, -x, tl.minimum, tl.maximum), FLAGS [3, n] int8 (x < y, x == x, x - x == 0), INTS [n] int32
    (x truncated), HALF [n] fp16 (x): ``bf16_ops_kernel[(1,)](x, y, out, flags, ints, half, n, BLOCK=...)``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    y = tl.load(Y + offs, mask=mask, other=1.0)
    tl.store(OUT + offs, x + y, mask=mask)
    tl.store(OUT + n + offs, x - y, mask=mask)
    tl.store(OUT + 2 * n + offs, x * y, mask=mask)
    tl.store(OUT + 3 * n + offs, x / y, mask=mask)
    tl.store(OUT + 4 * n + offs, -x, mask=mask)
    tl.store(OUT + 5 * n + offs, tl.minimum(x, y), mask=mask)
    tl.store(OUT + 6 * n + offs, tl.maximum(x, y), mask=mask)
    tl.store(FLAGS + offs, (x < y).to(tl.int8), mask=mask)
    tl.store(FLAGS + n + offs, (x == x).to(tl.int8), mask=mask)
    tl.store(FLAGS + 2 * n + offs, (x - x == 0).to(tl.int8), mask=mask)
    tl.store(INTS + offs, x.to(tl.int32), mask=mask)
    tl.store(HALF + offs, x.to(tl.float16), mask=mask)


def bf16_ops_values():
    """bf16 pairs for bf16_ops_kernel: both signs, magnitudes 2^-10..2^10, zeros, ties, NaN, ±inf."""
    import torch

    rng = np.random.default_rng(5)
    n = 512
    x = rng.standard_normal(n) * np.exp2(rng.integers(-10, 11, n))
    y = rng.standard_normal(n) * np.exp2(rng.integers(-10, 11, n))
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.inf, 1.0, -3.0]
    y[:8] = [1.0, np.inf, 2.0, -0.0, 0.0, -np.inf, np.nan, -3.0]
    return (torch.from_numpy(x.astype(np.float32)).bfloat16(), torch.from_numpy(y.astype(np.float32)).bfloat16())


def run_bf16_ops(device: str) -> dict:
    """bf16_ops_kernel's results on bf16_ops_values, interpreted (device "cpu") or compiled,
    next to torch's bf16 arithmetic on the same values (key "torch")."""
    import torch

    from ato_core import interpreter

    x, y = (v.to(device) for v in bf16_ops_values())
    n = len(x)
    out = torch.empty(7, n, dtype=torch.bfloat16, device=device)
    flags = torch.empty(3, n, dtype=torch.int8, device=device)
    ints = torch.empty(n, dtype=torch.int32, device=device)
    half = torch.empty(n, dtype=torch.float16, device=device)
    launch = interpreter.interpreted(bf16_ops_kernel) if device == "cpu" else bf16_ops_kernel
    launch[(1,)](x, y, out, flags, ints, half, n, BLOCK=512)
    x, y = x.cpu(), y.cpu()
    finite = torch.isfinite(x)
    ref_ints = torch.where(finite, x, torch.zeros_like(x)).to(torch.int32)
    return {"out": out.cpu(), "flags": flags.cpu(), "ints": ints.cpu(), "half": half.cpu(), "finite": finite,
            "torch": (torch.stack([x + y, x - y, x * y, x / y, -x, torch.fmin(x, y), torch.fmax(x, y)]),
                      torch.stack([x < y, x == x, x - x == 0]).to(torch.int8), ref_ints, x.half())}


def check_bf16_ops(got: dict) -> None:
    """run_bf16_ops's results against torch's bf16 arithmetic, bit for bit: each is one IEEE
    operation rounded once (min / max drop a NaN operand, as tl.minimum's default does)."""
    import torch

    exact, flags, ints, half = got["torch"]
    out = got["out"]
    for i, name in enumerate(("x + y", "x - y", "x * y", "x / y", "-x", "min", "max")):
        a, b = out[i], exact[i]
        if name in ("-x", "min", "max"):  # zero's sign free: Triton 3.6's -x is 0 - x; min(+0, -0) either
            zero = (a == 0) & (b == 0)
            a, b = torch.where(zero, 0, a), torch.where(zero, 0, b)
        assert torch.equal(torch.isnan(a), torch.isnan(b)), f"{name}: NaN differs"
        keep = ~torch.isnan(b)
        bad = torch.nonzero(keep & (a.view(torch.int16) != b.view(torch.int16))).flatten()[:4].tolist()
        assert not bad, f"{name}: bits differ at {bad}: {a[bad].tolist()} vs torch {b[bad].tolist()}"
    assert torch.equal(got["flags"], flags), "comparisons differ"
    assert torch.equal(got["ints"][got["finite"]], ints[got["finite"]]), "bf16 -> int32 differs"
    assert torch.equal(torch.isnan(got["half"]), torch.isnan(half))
    assert torch.equal(got["half"][~torch.isnan(half)], half[~torch.isnan(half)]), "bf16 -> fp16 differs"


@triton.jit
def min_max_kernel(X, Y, OUT, n, BLOCK: tl.constexpr):
    """OUT [4, n]: tl.minimum and tl.maximum of X and Y, by default and with
    propagate_nan=ALL: ``min_max_kernel[(1,)](x, y, out, n, BLOCK=...)``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(OUT + offs, tl.minimum(x, y), mask=mask)
    tl.store(OUT + n + offs, tl.maximum(x, y), mask=mask)
    tl.store(OUT + 2 * n + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)
    tl.store(OUT + 3 * n + offs, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)


@triton.jit
def tanh_slope_kernel(X, R, S, n, scale, BLOCK: tl.constexpr):
    """R, S = triton_helpers.tanh_slope(X, scale) (fp32): ``tanh_slope_kernel[(1,)](x, r, s, n, scale, BLOCK=...)``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    r, slope = tanh_slope(tl.load(X + offs, mask=mask), scale)
    tl.store(R + offs, r, mask=mask)
    tl.store(S + offs, slope, mask=mask)


@triton.jit
def tanh_abs_kernel(X, Y, n, scale, BLOCK: tl.constexpr):
    """Y = triton_helpers.tanh_abs(X, scale) (fp32): ``tanh_abs_kernel[(1,)](x, y, n, scale, BLOCK=...)``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tanh_abs(tl.load(X + offs, mask=mask), scale), mask=mask)


@triton.jit
def _add_one(x):
    return x + 1.0


@triton.jit
def helper_calls_kernel(X, BLOCK: tl.constexpr):
    """X[:BLOCK] += 4, by four calls of a @triton.jit helper."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in tl.static_range(4):
        x = _add_one(x)
    tl.store(X + offs, x)


def bf16_rounding_values():
    """fp32 values whose bf16 rounding is easy to get wrong: ties (to even, up and down), the
    overflow to inf past bf16's largest value, subnormals, signed zero, NaN and infinities,
    then random values over the whole exponent range."""
    import numpy as np

    special = [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 3 * 2**-8), 3.4e38, 3.3895e38,
               np.inf, -np.inf, np.nan, 1e-39, 3e-41, -1e-45, -0.0, 0.0]
    rng = np.random.default_rng(0)
    rand = rng.standard_normal(2000) * 10.0 ** rng.uniform(-44, 38, 2000)
    return np.concatenate([np.array(special), rand]).astype(np.float32)


def assert_bnhd_is_bhnd(op: str, q, k, v, cotangent, extra=(), **kwargs):
    """``op`` (an attention op with ``layout``) called on [B, N, H, D] arrays with
    layout="bnhd" gives, in torch and in JAX, bitwise the bhnd call's output and gradients of
    q, k, v, transposed (the kernels do the same arithmetic in the same order; only the
    strides differ). q, k, v, cotangent: [B, H, N, D] NumPy arrays (cotangent o's shape);
    extra: NumPy arrays passed after q, k, v as they are (a block mask)."""
    import jax
    import jax.numpy as jnp
    import torch

    import ato_jax
    import ato_torch

    sw = (0, 2, 1, 3)

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    def t_run(arrays, cot, layout):
        ts = [torch.from_numpy(np.ascontiguousarray(a)).requires_grad_() for a in arrays]
        o = first(getattr(ato_torch, op)(*ts, *map(torch.from_numpy, extra), layout=layout, **kwargs))
        (o * torch.from_numpy(np.ascontiguousarray(cot))).sum().backward()
        return [o.detach().numpy()] + [t.grad.numpy() for t in ts]

    def j_run(arrays, cot, layout):
        def f(a, b, c):
            o = first(getattr(ato_jax, op)(a, b, c, *map(jnp.asarray, extra), layout=layout, **kwargs))
            return jnp.sum(o * jnp.asarray(cot)), o
        grads, o = jax.grad(f, argnums=(0, 1, 2), has_aux=True)(*map(jnp.asarray, arrays))
        return [np.asarray(o)] + [np.asarray(g) for g in grads]

    for run in (t_run, j_run):
        want = run((q, k, v), cotangent, "bhnd")
        got = run([a.transpose(sw) for a in (q, k, v)], cotangent.transpose(sw), "bnhd")
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.transpose(sw), b)


def clear_plans(op: str, *plan_fns):
    """Empties the caches of the plan constructors ``plan_fns`` and op ``op``'s cached forward:
    for a test that changes a module-level tuning constant of a plans module (and again after
    it, so that no later test runs on its plans)."""
    from ato_core.ops import OPS

    for fn in plan_fns:
        fn.cache_clear()
    OPS[op].cached_forward.cache_clear()


@contextlib.contextmanager
def plan_settings(op: str, module, plan_fns, **values):
    """Module-level tuning constants of a plans ``module`` set to ``values`` inside the block,
    restored after it; op ``op``'s and ``plan_fns``' plan caches emptied on the way in and out
    (clear_plans), so that no plan of either setting outlives it. An array computed inside one
    setting keeps that setting's forward plan, and its backward: compute it again in each."""
    # every cached plan constructor of ``module`` too: a backward plan is memoised on its forward
    # plan (Plan.memoised), so a forward plan kept from one setting would bring back its backward
    plan_fns = [*plan_fns, *(f for f in vars(module).values() if callable(f) and hasattr(f, "cache_clear"))]
    was = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    clear_plans(op, *plan_fns)
    try:
        yield
    finally:
        for name, value in was.items():
            setattr(module, name, value)
        clear_plans(op, *plan_fns)
