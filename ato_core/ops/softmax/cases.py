"""Test cases of softmax (ato_core.testing)."""

from ato_core.testing import Case, In, fuzz_shape, gpu_spec


def softmax_case(shape, dtype="float32", temperature=1.0, seed=0, magnitude=None):
    """temperature: a float, or "traced" (a 0-d fp32 input in [0.5, 2], differentiated);
    magnitude: |x| at most this (Case option "magnitude"), else N(0, 1)."""
    options = (("magnitude", magnitude),) if magnitude is not None else ()
    if temperature == "traced":
        return Case("softmax", (("x", tuple(shape)), ("temperature", ())), dtype, (In("x"),),
                    (("temperature", In("temperature")),), seed, fp32_inputs=("temperature",), options=options)
    return Case("softmax", (("x", tuple(shape)),), dtype, (In("x"),), (("temperature", temperature),), seed,
                options=options)


def check_cases(gpu: bool, dtype: str, quick: bool):
    shape = (2048, 4096) if gpu else (6, 300)
    return [softmax_case(shape, dtype=dtype, seed=4), softmax_case(shape, dtype=dtype, temperature="traced", seed=5)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [(f"softmax{N}", "softmax", (gpu_spec((8, N)),), {}) for N in (1000, 4096, 50000)] + [
    ("softmax traced temperature", "softmax", (gpu_spec((8, 50000)),), {"temperature": gpu_spec((), "float32")})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    return {"softmax": softmax_case(fuzz_shape(pick), pick.choice(("float32", "bfloat16")),
                                    temperature=pick.choice((1.0, 0.7, 3.0, "traced")), seed=pick.int(0, 99))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). x / temperature must stay finite: up to 1e37 for the drawn temperatures (>= 0.5).
MAGNITUDES = {"softmax": (1e-30, 1e30, 1e37)}
