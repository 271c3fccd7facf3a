"""Test cases of flash_attention (ato_core.testing)."""

import numpy as np

from ato_core.testing import Case, In, gpu_spec


def fa_case(B, Hq, Hkv, Nq, Nk, D, dtype="float32", causal=False, lse=True, scale=None, seed=0, layout="bhnd",
            window=None, softcap=None, alibi=None, lengths=None, segments=None, bias=None, mask=None, dropout=None,
            segments_sorted=True, segment_values=None):
    """layout "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D]. Options: window (left, right),
    softcap, alibi "h" ([Hq] slopes) or "bh" ([B, Hq]), lengths "q", "kv" or "both" (random
    q_lengths / kv_lengths in [0, N]), segments: the number of segment ids (sorted per row,
    as packed documents, unless segments_sorted is False; segment_values: the (q, kv) ids given), bias "full" ([B, Hq, Nq, Nk]) or "heads_keys" ([Hq, 1, Nk], broadcast),
    mask "full" or "pairs" ([Nq, Nk], broadcast; each entry True with probability 0.7), dropout
    (dropout_p, with an int seed drawn from ``seed``)."""
    q, kv = ((B, Hq, Nq, D), (B, Hkv, Nk, D)) if layout == "bhnd" else ((B, Nq, Hq, D), (B, Nk, Hkv, D))
    shapes = (("q", q), ("k", kv), ("v", kv))
    kwargs = (("causal", causal), ("softmax_scale", scale), ("return_lse", lse))
    kwargs += (("layout", layout),) if layout != "bhnd" else ()
    kwargs += (("window_size", window),) if window is not None else ()
    kwargs += (("softcap", softcap),) if softcap is not None else ()
    kwargs += _dropout_kwargs(dropout, seed)
    ints, fp32, options = (), (), ()
    if alibi is not None:
        shapes += (("alibi_slopes", (Hq,) if alibi == "h" else (B, Hq)),)
        fp32 += ("alibi_slopes",)
        kwargs += (("alibi_slopes", In("alibi_slopes")),)
    for side, n in (("q", Nq), ("kv", Nk)):
        if lengths in (side, "both"):
            ints += ((f"{side}_lengths", (B,), 0, n + 1),)
            kwargs += ((f"{side}_lengths", In(f"{side}_lengths")),)
    if bias is not None:
        shapes += (("bias", (B, Hq, Nq, Nk) if bias == "full" else (Hq, 1, Nk)),)
        kwargs += (("bias", In("bias")),)
    if mask is not None:
        ints += (("mask", (B, Hq, Nq, Nk) if mask == "full" else (Nq, Nk), 0, 2),)
        kwargs += (("mask", In("mask")),)
        options += (("density", 0.7),)
    if segments is not None:
        ints += (("q_segment_ids", (B, Nq), 0, segments), ("kv_segment_ids", (B, Nk), 0, segments))
        kwargs += (("segment_ids", (In("q_segment_ids"), In("kv_segment_ids"))),)
        options += (("sorted", True),) if segments_sorted and segment_values is None else ()
        if segment_values is not None:
            qv, kv_ids = (tuple(np.ravel(a).tolist()) for a in segment_values)  # hashable, as a Case is
            options += (("values", (("q_segment_ids", qv), ("kv_segment_ids", kv_ids))),)
    if window is not None or lengths is not None or segments is not None or mask is not None:
        options += (("block_masked", True),)  # keys each query never sees (test_fuzz's NaN tiers)
    return Case("flash_attention", shapes, dtype, (In("q"), In("k"), In("v")), kwargs, seed, fp32_inputs=fp32,
                int_inputs=ints, nondiff=fp32 + (("bias",) if bias is not None else ()), options=options)


def _dropout_kwargs(dropout, seed):
    return (("dropout_p", dropout), ("seed", 1000 + 7919 * seed)) if dropout else ()


