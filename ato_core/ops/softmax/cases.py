"""Test cases of softmax (ato_core.testing)."""

from ato_core.testing import Case, In, fuzz_shape, gpu_spec


def softmax_case(shape, dtype="float32", temperature=1.0, seed=0):
    return Case("softmax", (("x", tuple(shape)),), dtype, (In("x"),), (("temperature", temperature),), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    return [softmax_case((2048, 4096) if gpu else (6, 300), dtype=dtype, seed=4)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [(f"softmax{N}", "softmax", (gpu_spec((8, N)),), {}) for N in (1000, 4096, 50000)]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    return {"softmax": softmax_case(fuzz_shape(pick), pick.choice(("float32", "bfloat16")),
                                    temperature=pick.choice((1.0, 0.7, 3.0)), seed=pick.int(0, 99))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). x / temperature must stay finite: up to 1e37 for the drawn temperatures (>= 0.7).
MAGNITUDES = {"softmax": (1e-30, 1e30, 1e37)}
