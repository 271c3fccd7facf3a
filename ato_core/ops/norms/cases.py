"""Test cases of layer_norm, rms_norm and dropout_residual_layer_norm (ato_core.testing)."""

from ato_core.testing import Case, In, fuzz_shape, gpu_spec


def norm_case(op, shape, dtype="float32", weight=True, bias=True, seed=0, eps=None):
    """layer_norm (weight, bias optional) or rms_norm (weight optional) over shape[-1]; eps:
    the op's default when None."""
    N = shape[-1]
    shapes = [("x", tuple(shape))] + ([("weight", (N,))] if weight else []) + ([("bias", (N,))] if bias else [])
    kwargs = (("weight", In("weight")),) + ((("bias", In("bias")),) if op == "layer_norm" else ())
    return Case(op, tuple(shapes), dtype, (In("x"),), kwargs + ((("eps", eps),) if eps is not None else ()), seed)


def drln_case(shape, dtype="float32", p=0.0, dseed=0, seed=0, seed_array=False):
    """dseed: the dropout seed, an int, or with ``seed_array`` a 0-d integer input of that value."""
    N = shape[-1]
    shapes = (("x", tuple(shape)), ("residual", tuple(shape)), ("weight", (N,)), ("bias", (N,)))
    args = (In("x"), In("residual"), In("weight"), In("bias"))
    if seed_array:
        return Case("dropout_residual_layer_norm", shapes, dtype, args, (("p", p), ("seed", In("seed"))), seed,
                    int_inputs=(("seed", (), dseed, dseed + 1),))
    return Case("dropout_residual_layer_norm", shapes, dtype, args, (("p", p), ("seed", dseed)), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    M, N = (2048, 4096) if gpu else (6, 300)
    return [norm_case("layer_norm", (M, N), dtype=dtype, seed=1),
            norm_case("rms_norm", (M, N + 1), dtype=dtype, bias=False, seed=2),
            drln_case((M, N), dtype=dtype, p=0.1, dseed=3, seed=3),
            drln_case((M, N), dtype=dtype, p=0.1, dseed=4, seed=4, seed_array=True)]


def _x(M, N):
    return gpu_spec((M, N)), gpu_spec((N,))


# sm_90 compile examples (tests/test_compile_sm90.py, benchmarks/tools/ptx_fingerprint.py): (label,
# op, args, kwargs); single-piece rows (4096, 1000) and looped ones (65536)
COMPILE = [(f"{name}{N}", op, args(*_x(64 if N < 65536 else 4, N)), kw)
           for N in (4096, 1000, 65536) for name, op, args, kw in (
    ("layer_norm", "layer_norm", lambda x, w: (x, w, w), {}),
    ("rms_norm", "rms_norm", lambda x, w: (x, w), {}),
    ("drln", "dropout_residual_layer_norm", lambda x, w: (x, x, w, w if N < 65536 else None), {"p": 0.1, "seed": 1}),
    ("drln seed array", "dropout_residual_layer_norm", lambda x, w: (x, x, w, w),
     {"p": 0.1, "seed": gpu_spec((), "int64")}))]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    dtype = pick.choice(("float32", "bfloat16"))
    shape = fuzz_shape(pick)
    return {
        # width 2 is rms_norm's width 1 on d = (x0 - x1) / 2: dx cancels to eps / d^2 (8.8e-4 off at
        # eps 1e-5, half the fp32 draws); eps 1 keeps it a gradient to compare
        "layer_norm": norm_case("layer_norm", shape, dtype, weight=pick.choice((True, False)),
                                bias=pick.choice((True, False)), seed=pick.int(0, 99),
                                eps=1.0 if shape[-1] == 2 else None),
        # width 1: dx = w g eps / (x^2 + eps)^1.5 is 1 - y^2 cancelling to eps / x^2 in any fp32
        # kernel (2.8e-4 off at eps 1e-6); eps 1 keeps it a gradient to compare
        "rms_norm": norm_case("rms_norm", shape, dtype, weight=pick.choice((True, False)), bias=False,
                              seed=pick.int(0, 99), eps=1.0 if shape[-1] == 1 else None),
        "dropout_residual_layer_norm": drln_case(shape, dtype, p=pick.choice((0.0, 0.1, 0.5)), dseed=pick.int(0, 999),
                                                 seed=pick.int(0, 99), seed_array=pick.choice((False, True))),
    }


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). The sum of squares is fp32 (as in torch): rows up to 1e15.
MAGNITUDES = {"layer_norm": (1e-30, 1e15), "rms_norm": (1e-30, 1e15),
              "dropout_residual_layer_norm": (1e-30, 1e15)}
