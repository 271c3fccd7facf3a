"""Test cases of based_attention, based_step and taylor_feature_map (ato_core.testing)."""

from ato_core.testing import Case, In, fuzz_shape, gpu_spec

from .plans import features


def based_case(B, H, N, d, Dv, dtype="float32", causal=True, state=False, final=False, scale=None, seed=0):
    F = features(d)
    shapes = [("q", (B, H, N, d)), ("k", (B, H, N, d)), ("v", (B, H, N, Dv))]
    if state:
        shapes += [("S0", (B, H, F, Dv)), ("z0", (B, H, F))]
    kwargs = (("causal", causal), ("scale", scale), ("initial_state", (In("S0"), In("z0")) if state else None),
              ("output_final_state", final))
    return Case("based_attention", tuple(shapes), dtype, (In("q"), In("k"), In("v")), kwargs, seed, ("S0", "z0"),
                options=(("taylor_state", True),))


def based_step_case(B, H, d, Dv, dtype="float32", scale=None, seed=0):
    F = features(d)
    shapes = (("q", (B, H, d)), ("k", (B, H, d)), ("v", (B, H, Dv)), ("S0", (B, H, F, Dv)), ("z0", (B, H, F)))
    return Case("based_step", shapes, dtype, (In("q"), In("k"), In("v"), (In("S0"), In("z0"))),
                (("scale", scale),), seed, ("S0", "z0"), options=(("taylor_state", True),))


def taylor_case(shape, dtype="float32", scale=None, seed=0):
    return Case("taylor_feature_map", (("x", tuple(shape)),), dtype, (In("x"),), (("scale", scale),), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype."""
    dims = [(2, 4, 2048, 16, 64), (1, 2, 1000, 5, 48)] if gpu else [(2, 2, 70, 16, 24), (1, 2, 45, 5, 40)]
    out = [taylor_case((4, 33, 16), dtype)]
    for i, (B, H, N, d, Dv) in enumerate(dims[:1] if quick else dims):
        for causal in (False, True):
            out.append(based_case(B, H, N, d, Dv, dtype, causal=causal, state=causal, final=True, seed=i))
    out.append(based_step_case(2, 4, 16, 64, dtype))
    return out


# sm_90 compile examples (tests/test_compile_sm90.py, benchmarks/tools/ptx_fingerprint.py).
COMPILE = [(f"based16 {'causal' if c else 'bidir'}", "based_attention", (gpu_spec((2, 4, 512, 16)),) * 2
            + (gpu_spec((2, 4, 512, 64)),), {"causal": c}) for c in (True, False)]
COMPILE += [("based32 causal Dv 48", "based_attention", (gpu_spec((1, 2, 300, 32)),) * 2 + (gpu_spec((1, 2, 300, 48)),),
             {"causal": True})]
# B*H large enough for the state walks (plans.WALK_WAVES), with an initial state
_WALK_STATE = (gpu_spec((8, 16, 273, 64), "float32"), gpu_spec((8, 16, 273), "float32"))
COMPILE += [("based16 causal walk", "based_attention", (gpu_spec((8, 16, 1024, 16)),) * 2
             + (gpu_spec((8, 16, 1024, 64)),), {"causal": True, "initial_state": _WALK_STATE,
                                                 "output_final_state": True})]
_STEP = (*(gpu_spec((8, 16, 16)),) * 2, gpu_spec((8, 16, 64)),
         (gpu_spec((8, 16, 273, 64), "float32"), gpu_spec((8, 16, 273), "float32")))
COMPILE += [("based_step16", "based_step", _STEP, {})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}.
    d >= 2: at d = 1 with one row and no state, o does not depend on q beyond eps (as
    linear_attention's Dk = 1), and dq is a cancellation no tolerance can bound."""
    dtype = pick.choice(("float32", "bfloat16"))
    B, H, N, d, Dv = pick.int(1, 2), pick.int(1, 2), pick.int(2, 120), pick.int(2, 32), pick.int(1, 70)
    causal = pick.choice((False, True))
    return {
        "taylor_feature_map": taylor_case((*fuzz_shape(pick)[:-1], d), dtype, seed=pick.int(0, 99)),
        "based_attention": based_case(B, H, N, d, Dv, dtype, causal=causal, state=causal and pick.choice((False, True)),
                                      final=pick.choice((False, True)), seed=pick.int(0, 99)),
        "based_step": based_step_case(B, H, d, Dv, dtype, seed=pick.int(0, 99)),
    }


# Magnitudes (Case option "magnitude") at which each op must match the reference
# (test_fuzz_magnitude): w = 1 + s + s^2/2 grows as the fourth power of q and k.
MAGNITUDES = {"taylor_feature_map": (1e-8, 1e8), "based_attention": (1e1,), "based_step": (1e1,)}
# Inputs whose infinity may come out NaN where the reference's output is infinite (as
# linear_attention's): the kernels sum phi(k) v over the keys first, and phi's linear terms take
# both signs, so an infinite v puts +inf and -inf into the state and phi(q) S is NaN, where the
# reference weights v by w = 1 + s + s^2/2 > 0 and gives the infinity (fp32 and bf16, CPU and GPU).
INF_AS_NAN = {"based_attention": ("v",)}