def fa_varlen_case(seqs_q, seqs_k, Hq, Hkv, D, dtype="float32", causal=False, lse=True, scale=None, seed=0,
                   window=None, softcap=None, alibi=None, start=(0, 0), pad=(0, 0), max_seqlen=None, dropout=None):
    """flash_attention_varlen over sequences of these lengths (seqs_q[b] queries, seqs_k[b]
    keys), packed from row start and followed by pad rows that no sequence covers;
    max_seqlen (q, k) defaults to the longest."""
    cu_q, cu_k = (tuple(int(x) for x in s0 + np.concatenate([[0], np.cumsum(s, dtype=np.int64)]))
                  for s0, s in zip(start, (seqs_q, seqs_k)))
    Tq, Tk = cu_q[-1] + pad[0], cu_k[-1] + pad[1]
    max_q, max_k = max_seqlen or (max(seqs_q, default=0), max(seqs_k, default=0))
    B = len(seqs_q)
    shapes = (("q", (Tq, Hq, D)), ("k", (Tk, Hkv, D)), ("v", (Tk, Hkv, D)))
    kwargs = (("causal", causal), ("softmax_scale", scale), ("return_lse", lse))
    kwargs += (("window_size", window),) if window is not None else ()
    kwargs += (("softcap", softcap),) if softcap is not None else ()
    kwargs += _dropout_kwargs(dropout, seed)
    fp32 = ()
    if alibi is not None:
        shapes += (("alibi_slopes", (Hq,) if alibi == "h" else (B, Hq)),)
        fp32 += ("alibi_slopes",)
        kwargs += (("alibi_slopes", In("alibi_slopes")),)
    ints = (("cu_seqlens_q", (B + 1,), 0, 1), ("cu_seqlens_k", (B + 1,), 0, 1))
    options = (("values", (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k))), ("block_masked", True))
    args = (In("q"), In("k"), In("v"), In("cu_seqlens_q"), In("cu_seqlens_k"), max_q, max_k)
    return Case("flash_attention_varlen", shapes, dtype, args, kwargs, seed, fp32_inputs=fp32, int_inputs=ints,
                nondiff=fp32, options=options)


def check_cases(gpu: bool, dtype: str, quick: bool):
    """What ``ato check`` runs for this family in one dtype: (B, Hq, Hkv, Nq, Nk, D)."""
    dims = [(2, 8, 2, 1024, 1024, 128), (1, 4, 4, 700, 1500, 80)] if gpu else \
        [(1, 4, 2, 45, 29, 48), (1, 2, 2, 37, 70, 16)]
    cases = [fa_case(*d, dtype=dtype, causal=causal, seed=i) for i, d in enumerate(dims[:1] if quick else dims)
             for causal in (False, True)]
    # the options together: window, softcap, ALiBi, padding lengths, segment ids, bias, mask, dropout
    options = dict(window=(200 if gpu else 20, None), softcap=20.0, alibi="bh", lengths="both", segments=3,
                   bias="heads_keys", mask="pairs", dropout=0.1)
    dims = (2, 8, 2, 1000, 1500, 128) if gpu else (2, 2, 1, 50, 61, 16)
    # packed sequences (an empty one, rows outside every sequence) with a window and softcap
    seqs = ((700, 0, 1, 2000, 333), (900, 5, 1, 2000, 40)) if gpu else ((20, 0, 1, 45), (30, 5, 1, 40))
    varlen = fa_varlen_case(*seqs, 8 if gpu else 2, 2 if gpu else 1, 128 if gpu else 16, dtype=dtype, causal=True,
                            window=(500 if gpu else 15, None), softcap=20.0, pad=(3, 7), seed=10)
    return cases + [fa_case(*dims, dtype=dtype, causal=True, seed=9, **options), varlen]


# sm_90 compile examples (tests/test_compile_sm90.py): (label, op, args, kwargs)
# (label, op, args, kwargs[, grad]): the window, lengths, portable and D64 cases forward only
# (their backward plans are the first case's kernels).
COMPILE = [("flash_attention", "flash_attention", (gpu_spec((1, 8, 256, 128)), gpu_spec((1, 2, 256, 128)),
                                                   gpu_spec((1, 2, 256, 128))), {"causal": True, "return_lse": True}),
           ("flash_attention window", "flash_attention", (gpu_spec((1, 8, 256, 128)), gpu_spec((1, 2, 300, 128)),
                                                          gpu_spec((1, 2, 300, 128))), {"window_size": (64, 32)}, False),
           ("flash_attention lengths", "flash_attention", (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 300, 128)),
                                                           gpu_spec((2, 2, 300, 128))),
            {"causal": True, "q_lengths": gpu_spec((2,), "int32"), "kv_lengths": gpu_spec((2,), "int64")}, False),
           # the portable forward and backward at D 128 (other GPUs; on Hopper, rows cp.async
           # cannot copy)
           ("flash_attention portable", "flash_attention",
            (gpu_spec((1, 8, 256, 128))._replace(aligned=False), gpu_spec((1, 2, 256, 128)),
             gpu_spec((1, 2, 256, 128))), {"causal": True}),
           ("flash_attention d64", "flash_attention", (gpu_spec((1, 8, 256, 64)), gpu_spec((1, 2, 256, 64)),
                                                       gpu_spec((1, 2, 256, 64))), {"causal": True}, False),
           ("flash_attention options", "flash_attention",
            (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 256, 128)), gpu_spec((2, 2, 256, 128))),
            {"causal": True, "window_size": (64, None), "softcap": 30.0, "alibi_slopes": gpu_spec((8,), "float32"),
             "q_lengths": gpu_spec((2,), "int32"), "kv_lengths": gpu_spec((2,), "int32"),
             "segment_ids": gpu_spec((2, 256), "int32"), "bias": gpu_spec((8, 256, 256)),
             "mask": gpu_spec((2, 1, 256, 256), "bool")}),
           ("flash_attention bias", "flash_attention",
            (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 256, 128)), gpu_spec((2, 2, 256, 128))),
            {"causal": True, "bias": gpu_spec((8, 256, 256))}),
           ("flash_attention segments", "flash_attention",
            (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 256, 128)), gpu_spec((2, 2, 256, 128))),
            {"causal": True, "segment_ids": gpu_spec((2, 256), "int32")}),
           ("flash_attention dropout", "flash_attention",
            (gpu_spec((2, 8, 256, 128)), gpu_spec((2, 2, 256, 128)), gpu_spec((2, 2, 256, 128))),
            {"causal": True, "dropout_p": 0.1, "seed": gpu_spec((), "int64")}),
           ("flash_attention_varlen", "flash_attention_varlen",
            (gpu_spec((1024, 8, 128)), gpu_spec((1024, 2, 128)), gpu_spec((1024, 2, 128)), gpu_spec((5,), "int32"),
             gpu_spec((5,), "int32"), 512, 512), {"causal": True, "return_lse": True})]


