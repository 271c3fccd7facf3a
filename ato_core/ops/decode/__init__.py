"""decode_attention and merge_attention_states: the declarations. Decode attention over a
paged KV cache (inference: forward only). kernels.py (Triton), plans.py (checks, tiles,
splits), reference.py, cases.py."""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.layout import axes, check_layout
from ato_core.op import Op, forward_only

from . import plans, reference
from .schedule import DecodeSchedule, decode_schedule  # noqa: F401  (the host-side builder)


class Decode(NamedTuple):
    softmax_scale: object
    return_lse: bool
    layout: str = "bnhd"


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, softmax_scale=None, return_lse=False,
                     schedule=None, layout="bnhd"):
    """Attention of one query token per sequence over its keys in a paged KV cache
    (flash-decoding: long sequences split over several programs, their partials merged).

    Args:
      q: [B, Hq, D]; fp32, fp16 or bf16; D in 1..256.
      k_cache, v_cache: [num_blocks, block_size, Hkv, D], q's dtype; block_size a power of two
        from 16 to 256; Hq a multiple of Hkv (query head h reads kv head h // (Hq / Hkv)).
      block_table: int32 (or int64) [B, max_blocks]: the physical blocks of each sequence, in
        order; token t of sequence b is k_cache[block_table[b, t // block_size], t % block_size].
      seq_lens: int32 (or int64) [B], each in [0, max_blocks * block_size]; 0 gives zeros and
        lse -inf. Block ids and lengths are checked where they are on the host (CPU arrays);
        on a GPU a bad id is clamped into the cache, never read outside it.
      softmax_scale: default 1 / sqrt(D).
      return_lse: also return lse [B, Hq], the natural-log log-sum-exp of the scores (fp32).
      schedule: None, or decode_schedule(block_table, seq_lens, block_size=...) of this batch
        layout (the adapters' decode_schedule gives it as their arrays; under jax.jit pass it in
        as arguments or constants): blocks that several sequences hold at the same position go
        through the chunk-first kernel (read once per kv head for all of them), the rest through
        the seq-first one, and the partials are merged. It must be rebuilt when the table or the
        lengths change (a stale schedule gives wrong results; it is not checked on the device).
      layout: the caches' layout, "bnhd" ([num_blocks, block_size, Hkv, D]: vLLM's and
        FlashInfer's NHD) or "bhnd" ([num_blocks, Hkv, block_size, D]: FlashInfer's HND), read
        in place through strides.

    Returns: o [B, Hq, D] in q's dtype, or (o, lse). Forward only: no gradient.
    """
    checks.check_bool("return_lse", return_lse)
    check_layout(layout)
    if schedule is None:
        sched = (None,) * len(plans.SCHEDULE)
    elif isinstance(schedule, tuple) and len(schedule) == len(plans.SCHEDULE):
        sched = tuple(schedule)
    else:
        raise TypeError(f"schedule: expected None or a DecodeSchedule (decode_schedule's), got {type(schedule).__name__}")
    return (q, k_cache, v_cache, block_table, seq_lens, *sched), Decode(softmax_scale, return_lse, layout)


def _check_values(s, st: Decode, host):
    table, lens = host("block_table"), host("seq_lens")
    if table is not None and lens is not None:
        plans.check_decode_values(table, lens, s["k_cache"].shape[0], s["k_cache"].shape[axes(st.layout)[1]])


def _forward(s, st: Decode, target):
    sched = None if s["sched_work"] is None else tuple(s[n] for n in plans.SCHEDULE)
    return plans.decode_plan(s["q"], s["k_cache"], s["v_cache"], s["block_table"], s["seq_lens"],
                             softmax_scale=st.softmax_scale, target=target, schedule=sched, layout=st.layout)


DECODE_ATTENTION = Op(
    decode_attention, inputs=("q", "k_cache", "v_cache", "block_table", "seq_lens", *plans.SCHEDULE),
    results=("o", "lse"), returns=lambda st: ("o", "lse") if st.return_lse else ("o",), saved=(),
    optional=plans.SCHEDULE, differentiable=("q", "k_cache", "v_cache"), forward=_forward,
    backward=forward_only("decode_attention"), check_values=_check_values,
    reference=reference.decode_attention, family="decode")


def merge_attention_states(o_a, lse_a, o_b, lse_b):
    """Merges two attentions over disjoint key sets (cascade inference, chunked prefill):
    lse = log(exp(lse_a) + exp(lse_b)), o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b.

    Args: o_a, o_b: [..., D], one float dtype; lse_a, lse_b: [...] (natural log, as
      flash_attention and decode_attention return; -inf: no key, weighs 0).
    Returns: (o [..., D] in o_a's dtype, lse [...] fp32); both empty: zeros and -inf.
      Forward only: no gradient.
    """
    return (o_a, lse_a, o_b, lse_b), None


MERGE_ATTENTION_STATES = Op(
    merge_attention_states, inputs=("o_a", "lse_a", "o_b", "lse_b"), results=("o", "lse"), saved=(),
    differentiable=("o_a", "lse_a", "o_b", "lse_b"),
    forward=lambda s, st, target: plans.merge_plan(s["o_a"], s["lse_a"], s["o_b"], s["lse_b"], target=target),
    backward=forward_only("merge_attention_states"), reference=reference.merge_attention_states, family="decode",
    batch=("o_a", "lse_a", "o_b", "lse_b"))

OPS = (DECODE_ATTENTION, MERGE_ATTENTION_STATES)
