"""Test cases of swiglu (ato_core.testing)."""

from ato_core.testing import Case, In, fuzz_shape, gpu_spec


def swiglu_case(shape, dtype="float32", seed=0):
    return Case("swiglu", (("gate", tuple(shape)), ("up", tuple(shape))), dtype, (In("gate"), In("up")), (), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    return [swiglu_case((2048, 4096) if gpu else (6, 300), dtype=dtype, seed=5)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [("swiglu", "swiglu", (gpu_spec((64, 7168)),) * 2, {})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    return {"swiglu": swiglu_case(fuzz_shape(pick, last_max=3000), pick.choice(("float32", "bfloat16")),
                                  seed=pick.int(0, 99))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). gate * up must stay finite in fp32: up to 1e18.
MAGNITUDES = {"swiglu": (1e-30, 1e18)}