def fuzz(pick):
    """A random case of each op (the fuzzing tier, tests/test_fuzz.py): {op name: Case}."""
    Hkv = pick.int(1, 2)
    return {"flash_attention": fa_case(
        pick.int(1, 2), Hkv * pick.int(1, 3), Hkv, pick.int(1, 80), pick.int(1, 80), pick.int(1, 72),
        dtype=pick.choice(("float32", "bfloat16")), causal=pick.choice((False, True)), lse=pick.choice((False, True)),
        scale=pick.choice((None, 0.3)), seed=pick.int(0, 99), layout=pick.choice(("bhnd", "bnhd")),
        window=pick.choice((None, None, (pick.int(0, 40), pick.choice((None, pick.int(0, 40)))))),
        softcap=pick.choice((None, None, 5.0)), alibi=pick.choice((None, None, "h", "bh")),
        lengths=pick.choice((None, None, "q", "kv", "both")), segments=pick.choice((None, None, 3)),
        bias=pick.choice((None, None, "full", "heads_keys")), mask=pick.choice((None, None, "full", "pairs")),
        dropout=pick.choice((None, None, 0.3))),
        "flash_attention_varlen": _fuzz_varlen(pick)}


def _fuzz_varlen(pick):
    B = pick.int(0, 3)
    Hkv = pick.int(1, 2)
    seqs_q = tuple(pick.int(0, 40) for _ in range(B))
    seqs_k = seqs_q if pick.choice((False, True)) else tuple(pick.int(0, 40) for _ in range(B))
    return fa_varlen_case(
        seqs_q, seqs_k, Hkv * pick.int(1, 3), Hkv, pick.int(1, 72), dtype=pick.choice(("float32", "bfloat16")),
        causal=pick.choice((False, True)), lse=pick.choice((False, True)), scale=pick.choice((None, 0.3)),
        seed=pick.int(0, 99), window=pick.choice((None, None, (pick.int(0, 20), pick.choice((None, pick.int(0, 20)))))),
        softcap=pick.choice((None, None, 5.0)), alibi=pick.choice((None, None, "h", "bh")) if B else None,
        start=(pick.int(0, 3), pick.int(0, 3)),
        pad=(pick.int(int(not sum(seqs_q)), 3), pick.int(int(not sum(seqs_k)), 3)),
        dropout=pick.choice((None, None, 0.3)))


# Magnitudes (Case option "magnitude") at which each op must match the reference (the
# fuzzing tier's test_fuzz_magnitude). Scores of up to D * 1e6: the softmax one-hot, its arg max well separated.
MAGNITUDES = {"flash_attention": (1e-30, 1e3), "flash_attention_varlen": (1e-30, 1e3)}
# Gradients not determined to the dtype's tolerance at a huge magnitude, compared there only for
# NaN and infinities: dq and dk are a cancellation (the softmax one-hot: sums of p (dp - delta) with
# dp = delta for the one key that counts); dv is p^T do with the backward's p = exp(s - lse), whose
# scores and lse of about 2.5e5 carry fp32 roundings of about 0.01-0.04 (their ulp), so p of the
# key that counts is 1 only within about 2%: 1.2-1.5% off float64 in dv at q [1, 4, 65, 48],
# fp32, in every draw (FlashAttention 2's form: any fp32 kernel).
CANCELLING = {"flash_attention": ("q", "k", "v"), "flash_attention_varlen": ("q", "k", "v")}
# Inputs whose infinity may come out NaN where the float64 reference's output is infinite (the
# fuzzing tier's test_fuzz_nan, the GPU tier's special values): v meets probabilities that round
# to zero in the kernel (an fp16 p below 2^-25, fp32 below 2^-149) and stay positive in float64,
# and 0 * inf is NaN (NVIDIA_H200-special-values.txt).
INF_AS_NAN = {"flash_attention": ("v",), "flash_attention_varlen": ("v",)}
