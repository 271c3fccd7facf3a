"""Test cases of linear_attention, linear_attention_step and elu_plus_one (ato_core.testing)."""

from ato_core.testing import HALF_MAX, Case, In, fuzz_shape, gpu_spec


def la_case(B, H, N, Dk, Dv, dtype="float32", causal=False, feature_map="elu", state=False, final=False, seed=0):
    shapes = [("q", (B, H, N, Dk)), ("k", (B, H, N, Dk)), ("v", (B, H, N, Dv))]
    if state:
        shapes += [("S0", (B, H, Dk, Dv)), ("z0", (B, H, Dk))]
    kwargs = (("causal", causal), ("feature_map", feature_map),
              ("initial_state", (In("S0"), In("z0")) if state else None), ("output_final_state", final))
    return Case("linear_attention", tuple(shapes), dtype, (In("q"), In("k"), In("v")), kwargs, seed, ("S0", "z0"),
                options=(("nonneg", feature_map is None),))


def step_case(B, H, Dk, Dv, dtype="float32", feature_map="elu", seed=0):
    shapes = (("q", (B, H, Dk)), ("k", (B, H, Dk)), ("v", (B, H, Dv)), ("S0", (B, H, Dk, Dv)), ("z0", (B, H, Dk)))
    return Case("linear_attention_step", shapes, dtype, (In("q"), In("k"), In("v"), (In("S0"), In("z0"))),
                (("feature_map", feature_map),), seed, ("S0", "z0"), options=(("nonneg", feature_map is None),))


def elu_case(shape, dtype="float32", seed=0):
    return Case("elu_plus_one", (("x", tuple(shape)),), dtype, (In("x"),), (), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype."""
    dims = [(2, 4, 2048, 64, 64), (1, 4, 1000, 96, 48)] if gpu else [(2, 2, 200, 32, 24), (1, 2, 45, 48, 80)]
    out = [elu_case((4, 1001), dtype)]
    for i, (B, H, N, Dk, Dv) in enumerate(dims[:1] if quick else dims):
        for causal in (False, True):
            out.append(la_case(B, H, N, Dk, Dv, dtype, causal=causal, feature_map="elu" if i == 0 else None,
                               state=causal, final=causal, seed=i))
    out.append(step_case(2, 4, 64, 64, dtype))
    return out


def _qkv(N, D):
    return (gpu_spec((2, 4, N, D)),) * 3


# sm_90 compile examples (tests/test_compile_sm90.py, benchmarks/tools/ptx_fingerprint.py):
# (label, op, args, kwargs); a [256, 256] state takes the backward's separate dk and dv kernels.
COMPILE = [(f"linear_attention{d} {'causal' if c else 'bidir'}", "linear_attention", _qkv(512, d),
            {"causal": c, "feature_map": "elu"}) for d in (64, 256) for c in (True, False)]
_STEP = (*(gpu_spec((8, 16, 64)),) * 3, (gpu_spec((8, 16, 64, 64), "float32"), gpu_spec((8, 16, 64), "float32")))
COMPILE += [("linear_attention_step64", "linear_attention_step", _STEP, {"feature_map": "elu"}),
            ("linear_attention_step64 no grad", "linear_attention_step", _STEP, {"feature_map": "elu"}, False)]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}.

    Not drawn: the degenerate cases where the output does not depend on q beyond eps (one row
    without an initial state: o_0 = v_0; Dk = 1, where the scalar phi(q) cancels: o = S / z).
    There dq is a cancellation of terms of size |S| / den, whose rounding no tolerance
    relative to the (eps-sized) true dq can bound."""
    dtype = pick.choice(("float32", "bfloat16"))
    B, H, N, Dk, Dv = pick.int(1, 2), pick.int(1, 3), pick.int(2, 150), pick.int(2, 70), pick.int(1, 70)
    causal = pick.choice((False, True))
    fmap = pick.choice(("elu", None))
    return {
        "elu_plus_one": elu_case(fuzz_shape(pick), dtype, seed=pick.int(0, 99)),
        "linear_attention": la_case(B, H, N, Dk, Dv, dtype, causal=causal, feature_map=fmap,
                                    state=causal and pick.choice((False, True)), final=pick.choice((False, True)),
                                    seed=pick.int(0, 99)),
        "linear_attention_step": step_case(B, H, Dk, Dv, dtype, feature_map=fmap, seed=pick.int(0, 99)),
    }


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). Products of features summed over N in fp32: up to
# 1e4. Not tiny ones: phi(q) = 1 + q there, and dq a cancellation of terms of size 1.
MAGNITUDES = {"elu_plus_one": (1e-30, 1e30, HALF_MAX), "linear_attention": (1e2, 1e4),
              "linear_attention_step": (1e2, 1e4)}
