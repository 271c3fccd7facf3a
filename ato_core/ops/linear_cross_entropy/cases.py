"""Test cases of linear_cross_entropy (ato_core.testing)."""

from ato_core.testing import Case, In, gpu_spec


def lce_case(T, H, V, dtype="float32", bias=False, reduction="mean", label_smoothing=0.0, ignore_every=5, seed=0,
             z_loss=0.0, softcap=None):
    """T: the rows, or the leading shape of x (a tuple: [*T, H]); weight [V, H], N(0, 1)
    (logits of scale sqrt(H)); every ``ignore_every``-th target is ignore_index (-100)."""
    lead = tuple(T) if isinstance(T, tuple) else (T,)
    kwargs = (("reduction", reduction), ("label_smoothing", label_smoothing))
    kwargs += (("bias", In("bias")),) if bias else ()
    kwargs += (("z_loss", z_loss),) if z_loss else ()
    kwargs += (("softcap", softcap),) if softcap is not None else ()
    shapes = (("x", (*lead, H)), ("weight", (V, H))) + ((("bias", (V,)),) if bias else ())
    return Case("linear_cross_entropy", shapes, dtype, (In("x"), In("weight"), In("targets")), kwargs, seed, (),
                (("targets", lead, 0, V),), options=(("ignore_every", ignore_every),))


def check_cases(gpu: bool, dtype: str, quick: bool):
    T, H, V = (1024, 1024, 32000) if gpu else (7, 40, 150)
    return [lce_case(T, H, V, dtype=dtype, bias=True, label_smoothing=0.1, seed=7),
            lce_case(T, H, V, dtype=dtype, z_loss=1e-4, softcap=30.0, seed=8)]


_ARGS = (gpu_spec((8192, 4096)), gpu_spec((128256, 4096)), gpu_spec((8192,), "int64"))
# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs[, grad])
COMPILE = [("linear_cross_entropy", "linear_cross_entropy", _ARGS, {}),
           ("linear_cross_entropy options", "linear_cross_entropy", _ARGS,
            {"z_loss": 1e-4, "softcap": 30.0, "label_smoothing": 0.1, "reduction": "none"})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    lead = pick.choice(((pick.int(1, 20),), (pick.int(1, 3), pick.int(1, 5))))
    return {"linear_cross_entropy": lce_case(
        lead, pick.int(1, 40), pick.int(1, 100), pick.choice(("float32", "bfloat16")), bias=pick.choice((False, True)),
        reduction=pick.choice(("mean", "sum", "none")), label_smoothing=pick.choice((0.0, 0.1)),
        ignore_every=pick.choice((0, 3)), seed=pick.int(0, 99), z_loss=pick.choice((0.0, 0.0, 1e-2)),
        softcap=pick.choice((None, None, 5.0, 30.0)))}


# Magnitudes (Case option "magnitude" of x) at which the op must match the reference: up to
# logits of about 1e4 (fp32 keeps the loss's relative precision there).
MAGNITUDES = {"linear_cross_entropy": (1e-30, 1e3)}
