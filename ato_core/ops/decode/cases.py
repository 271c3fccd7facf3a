"""Test cases of decode_attention and merge_attention_states (ato_core.testing). Forward
only: no input is differentiated. The table's block ids are drawn uniformly (sequences may
share blocks), the lengths from 0 to the table's capacity."""

from ato_core.testing import Case, In, gpu_spec

from .schedule import DecodeSchedule

_ARGS = (In("q"), In("k_cache"), In("v_cache"), In("block_table"), In("seq_lens"))


def decode_case(B, Hq, Hkv, D, block_size, num_blocks, max_blocks, dtype="float32", scale=None, seed=0):
    shapes = (("q", (B, Hq, D)), ("k_cache", (num_blocks, block_size, Hkv, D)),
              ("v_cache", (num_blocks, block_size, Hkv, D)))
    ints = (("block_table", (B, max_blocks), 0, num_blocks), ("seq_lens", (B,), 0, max_blocks * block_size + 1))
    return Case("decode_attention", shapes, dtype, _ARGS, (("softmax_scale", scale), ("return_lse", True)), seed,
                int_inputs=ints, nondiff=("q", "k_cache", "v_cache"))


def merge_case(lead, D, dtype="float32", seed=0):
    shapes = (("o_a", (*lead, D)), ("lse_a", tuple(lead)), ("o_b", (*lead, D)), ("lse_b", tuple(lead)))
    return Case("merge_attention_states", shapes, dtype, (In("o_a"), In("lse_a"), In("o_b"), In("lse_b")), (), seed,
                nondiff=("o_a", "lse_a", "o_b", "lse_b"))


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype."""
    dims = [(16, 32, 8, 128, 16, 4096, 256), (4, 8, 1, 80, 64, 64, 40)] if gpu else \
        [(3, 4, 2, 64, 16, 12, 5), (2, 3, 1, 80, 32, 6, 3)]
    cases = [decode_case(*d, dtype=dtype, seed=i) for i, d in enumerate(dims[:1] if quick else dims)]
    return cases + [merge_case((2, 3), 64 if not gpu else 128, dtype=dtype, seed=5)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs, grad)
COMPILE = [
    ("decode split", "decode_attention", (gpu_spec((64, 32, 128)), gpu_spec((4096, 16, 8, 128)),
                                          gpu_spec((4096, 16, 8, 128)), gpu_spec((64, 512), "int32"),
                                          gpu_spec((64,), "int32")), {"return_lse": True}, False),
    ("decode one split", "decode_attention", (gpu_spec((512, 8, 64)), gpu_spec((64, 64, 8, 64)),
                                              gpu_spec((64, 64, 8, 64)), gpu_spec((512, 1), "int32"),
                                              gpu_spec((512,), "int32")), {}, False),
    ("decode chunk-first", "decode_attention", (gpu_spec((64, 32, 128)), gpu_spec((2048, 16, 8, 128)),
                                                gpu_spec((2048, 16, 8, 128)), gpu_spec((64, 272), "int32"),
                                                gpu_spec((64,), "int32")),
     {"schedule": DecodeSchedule(*(gpu_spec(s, "int32") for s in ((16, 6), (64,), (256,), (1024,), (64, 16), (64,))))},
     False),
    ("decode chunk-first D64", "decode_attention", (gpu_spec((64, 32, 64)), gpu_spec((2048, 16, 8, 64)),
                                                    gpu_spec((2048, 16, 8, 64)), gpu_spec((64, 272), "int32"),
                                                    gpu_spec((64,), "int32")),
     {"schedule": DecodeSchedule(*(gpu_spec(s, "int32") for s in ((16, 6), (64,), (256,), (1024,), (64, 16), (64,))))},
     False),
    ("merge_attention_states", "merge_attention_states", (gpu_spec((4, 32, 128)), gpu_spec((4, 32), "float32"),
                                                          gpu_spec((4, 32, 128)), gpu_spec((4, 32), "float32")),
     {}, False),
]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    Hkv = pick.int(1, 2)
    bs = pick.choice((16, 32))
    return {
        "decode_attention": decode_case(
            pick.int(1, 3), Hkv * pick.int(1, 4), Hkv, pick.int(1, 72), bs, pick.int(1, 8), pick.int(1, 4),
            dtype=pick.choice(("float32", "bfloat16")), scale=pick.choice((None, 0.3)), seed=pick.int(0, 99)),
        "merge_attention_states": merge_case((pick.int(1, 3), pick.int(1, 20)), pick.int(1, 150),
                                             dtype=pick.choice(("float32", "bfloat16")), seed=pick.int(0, 99)),
    }


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude).
MAGNITUDES = {"decode_attention": (1e-30, 1e3), "merge_attention_states": (1e-30, 1e3)}
# Inputs whose infinity may come out NaN where the reference's is infinite (as flash_attention's;
# the merge's partials meet weights exp(lse - max) that can round to zero in fp32).
INF_AS_NAN = {"decode_attention": ("v_cache",), "merge_attention_states": ("o_a", "o_b")}
