"""decode_attention and merge_attention_states: argument checks and launch plans.

Decided here: the token tile, the split of each sequence's token range over programs
(flash-decoding: enough programs to fill the GPU at small batches), and when the partials
need merging.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from ato_core import checks
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2, numel,
                             row_alignment)
from ato_core.layout import axes, swapped
from ato_core.target import Target, has_gluon

from ..flash_attention import plans as fa_plans
from ..flash_attention.plans import LOG2E, MAX_HEAD_DIM, check_softmax_scale, dot_precision, resolve_scale
from . import kernels as kern

# the Hopper chunk-first kernel, in Gluon: only with the Triton it was written for (target.has_gluon)
if has_gluon():
    from . import hopper
else:
    hopper = None

# Token rows per tile of the split kernel (GPU; the interpreter: small, so that short test
# sequences cross tiles, splits and blocks).
TOKENS = 64
INTERPRETER_TOKENS = 16
# The interpreter splits every INTERPRETER_SPLIT_TILES tiles (tests set it high for one split).
INTERPRETER_SPLIT_TILES = 2
# Programs the split aims for, per SM, and the most splits (each adds a partial that the
# combine reads); the split kernel's warps and pipelining stages.
PROGRAMS_PER_SM = 4
MAX_SPLITS = 64
# The share of the places a wave of splits must fill (B24 Hkv8: 2 splits fill 0.73, 3 ran 6% faster).
ONE_WAVE = 0.9
WARPS = 4
STAGES = 2
# A register cap for the split kernel where it merges the chunk partials (four partials' loads in
# flight take it to 139 a thread: 3 programs an SM; at 128, 4 and no spill on sm_90).
MERGE_MAXNREG = 128


# The caches' layouts (ato_core.layout's names: where the token axis stands against the heads):
# "bnhd" [num_blocks, block_size, Hkv, D], the kernels' view, or "bhnd" [num_blocks, Hkv,
# block_size, D], read in place (the plan swaps axes 1 and 2 of its shape and strides).
_CACHE_SHAPES = {"bnhd": "[num_blocks, block_size, Hkv, D]", "bhnd": "[num_blocks, Hkv, block_size, D]"}


def check_decode(q: ArraySpec, k: ArraySpec, v: ArraySpec, table: ArraySpec, lens: ArraySpec,
                 softmax_scale, layout: str = "bnhd") -> Tuple[int, ...]:
    """Validates decode_attention's arguments (the caches in ``layout``); returns (B, Hq, Hkv, D,
    num_blocks, BS, max_blocks)."""
    desc = _CACHE_SHAPES[layout]
    checks.check_rank("q", q, 3, "[B, Hq, D]")
    checks.check_rank("k_cache", k, 4, desc)
    checks.check_rank("v_cache", v, 4, desc)
    for name, spec in (("q", q), ("k_cache", k), ("v_cache", v)):
        checks.check_float(name, spec)
    checks.check_same_dtype(("q", "k_cache", "v_cache"), (q, k, v))
    checks.check_same_device(("q", "k_cache", "v_cache", "block_table", "seq_lens"), (q, k, v, table, lens))
    B, Hq, D = q.shape
    h, t = axes(layout)
    NB, BS, Hkv = k.shape[0], k.shape[t], k.shape[h]
    checks.check_shape("v_cache", v, tuple(k.shape), f"{desc}, the shape of k_cache")
    checks.check_dim("k_cache", k, 3, D, "D, the head size of q")
    # B may be 0 (an empty batch: empty results)
    checks.check_range("q.shape[2] (D)", D, 1, MAX_HEAD_DIM)
    checks.check_range("k_cache.shape[0] (num_blocks)", NB, 1)
    if BS not in (16, 32, 64, 128, 256):
        raise ValueError(f"k_cache.shape[{t}] (block_size): expected a power of two from 16 to 256, got {BS}")
    checks.check_range(f"k_cache.shape[{h}] (Hkv)", Hkv, 1)
    if Hq % Hkv:
        raise ValueError(f"q.shape[1] (Hq): expected a multiple of Hkv = {Hkv} (k_cache.shape[{h}]), got {Hq}")
    checks.check_int("block_table", table)
    checks.check_int("seq_lens", lens)
    checks.check_rank("block_table", table, 2, "[B, max_blocks]")
    checks.check_dim("block_table", table, 0, B, "B, as in q")
    checks.check_range("block_table.shape[1] (max_blocks)", table.shape[1], 1)
    checks.check_shape("seq_lens", lens, (B,), "[B]")
    check_softmax_scale(softmax_scale)
    return B, Hq, Hkv, D, NB, BS, table.shape[1]


def check_decode_step(module: str, q: ArraySpec, k: ArraySpec, v: ArraySpec, table: ArraySpec, lens: ArraySpec,
                      num_kv_heads: int, head_dim: int, table_values=None, lens_values=None) -> None:
    """A decoding layer's step (``module`` names it), before it writes the new token's key and
    value at position lens[b]: decode_attention's checks, caches of the layer's kv heads and
    head size, and, where the values are on the host (NumPy, else None), room for the token
    (lengths below max_blocks * block_size) and valid ids for every block then in use."""
    check_decode(q, k, v, table, lens, None)
    for name, c in (("k_cache", k), ("v_cache", v)):
        if tuple(c.shape[2:]) != (num_kv_heads, head_dim):
            raise ValueError(f"{module}: {name}: expected [num_blocks, block_size, {num_kv_heads}, {head_dim}] (the "
                             f"layer's kv heads and head size), got shape {tuple(c.shape)}")
    if table_values is None or lens_values is None:
        return
    lens_values = np.asarray(lens_values).astype(np.int64)
    cap = table.shape[1] * k.shape[1]
    full = np.flatnonzero((lens_values < 0) | (lens_values >= cap))
    if full.size:
        b = int(full[0])
        raise ValueError(f"seq_lens: expected lengths in [0, {cap}) (room for the new token in max_blocks * "
                         f"block_size), got seq_lens[{b}] = {int(lens_values[b])}")
    check_decode_values(np.asarray(table_values), lens_values + 1, k.shape[0], k.shape[1])


def check_decode_values(table: np.ndarray, lens: np.ndarray, num_blocks: int, block_size: int) -> None:
    """Checks on the values, where they are on the host: block ids in range for every block a
    sequence uses, lengths within the table."""
    cap = table.shape[1] * block_size
    bad = np.flatnonzero((lens < 0) | (lens > cap))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"seq_lens: expected lengths in [0, {cap}] (max_blocks * block_size), got "
                         f"seq_lens[{b}] = {int(lens[b])}")
    used = np.arange(table.shape[1])[None, :] < -(-lens[:, None] // block_size)
    out = used & ((table < 0) | (table >= num_blocks))
    if out.any():
        b, j = map(int, np.argwhere(out)[0])
        raise ValueError(f"block_table: expected block ids in [0, {num_blocks}) for the blocks a sequence uses, got "
                         f"block_table[{b}, {j}] = {int(table[b, j])}")


def _split(B: int, Hkv: int, max_len: int, tokens: int, target: Target) -> int:
    """Tokens per split: a multiple of the tile; at most MAX_SPLITS splits (the interpreter:
    INTERPRETER_SPLIT_TILES tiles a split). The GPU's PROGRAMS_PER_SM * SMs places: the most
    splits that fit in one wave where they fill at least ONE_WAVE of it (B8 Hkv8 on 132 SMs: 8
    splits, 512 programs; 9 left 48 for a second wave, 7% slower on an H200); else enough to
    fill it, none where that is 2 or fewer (a split's combine would cost more than it gains)."""
    if target.interpret:
        return INTERPRETER_SPLIT_TILES * tokens
    places, rows = PROGRAMS_PER_SM * target.num_sms, max(B * Hkv, 1)
    want = places // rows
    if want * rows < ONE_WAVE * places:
        want = cdiv(places, rows)
        if want <= 2:
            want = 1
    want = max(1, min(want, MAX_SPLITS))
    nsplit = max(1, min(want, cdiv(max_len, tokens)))
    return cdiv(cdiv(max_len, nsplit), tokens) * tokens


SCHEDULE = ("sched_work", "sched_task_seqs", "sched_task_blocks", "sched_unit_seq", "sched_seq_units",
            "sched_seq_start")
# The chunk kernel's tile (query rows: a task's sequences times G heads; token rows), warps and
# stages, by dtype class; the programs it aims for per SM (row tiles of one work item go to
# several programs while there are too few work items). 5 GPU stages: at fewer, Triton pipelines
# the block-id load and the K/V gathers behind it with one buffer and waits for every copy at
# each tile's start (chunk kernel 27.3 -> 22.3 us on the bench batch, decode-sweep.txt 8).
CHUNK_TILES = {"gpu": (128, 64, 8, 5), "float32": (64, 32, 4, 2), "interpreter": (16, 16, 4, 1)}
CHUNK_PROGRAMS_PER_SM = 2
# With a schedule, the parts each sequence's own tokens are split into (0: as _split decides).
SCHEDULE_SPLITS = 0
# The Gluon chunk kernel (hopper.py, sm_90): key tiles of 64 tokens (a work item's first token,
# a multiple of schedule.CHUNK_TOKENS, is one of 64), the ring's depth, the producer's rows a
# copy, and registers a thread (two consumer warpgroups and the producer's within 64 K).
HOPPER_CHUNK = {"BLOCK_N": 64, "STAGES": 4, "CHUNK": 32, "PRODUCER_REGS": 56, "CONSUMER_REGS": 224}


def _hopper_chunk(q: ArraySpec, k: ArraySpec, v: ArraySpec, D: int, target: Target, rows: int, W: int, U: int,
                  G: int) -> bool:
    """Whether the chunk-first launch runs the Gluon kernel: a Hopper GPU, fp16 / bf16, D 128
    (flash attention's Gluon conditions), rows that cp.async can copy, and not many idle
    programs: its grid has a program for each 128-row tile of all tasks' ``rows`` a work item
    (one tile each), so many small tasks (U / W sequences a work item on average) would leave
    most of them without rows; the portable kernel loops over its row tiles instead."""
    busy = cdiv(cdiv(U, max(W, 1)) * G, 128)
    return (hopper is not None and fa_plans._gluon_applies(q, D, 1, target, fa_plans.Options(), ())
            and fa_plans._cp_async_rows(q, k, v) and cdiv(rows, 128) <= 2 * busy)


def check_schedule(sched, B: int) -> Tuple[int, int, int]:
    """The schedule's arrays (DecodeSchedule's, in order): int32, consistent shapes. Returns
    (work items W, units U, depth)."""
    names = ("schedule.work", "schedule.task_seqs", "schedule.task_blocks", "schedule.unit_seq",
             "schedule.seq_units", "schedule.seq_start")
    ranks = (2, 1, 1, 1, 2, 1)
    for name, spec, rank in zip(names, sched, ranks):
        if spec.dtype != "int32":
            raise TypeError(f"{name}: expected int32 (decode_schedule's), got {spec.dtype}")
        checks.check_rank(name, spec, rank, "as decode_schedule makes it")
    work, _, _, unit_seq, seq_units, seq_start = sched
    checks.check_dim("schedule.work", work, 1, 6, "6 fields a work item")
    checks.check_dim("schedule.seq_units", seq_units, 0, B, "B, as in q")
    checks.check_shape("schedule.seq_start", seq_start, (B,), "[B]")
    return work.shape[0], unit_seq.shape[0], seq_units.shape[1]


@cached_plan
def decode_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, table: ArraySpec, lens: ArraySpec, *, softmax_scale,
                target: Target, schedule=None, layout: str = "bnhd") -> Plan:
    """Inputs: q, k_cache, v_cache (in ``layout``), block_table, seq_lens and, with a schedule (a
    tuple of its six array specs), the SCHEDULE arrays. Results: o [B, Hq, D] (q's dtype), lse
    [B, Hq] fp32."""
    B, Hq, Hkv, D, NB, BS, MB = check_decode(q, k, v, table, lens, softmax_scale, layout)
    if layout == "bhnd":
        k, v = swapped(k), swapped(v)
    W = U = depth = 0
    if schedule is not None:
        W, U, depth = check_schedule(schedule, B)
    chunk = W > 0
    scale = resolve_scale(softmax_scale, D)
    tokens = INTERPRETER_TOKENS if target.interpret else TOKENS
    max_len = MB * BS
    split_len = _split(B, Hkv, max_len, tokens, target)
    nsplit = cdiv(max_len, split_len)
    if chunk and SCHEDULE_SPLITS and not target.interpret:
        nsplit = SCHEDULE_SPLITS
    G = Hq // Hkv
    align = row_alignment((D,), (q, k, v))
    precision = dot_precision(q.dtype)
    BD = max(16, next_pow2(D))
    merge = chunk and nsplit == 1  # the split kernel merges the chunk partials itself
    partial = nsplit > 1 or (chunk and not merge)
    ce = {"GP": max(16, next_pow2(G)), "BN": tokens, "BD": BD, "BS": BS, "PRECISION": precision,
          "PARTIAL": partial, "ALIGN": align, "HAS_START": chunk, "MERGE": merge,
          "BDEPTH": next_pow2(max(depth, 1))}
    scalars = (Hkv, G, D, NB, max_len, split_len, scale * LOG2E, U, depth, *q.strides, *k.strides, *v.strides,
               *table.strides)
    inputs = ("q", "k_cache", "v_cache", "block_table", "seq_lens", "sched_seq_start" if chunk else "seq_lens",
              *(("chunk_o", "chunk_lse", "sched_seq_units") if merge else ("seq_lens",) * 3))
    out = (Buffer("o", (B, Hq, D), q.dtype), Buffer("lse", (B, Hq), "float32"))
    launches = []
    if chunk:
        M, BN, warps, stages = CHUNK_TILES["interpreter" if target.interpret else
                                          "float32" if q.dtype == "float32" else "gpu"]
        rows = schedule[1].shape[0] * G  # every task's rows: a bound on one work item's
        R = 2 if target.interpret else cdiv(CHUNK_PROGRAMS_PER_SM * target.num_sms, W * Hkv)
        R = max(1, min(R, cdiv(rows, M)))
        chunk_out = (Buffer("chunk_o", (Hkv, U, G, D), "float32"), Buffer("chunk_lse", (Hkv, U, G), "float32"))
        if _hopper_chunk(q, k, v, D, target, rows, W, U, G):
            launches.append(Launch(
                hopper.decode_chunk_hopper_kernel, (W, cdiv(rows, 128), Hkv),
                ("q", "k_cache", "v_cache", *SCHEDULE[:3]),
                (Hkv, G, NB, U, scale * LOG2E, *q.strides[:2], *k.strides[:3], *v.strides[:3]), chunk_out,
                {"D": D, "BS": BS, **HOPPER_CHUNK}, num_warps=4))
        else:
            launches.append(Launch(
                kern.decode_chunk_kernel, (W, R, Hkv), ("q", "k_cache", "v_cache", *SCHEDULE[:3]),
                (Hkv, G, D, NB, U, scale * LOG2E, *q.strides, *k.strides, *v.strides), chunk_out,
                {"M": M, "BN": BN, "BD": BD, "BS": BS, "PRECISION": precision, "ALIGN": align},
                num_warps=warps, num_stages=stages))
    if not partial:
        launches.append(Launch(kern.decode_split_kernel, (1, B * Hkv), inputs, scalars, out, ce, num_warps=WARPS,
                               num_stages=STAGES, maxnreg=MERGE_MAXNREG if merge and not target.interpret else None))
        return Plan(tuple(launches), ("o", "lse"))
    parts = (Buffer("o_parts", (B, Hq, nsplit, D), "float32"), Buffer("lse_parts", (B, Hq, nsplit), "float32"))
    launches.append(Launch(kern.decode_split_kernel, (nsplit, B * Hkv), inputs, scalars, parts, ce, num_warps=WARPS,
                           num_stages=STAGES))
    cin = ("chunk_o", "chunk_lse", "sched_seq_units") if chunk else ("o_parts", "lse_parts", "seq_lens")
    launches.append(Launch(
        kern.decode_combine_kernel, (B * Hq,), ("o_parts", "lse_parts", *cin), (nsplit, D, G, Hq, U, depth), out,
        {"BSPLIT": next_pow2(nsplit), "BDEPTH": next_pow2(max(depth, 1)),
         "BD": min(BD, max(16, 4096 // next_pow2(nsplit + depth))), "HAS_CHUNK": chunk},
        num_warps=4))
    return Plan(tuple(launches), ("o", "lse"))


def check_merge(o_a: ArraySpec, lse_a: ArraySpec, o_b: ArraySpec, lse_b: ArraySpec) -> Tuple[int, int]:
    """Validates merge_attention_states' arguments; returns (rows, D)."""
    for name, spec in (("o_a", o_a), ("lse_a", lse_a), ("o_b", o_b), ("lse_b", lse_b)):
        checks.check_float(name, spec)
    checks.check_same_device(("o_a", "lse_a", "o_b", "lse_b"), (o_a, lse_a, o_b, lse_b))
    if o_a.ndim < 1:
        raise ValueError("o_a: expected at least 1 dimension [..., D], got a scalar")
    checks.check_same_dtype(("o_a", "o_b"), (o_a, o_b))
    checks.check_shape("o_b", o_b, tuple(o_a.shape), "the shape of o_a")
    lead = tuple(o_a.shape[:-1])
    checks.check_shape("lse_a", lse_a, lead, "o_a's shape without its last axis")
    checks.check_shape("lse_b", lse_b, lead, "o_a's shape without its last axis")
    D = o_a.shape[-1]
    checks.check_range("o_a.shape[-1] (D)", D, 1)
    rows = numel(lead)
    return rows, D


@cached_plan
def merge_plan(o_a: ArraySpec, lse_a: ArraySpec, o_b: ArraySpec, lse_b: ArraySpec, *, target: Target) -> Plan:
    """Inputs: o_a, lse_a, o_b, lse_b (read row-major). Results: o (o_a's dtype), lse (fp32)."""
    rows, D = check_merge(o_a, lse_a, o_b, lse_b)
    R = 16
    launch = Launch(kern.merge_states_kernel, (cdiv(rows, R),), ("o_a", "lse_a", "o_b", "lse_b"), (rows, D),
                    (Buffer("o", tuple(o_a.shape), o_a.dtype), Buffer("lse", tuple(lse_a.shape), "float32")),
                    {"ROWS": R, "BD": min(max(16, next_pow2(D)), 128), "ALIGN": alignment(D)}, num_warps=4)
    return Plan((launch,), ("o", "lse"), dense=("o_a", "lse_a", "o_b", "lse_b"))
