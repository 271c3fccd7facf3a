"""Test cases of the block_sparse family (ato_core.testing)."""

from ato_core.testing import HALF_MAX, Case, In, gpu_spec


def coarsen_case(B, H, N, D, block_size, dtype="float32", seed=0):
    return Case("max_l2_coarsen", (("x", (B, H, N, D)),), dtype, (In("x"), block_size), (), seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype."""
    dims = [(1, 32, 4096, 128, 64), (2, 4, 1000, 72, 16)] if gpu else [(2, 3, 37, 48, 16), (1, 2, 70, 72, 32)]
    cases = [coarsen_case(*d, dtype=dtype, seed=i) for i, d in enumerate(dims[:1] if quick else dims)]
    sparse = [(2, 8, 2, 2048, 2048, 128, 64), (1, 4, 4, 700, 1500, 80, 128)] if gpu else \
        [(1, 4, 2, 45, 45, 48, 16), (1, 2, 2, 37, 70, 16, 32)]
    cases += [bs_case(*d, causal=causal, dtype=dtype, seed=i) for i, d in enumerate(sparse[:1] if quick else sparse)
              for causal in (False, True)]
    cab = [(1, 8, 2, 8192, 128, 64)] if gpu else [(1, 4, 2, 200, 32, 16)]
    cases += [cab_case(*d, causal=causal, dtype=dtype, seed=7) for d in cab for causal in (False, True)]
    return cases + [cab_attention_case(*d, causal=causal, dtype=dtype, seed=8) for d in cab for causal in (False, True)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs, grad)
COMPILE = [("max_l2_coarsen", "max_l2_coarsen", (gpu_spec((1, 32, 32768, 128)), 64), {}),
           ("block_sparse_attention", "block_sparse_attention",
            (gpu_spec((1, 8, 1024, 128)), gpu_spec((1, 2, 1024, 128)), gpu_spec((1, 2, 1024, 128)),
             gpu_spec((1, 8, 16, 16), "bool")), {"causal": True, "return_lse": True}),
           ("curvature_block_mask", "curvature_block_mask", (gpu_spec((1, 8, 32768, 128)), gpu_spec((1, 2, 32768, 128))),
            {}, False),
           ("cab_attention", "cab_attention", (gpu_spec((1, 8, 4096, 128)),) + (gpu_spec((1, 2, 4096, 128)),) * 2,
            {"return_lse": True})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    Hkv = pick.int(1, 2)
    return {"max_l2_coarsen": coarsen_case(pick.int(1, 2), pick.int(1, 3), pick.int(1, 80), pick.int(1, 80),
                                           pick.choice((16, 32)), dtype=pick.choice(("float32", "bfloat16")),
                                           seed=pick.int(0, 99)),
            "block_sparse_attention": bs_case(
                pick.int(1, 2), Hkv * pick.int(1, 3), Hkv, pick.int(1, 80), pick.int(1, 80), pick.int(1, 72),
                pick.choice((16, 32)), causal=pick.choice((False, True)), density=pick.choice((0.2, 0.6, 1.0)),
                dtype=pick.choice(("float32", "bfloat16")), scale=pick.choice((None, 0.3)), seed=pick.int(0, 99)),
            "curvature_block_mask": cab_case(
                pick.int(1, 2), Hkv * pick.int(1, 3), Hkv, pick.int(1, 200), pick.int(1, 72), pick.choice((16, 32)),
                keep=pick.choice((0.0, 0.1, 0.35, 1.0)), lam=pick.choice((0.0, 0.5, 2.0)), causal=pick.choice((False, True)),
                local_blocks=pick.int(0, 3), dtype=pick.choice(("float32", "bfloat16")), seed=pick.int(0, 99)),
            "cab_attention": cab_attention_case(
                pick.int(1, 2), Hkv * pick.int(1, 2), Hkv, pick.int(1, 120), pick.int(1, 72), pick.choice((16, 32)),
                keep=pick.choice((0.0, 0.2, 0.5)), causal=pick.choice((False, True)), local_blocks=pick.int(0, 2),
                dtype=pick.choice(("float32", "bfloat16")), scale=pick.choice((None, 0.3)), seed=pick.int(0, 99))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the fuzzing
# tier's test_fuzz_magnitude): coarsening's squared norms would underflow at 1e-30 and overflow at
# half the dtype's largest value, the scaled comparison does neither; attention as flash_attention.
MAGNITUDES = {"max_l2_coarsen": (1e-30, HALF_MAX), "block_sparse_attention": (1e-30, 1e3),
              "curvature_block_mask": (1e-10, 1e3), "cab_attention": (1e-10, 1e3)}
# Gradients not determined to the dtype's tolerance at a huge magnitude (as flash_attention's).
CANCELLING = {"block_sparse_attention": ("q", "k", "v"), "cab_attention": ("q", "k", "v")}
# Inputs whose infinity may come out NaN where the reference's is infinite (as flash_attention's).
INF_AS_NAN = {"block_sparse_attention": ("v",), "cab_attention": ("v",)}

def bs_case(B, Hq, Hkv, Nq, Nk, D, block_size, causal=False, density=0.5, dtype="float32", scale=None, seed=0,
            layout="bhnd"):
    """layout "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D]."""
    M = (-(-Nq // block_size), -(-Nk // block_size))
    q, kv = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if layout == "bhnd" else ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    shapes = (("q", q), ("k", kv), ("v", kv))
    kwargs = (("block_size", block_size), ("causal", causal), ("softmax_scale", scale), ("return_lse", True))
    kwargs += (("layout", layout),) if layout != "bhnd" else ()
    return Case("block_sparse_attention", shapes, dtype, (In("q"), In("k"), In("v"), In("block_mask")), kwargs,
                seed, int_inputs=(("block_mask", (B, Hq, *M), 0, 2),),
                options=(("density", density), ("block_masked", density < 1)))


def cab_case(B, Hq, Hkv, N, D, block_size, keep=0.1, lam=0.5, causal=True, local_blocks=1, dtype="float32", seed=0):
    shapes = (("q", (B, Hq, N, D)), ("k", (B, Hkv, N, D)))
    kwargs = (("block_size", block_size), ("keep", keep), ("lam", lam), ("causal", causal),
              ("local_blocks", local_blocks))
    return Case("curvature_block_mask", shapes, dtype, (In("q"), In("k")), kwargs, seed, nondiff=("q", "k"))


def cab_attention_case(B, Hq, Hkv, N, D, block_size, keep=0.1, lam=0.5, causal=True, local_blocks=1, dtype="float32",
                       scale=None, seed=0, layout="bhnd"):
    q, kv = ((B, Hq, N, D), (B, Hkv, N, D)) if layout == "bhnd" else ((B, N, Hq, D), (B, N, Hkv, D))
    shapes = (("q", q), ("k", kv), ("v", kv))
    kwargs = (("block_size", block_size), ("keep", keep), ("lam", lam), ("causal", causal),
              ("local_blocks", local_blocks), ("softmax_scale", scale), ("return_lse", True))
    kwargs += (("layout", layout),) if layout != "bhnd" else ()
    return Case("cab_attention", shapes, dtype, (In("q"), In("k"), In("v")), kwargs, seed,
                options=(("block_masked", keep < 1),))
