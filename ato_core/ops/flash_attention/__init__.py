"""flash_attention: the declaration. kernels.py (Triton), hopper.py (the forward and backward in
Gluon, for sm_90 GPUs), plans.py (checks, tiles, which kernel runs), reference.py, cases.py."""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.op import Op

from . import plans, reference


class Flash(NamedTuple):
    causal: bool
    softmax_scale: object
    return_lse: bool
    layout: str = "bhnd"
    options: plans.Options = plans.NO_OPTIONS


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, layout="bhnd", window_size=None,
                    softcap=None, alibi_slopes=None, q_lengths=None, kv_lengths=None, segment_ids=None, bias=None,
                    mask=None, dropout_p=0.0, seed=None):
    """Softmax attention, o = softmax(q k^T * softmax_scale) v, tiled (never Nq x Nk in memory).

    Args:
      q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D], Hq a multiple of Hkv (grouped-query and
        multi-query attention: query head h reads kv head h // (Hq / Hkv)). fp32, fp16 or
        bf16, one dtype and device; D in 1..256; any Nq, Nk >= 1; any strides (torch).
      causal: query i sees key j iff j <= i + Nk - Nq (aligned to the bottom right, as in
        FlashAttention 2); a query that sees no key gets zeros.
      softmax_scale: defaults to 1 / sqrt(D).
      return_lse: also return the log-sum-exp of the scores (natural log, fp32,
        [B, Hq, Nq]; -inf for a query that sees no key).
      layout: "bhnd" (the shapes above) or "bnhd": q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D], o
        likewise (FlashAttention's and flax's layout), read and written in place through
        strides, no transpose; lse stays [B, Hq, Nq].
      window_size: (left, right): query i sees key j only if i + shift - left <= j <= i +
        shift + right (shift = Nk - Nq, bottom-right aligned as causal); None or -1 on a side
        leaves it unbounded. With causal, right is 0. Key blocks outside every query's
        window are skipped: the time grows with the window, not with Nk.
      softcap: scores become softcap * tanh(s / softcap) (Gemma 2), s = q k^T * softmax_scale;
        None or 0: off.
      alibi_slopes: fp32 [Hq] or [B, Hq]: adds -slope * |i + shift - j| to each score (after
        the softcap), as FlashAttention 2. Not differentiated.
      q_lengths, kv_lengths: integer [B] (arrays, may be traced): batch b has its first
        q_lengths[b] queries and kv_lengths[b] keys (values outside [0, Nq], [0, Nk] raise
        ValueError where they are on the host; on a GPU they are clamped);
        keys past them are masked, queries past them get o = 0, lse = -inf and zero
        gradients; shift is then kv_lengths[b] - q_lengths[b].
      segment_ids: integer [B, N] (Nq == Nk), or a pair (q_segment_ids [B, Nq],
        kv_segment_ids [B, Nk]): query i sees key j only within its segment (documents packed
        into one sequence). Combines with every option above.
      bias: float, broadcastable to [B, Hq, Nq, Nk] (numpy's rules; size-1 axes are read with
        stride 0, never expanded): added to the scores after the softcap and ALiBi. Not
        differentiated (no gradient flows to it).
      mask: bool, broadcastable to [B, Hq, Nq, Nk]: True where the pair takes part
        (jax.nn.dot_product_attention's and torch's boolean attn_mask convention); a query
        with no True left gets o = 0 and lse = -inf. A bias or mask makes every key block take
        the masked path: for a structure the options above describe, they are faster.
      dropout_p: attention dropout, o = (softmax(s) * keep / (1 - dropout_p)) v: a Python float
        in [0, 1), rounded to a multiple of 2**-8 as FlashAttention 2 does (kept values are
        scaled so that the expectation stays exact). The mask is drawn from Philox4x32-7 keyed
        by the seed on counters of (b * Hq + h, i, j) (``reference.dropout_keep``), never
        stored: the backward draws it again.
      seed: required with dropout_p > 0, as dropout_residual_layer_norm takes it: a Python int
        in [0, 2**31) (static), or read by the kernels (traced under jax.jit without retrace,
        updated in place under CUDA graphs): a 0-d int32/int64 array on q's device, a
        jax.random key (typed, or raw uint32 [2]), a torch.Generator (a seed drawn from it,
        advancing it). The same seed gives the same mask in both frameworks, CPU and GPU.

    Returns:
      o [B, Hq, Nq, D] (or [B, Nq, Hq, D]) in q's dtype, or (o, lse). Differentiable with
      respect to q, k and v (through lse too).

    A NaN or infinity in the values of a key that no query of a kernel's query block sees
    reaches no output or gradient of that block (the portable kernels; not yet the Hopper
    kernels, bf16 / fp16 on sm_90). One that some query of the block sees may reach the
    block's other rows (0 * NaN in the tile's product), as in FlashAttention and a dense
    softmax(s) @ v.
    """
    checks.check_bool("return_lse", return_lse)
    checks.check_choice("layout", layout, plans.LAYOUTS)
    options = plans.Options(plans.check_window(window_size), plans.check_softcap(softcap))
    pair = type(segment_ids) in (tuple, list)  # (an array may be a tuple subclass: ArraySpec)
    if pair and len(segment_ids) != 2:
        raise ValueError(f"segment_ids: expected an array or a pair (q_segment_ids, kv_segment_ids), "
                         f"got {len(segment_ids)} items")
    q_seg, kv_seg = segment_ids if pair else (segment_ids, segment_ids)
    if (q_seg is None) != (kv_seg is None):
        raise ValueError("segment_ids: expected both q_segment_ids and kv_segment_ids, got one of them None")
    options, seed = _dropout(options, dropout_p, seed)
    return (q, k, v, alibi_slopes, q_lengths, kv_lengths, q_seg, kv_seg, bias, mask, seed), \
        Flash(causal, softmax_scale, return_lse, layout, options)


