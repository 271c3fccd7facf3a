"""Test cases of flash_attention (ato_core.testing)."""

from ato_core.testing import Case, In, gpu_spec


def fa_case(B, Hq, Hkv, Nq, Nk, D, dtype="float32", causal=False, lse=True, scale=None, seed=0, layout="bhnd",
            window=None, softcap=None, alibi=None, lengths=None, segments=None):
    """layout "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D]. Options: window (left, right),
    softcap, alibi "h" ([Hq] slopes) or "bh" ([B, Hq]), lengths "q", "kv" or "both" (random
    q_lengths / kv_lengths in [0, N]), segments: the number of segment ids (sorted per row,
    as packed documents)."""
    q, kv = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if layout == "bhnd" else ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    shapes = (("q", q), ("k", kv), ("v", kv))
    kwargs = (("causal", causal), ("softmax_scale", scale), ("return_lse", lse))
    kwargs += (("layout", layout),) if layout != "bhnd" else ()
    kwargs += (("window_size", window),) if window is not None else ()
    kwargs += (("softcap", softcap),) if softcap is not None else ()
    ints, fp32, options = (), (), ()
    if alibi is not None:
        shapes += (("alibi_slopes", (Hq,) if alibi == "h" else (B, Hq)),)
        fp32 += ("alibi_slopes",)
        kwargs += (("alibi_slopes", In("alibi_slopes")),)
    for side, n in (("q", Nq), ("kv", Nk)):
        if lengths in (side, "both"):
            ints += ((f"{side}_lengths", (B,), 0, n + 1),)
            kwargs += ((f"{side}_lengths", In(f"{side}_lengths")),)
    if segments is not None:
        ints += (("q_segment_ids", (B, Nq), 0, segments), ("kv_segment_ids", (B, Nk), 0, segments))
        kwargs += (("segment_ids", (In("q_segment_ids"), In("kv_segment_ids"))),)
        options += (("sorted", True),)
    if window is not None or lengths is not None or segments is not None:
        options += (("block_masked", True),)  # keys each query never sees (test_fuzz's NaN tiers)
    return Case("flash_attention", shapes, dtype, (In("q"), In("k"), In("v")), kwargs, seed, fp32_inputs=fp32,
                int_inputs=ints, nondiff=fp32, options=options)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype: (B, Hq, Hkv, Nq, Nk, D)."""
    dims = [(2, 8, 2, 1024, 1024, 128), (1, 4, 4, 700, 1500, 80)] if gpu else \
        [(1, 4, 2, 45, 29, 48), (1, 2, 2, 37, 70, 16)]
    cases = [fa_case(*d, dtype=dtype, causal=causal, seed=i) for i, d in enumerate(dims[:1] if quick else dims)
             for causal in (False, True)]
    # the options together: window, softcap, ALiBi, padding lengths, segment ids
    options = dict(window=(200 if gpu else 20, None), softcap=20.0, alibi="bh", lengths="both", segments=3)
    dims = (2, 8, 2, 1000, 1500, 128) if gpu else (2, 2, 1, 50, 61, 16)
    return cases + [fa_case(*dims, dtype=dtype, causal=True, seed=9, **options)]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
COMPILE = [("flash_attention", "flash_attention", (gpu_spec((1, 8, 256, 128)), gpu_spec((1, 2, 256, 128)),
                                                   gpu_spec((1, 2, 256, 128))), {"causal": True, "return_lse": True}),
           ("flash_attention options", "flash_attention",
            (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 256, 128)), gpu_spec((2, 2, 256, 128))),
            {"causal": True, "window_size": (64, None), "softcap": 30.0, "alibi_slopes": gpu_spec((8,), "float32"),
             "q_lengths": gpu_spec((2,), "int32"), "kv_lengths": gpu_spec((2,), "int32"),
             "segment_ids": gpu_spec((2, 256), "int32")})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    Hkv = pick.int(1, 2)
    return {"flash_attention": fa_case(
        pick.int(1, 2), Hkv * pick.int(1, 3), Hkv, pick.int(1, 80), pick.int(1, 80), pick.int(1, 72),
        dtype=pick.choice(("float32", "bfloat16")), causal=pick.choice((False, True)), lse=pick.choice((False, True)),
        scale=pick.choice((None, 0.3)), seed=pick.int(0, 99), layout=pick.choice(("bhnd", "bnhd")),
        window=pick.choice((None, None, (pick.int(0, 40), pick.choice((None, pick.int(0, 40)))))),
        softcap=pick.choice((None, None, 5.0)), alibi=pick.choice((None, None, "h", "bh")),
        lengths=pick.choice((None, None, "q", "kv", "both")), segments=pick.choice((None, None, 3)))}


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). Scores of up to D * 1e6: the softmax one-hot, its arg max well separated.
MAGNITUDES = {"flash_attention": (1e-30, 1e3)}
# Gradients that are a cancellation at a huge magnitude (the softmax one-hot: dq and dk are
# sums of p (dp - delta) with dp = delta for the one key that counts): compared there only
# for NaN and infinities.
CANCELLING = {"flash_attention": ("q", "k")}
