"""Test cases of cross_entropy (ato_core.testing)."""

from ato_core.testing import HALF_MAX, Case, In, gpu_spec


def ce_case(T, V, dtype="float32", reduction="mean", label_smoothing=0.0, ignore_every=5, scale=1.0, seed=0,
            z_loss=0.0, softcap=None):
    """T: the rows, or the leading shape of the logits (a tuple: [*T, V]). Every
    ``ignore_every``-th target is ignore_index (-100); logits are scale * N(0, 1)."""
    lead = tuple(T) if isinstance(T, tuple) else (T,)
    kwargs = (("reduction", reduction), ("label_smoothing", label_smoothing))
    kwargs += (("z_loss", z_loss),) if z_loss else ()
    kwargs += (("softcap", softcap),) if softcap is not None else ()
    return Case("cross_entropy", (("logits", (*lead, V)),), dtype, (In("logits"), In("targets")), kwargs, seed, (),
                (("targets", lead, 0, V),), options=(("ignore_every", ignore_every), ("scale", scale)))


def check_cases(gpu: bool, dtype: str, quick: bool):
    T, V = (2048, 32000) if gpu else (6, 500)
    return [ce_case(T, V, dtype=dtype, label_smoothing=0.1, seed=7),
            ce_case(T, V, dtype=dtype, z_loss=1e-4, softcap=30.0, scale=20.0, seed=8)]


_LOGITS = (gpu_spec((16, 128256)), gpu_spec((16,), "int64"))
# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs[, grad]); the
# loss alone is a plan of its own (grad False: no backward)
COMPILE = [("cross_entropy", "cross_entropy", _LOGITS, {"label_smoothing": 0.1}),
           ("cross_entropy none", "cross_entropy", _LOGITS, {"reduction": "none"}),
           ("cross_entropy loss", "cross_entropy", _LOGITS, {"reduction": "sum"}, False),
           ("cross_entropy z_loss softcap", "cross_entropy", _LOGITS, {"z_loss": 1e-4, "softcap": 30.0,
                                                                      "return_z_loss": True})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    lead = pick.choice(((pick.int(1, 20),), (pick.int(1, 4), pick.int(1, 6))))
    return {"cross_entropy": ce_case(
        lead, pick.int(1, 600), pick.choice(("float32", "bfloat16")),
        reduction=pick.choice(("mean", "sum", "none")), label_smoothing=pick.choice((0.0, 0.1)),
        ignore_every=pick.choice((0, 3)), scale=pick.choice((1.0, 10.0)), seed=pick.int(0, 99),
        z_loss=pick.choice((0.0, 0.0, 1e-2)), softcap=pick.choice((None, None, 5.0, 30.0)))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). Logits: up to half the dtype's largest value (a loss up to about that, finite).
MAGNITUDES = {"cross_entropy": (1e-30, 1e4, 5e9, 1e30, HALF_MAX)}