def _dropout(options: plans.Options, dropout_p, seed):
    """(options with dropout_p and an int seed, the seed array or None)."""
    p, static_seed = plans.check_dropout(dropout_p, seed)
    array = None if static_seed is not None or p == 0 else seed
    return options._replace(dropout_p=p, seed=static_seed), array


def _arrays(s):
    return tuple(s.get(n) for n in plans.OPTION_ARRAYS)


def _forward(s, st: Flash, target):
    return plans.forward_plan(s["q"], s["k"], s["v"], causal=st.causal, softmax_scale=st.softmax_scale,
                              target=target, layout=st.layout, options=st.options, arrays=_arrays(s))


def _backward(s, st: Flash, target):
    return plans.backward_plan(s["q"], s["k"], s["v"], s["do"], causal=st.causal, softmax_scale=st.softmax_scale,
                               has_dlse=s.get("dlse") is not None, target=target, layout=st.layout,
                               options=st.options, arrays=_arrays(s))


def _check_values(s, st: Flash, host):
    """Lengths within [0, N] where their values are on the host (the kernels clamp them)."""
    n_axis = plans.axes(st.layout)[1]
    for name, n in (("q_lengths", s["q"].shape[n_axis]), ("kv_lengths", s["k"].shape[n_axis])):
        values = host(name) if s.get(name) is not None else None
        if values is not None and values.size:
            _check_within(name, values.min(), values.max(), n)


def _check_within(name: str, lo, hi, n: int) -> None:
    """Host values of lengths or offsets (least lo, largest hi) within [0, n]."""
    if lo < 0 or hi > n:
        raise ValueError(f"{name}: expected values in [0, {n}], got [{lo}, {hi}]")


FLASH_ATTENTION = Op(
    flash_attention, inputs=("q", "k", "v", *plans.OPTION_ARRAYS), results=("o", "lse", "lse_base2"),
    returns=lambda st: ("o", "lse") if st.return_lse else ("o",), optional_cotangents=(("dlse",),),
    optional=plans.OPTION_ARRAYS, saved=("q", "k", "v", "o", "lse", "lse_base2", *plans.OPTION_ARRAYS),
    differentiable=("q", "k", "v"), forward=_forward, backward=_backward, check_values=_check_values,
    reference=reference.flash_attention, family="flash_attention", random=("seed",),
    batch=("q", "k", "v", "q_lengths", "kv_lengths", "q_segment_ids", "kv_segment_ids"))



