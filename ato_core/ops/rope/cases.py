"""Test cases of rope (ato_core.testing)."""

from ato_core.testing import Case, In, gpu_spec


def rope_case(B, Hq, Hkv, N, D, dtype="float32", interleaved=False, positions=False, max_pos=None, seed=0,
              full=False):
    """``full``: [max_pos, D] tables (plans.table), else [max_pos, D/2]."""
    max_pos = max_pos or N
    W = D if full else D // 2
    shapes = (("q", (B, Hq, N, D)), ("k", (B, Hkv, N, D)), ("cos", (max_pos, W)), ("sin", (max_pos, W)))
    ints = (("positions", (B, N), 0, max_pos),) if positions else ()
    kwargs = (("positions", In("positions") if positions else None), ("interleaved", interleaved))
    return Case("rope", shapes, dtype, (In("q"), In("k"), In("cos"), In("sin")), kwargs, seed, ("cos", "sin"), ints,
                ("cos", "sin"))


def check_cases(gpu: bool, dtype: str, quick: bool):
    return [rope_case(2, 8, 2, 256 if gpu else 9, 64 if gpu else 16, dtype=dtype, positions=True,
                      max_pos=1024 if gpu else 20, seed=6)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [("rope", "rope", (gpu_spec((2, 32, 16, 128)), gpu_spec((2, 8, 16, 128)), gpu_spec((64, 64)),
                             gpu_spec((64, 64))), {"positions": gpu_spec((2, 16), "int64")})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    N = pick.int(1, 40)
    return {"rope": rope_case(pick.int(1, 2), pick.int(1, 5), pick.int(1, 3), N, 2 * pick.int(1, 40),
                              pick.choice(("float32", "bfloat16")), interleaved=pick.choice((False, True)),
                              positions=pick.choice((False, True)), max_pos=N + pick.int(0, 20), seed=pick.int(0, 99),
                              full=pick.choice((False, True)))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). A rotation: up to 1e37 (a rotated pair stays below sqrt(2) times that).
MAGNITUDES = {"rope": (1e-30, 1e37)}
