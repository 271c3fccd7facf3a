"""Test cases of flash_attention (ato_core.testing)."""

from ato_core.testing import Case, In, gpu_spec


def fa_case(B, Hq, Hkv, Nq, Nk, D, dtype="float32", causal=False, lse=True, scale=None, seed=0, layout="bhnd"):
    """layout "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D]."""
    q, kv = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if layout == "bhnd" else ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    shapes = (("q", q), ("k", kv), ("v", kv))
    kwargs = (("causal", causal), ("softmax_scale", scale), ("return_lse", lse))
    kwargs += (("layout", layout),) if layout != "bhnd" else ()
    return Case("flash_attention", shapes, dtype, (In("q"), In("k"), In("v")), kwargs, seed)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype: (B, Hq, Hkv, Nq, Nk, D)."""
    dims = [(2, 8, 2, 1024, 1024, 128), (1, 4, 4, 700, 1500, 80)] if gpu else \
        [(1, 4, 2, 45, 29, 48), (1, 2, 2, 37, 70, 16)]
    return [fa_case(*d, dtype=dtype, causal=causal, seed=i) for i, d in enumerate(dims[:1] if quick else dims)
            for causal in (False, True)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [("flash_attention", "flash_attention", (gpu_spec((1, 8, 256, 128)), gpu_spec((1, 2, 256, 128)),
                                                   gpu_spec((1, 2, 256, 128))), {"causal": True, "return_lse": True})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    Hkv = pick.int(1, 2)
    return {"flash_attention": fa_case(
        pick.int(1, 2), Hkv * pick.int(1, 3), Hkv, pick.int(1, 80), pick.int(1, 80), pick.int(1, 72),
        dtype=pick.choice(("float32", "bfloat16")), causal=pick.choice((False, True)), lse=pick.choice((False, True)),
        scale=pick.choice((None, 0.3)), seed=pick.int(0, 99), layout=pick.choice(("bhnd", "bnhd")))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). Scores of up to D * 1e6: the softmax one-hot, its arg max well separated.
MAGNITUDES = {"flash_attention": (1e-30, 1e3)}
# Gradients that are a cancellation at a huge magnitude (the softmax one-hot: dq and dk are
# sums of p (dp - delta) with dp = delta for the one key that counts): compared there only
# for NaN and infinities.
CANCELLING = {"flash_attention": ("q", "k")}