class FlashVarlen(NamedTuple):
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool
    softmax_scale: object
    return_lse: bool
    options: plans.Options = plans.NO_OPTIONS


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                           softmax_scale=None, return_lse=False, window_size=None, softcap=None, alibi_slopes=None,
                           dropout_p=0.0, seed=None):
    """Softmax attention over packed variable-length sequences (FlashAttention 2's
    flash_attn_varlen_func): sequence b is the rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q
    and [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v, and attends only within itself.

    Args:
      q: [Tq, Hq, D]; k, v: [Tk, Hkv, D], Hq a multiple of Hkv (grouped-query attention). fp32,
        fp16 or bf16, one dtype and device; D in 1..256; any strides (torch).
      cu_seqlens_q, cu_seqlens_k: integer [B + 1] (arrays, may be traced), non-decreasing, from
        cu_seqlens[0] >= 0 to cu_seqlens[B] <= T. Rows outside every sequence (a packing padded
        to a fixed T) get o = 0, lse = -inf and zero gradients.
      max_seqlen_q, max_seqlen_k: ints (static: they size the launch), at least every
        sequence's length. Values that break these rules raise ValueError where they are on
        the host; on a GPU a sequence is cut at max_seqlen (its rows past it: zeros), and every
        index is clamped into [0, T].
      causal, softmax_scale, window_size, softcap: as flash_attention, per sequence (causal and
        windows aligned to each sequence's bottom right).
      return_lse: also return lse [Hq, Tq] (fp32, natural log).
      alibi_slopes: fp32 [Hq] or [B, Hq], as flash_attention. Not differentiated.
      dropout_p, seed: as flash_attention, with b the sequence and i, j positions within it.

    Returns:
      o [Tq, Hq, D] in q's dtype, or (o, lse). Differentiable with respect to q, k and v.
    """
    checks.check_bool("return_lse", return_lse)
    options, seed = _dropout(plans.Options(plans.check_window(window_size), plans.check_softcap(softcap)),
                             dropout_p, seed)
    return (q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, seed), \
        FlashVarlen(max_seqlen_q, max_seqlen_k, causal, softmax_scale, return_lse, options)


def _varlen_kwargs(s, st: FlashVarlen, target):
    return dict(max_seqlen_q=st.max_seqlen_q, max_seqlen_k=st.max_seqlen_k, causal=st.causal,
                softmax_scale=st.softmax_scale, target=target, options=st.options, alibi=s.get("alibi_slopes"),
                seed=s.get("seed"))


def _varlen_forward(s, st: FlashVarlen, target):
    return plans.varlen_forward_plan(s["q"], s["k"], s["v"], s["cu_seqlens_q"], s["cu_seqlens_k"],
                                     **_varlen_kwargs(s, st, target))


def _varlen_backward(s, st: FlashVarlen, target):
    return plans.varlen_backward_plan(s["q"], s["k"], s["v"], s["cu_seqlens_q"], s["cu_seqlens_k"], s["do"],
                                      has_dlse=s.get("dlse") is not None, **_varlen_kwargs(s, st, target))


def _check_varlen_values(s, st: FlashVarlen, host):
    """cu_seqlens within [0, T], non-decreasing, no sequence longer than max_seqlen, where the
    values are on the host (the kernels clamp them)."""
    for side, t, longest in (("q", s["q"].shape[0], st.max_seqlen_q), ("k", s["k"].shape[0], st.max_seqlen_k)):
        name = f"cu_seqlens_{side}"
        cu = host(name)
        if cu is None:
            continue
        _check_within(name, cu[0], cu[-1], t)
        lengths = cu[1:] - cu[:-1]
        if lengths.size and lengths.min() < 0:
            raise ValueError(f"{name}: expected non-decreasing values, got {cu.tolist()}")
        if lengths.size and lengths.max() > longest:
            raise ValueError(f"{name}: a sequence of {lengths.max()} rows, longer than max_seqlen_{side}={longest}")


FLASH_ATTENTION_VARLEN = Op(
    flash_attention_varlen, inputs=("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "seed"),
    results=("o", "lse", "lse_base2"), returns=lambda st: ("o", "lse") if st.return_lse else ("o",),
    optional_cotangents=(("dlse",),), optional=("alibi_slopes", "seed"), random=("seed",),
    saved=("q", "k", "v", "o", "lse", "lse_base2", "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "seed"),
    differentiable=("q", "k", "v"), forward=_varlen_forward, backward=_varlen_backward,
    check_values=_check_varlen_values, reference=reference.flash_attention_varlen, family="flash_attention")

OPS = (FLASH_ATTENTION, FLASH_ATTENTION_VARLEN)
