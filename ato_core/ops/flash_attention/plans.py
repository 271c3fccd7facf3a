"""flash_attention: argument checks and launch plans.

Every block size, warp count and pipelining depth of this op is decided here, from the
head size, the dtype and the Target.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import NamedTuple, Optional, Tuple

from ato_core import checks
from . import kernels as kern
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2, optional_output,
                             row_alignment, row_major_strides, scratch_buffer)
from ato_core.layout import LAYOUTS, as_bhnd, axes, bhnd_strides, check_layout, laid_out  # noqa: F401
from ato_core.target import Target

MAX_HEAD_DIM = 256
LOG2E = 1.4426950408889634


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Block sizes and launch shape of one kernel: rows of queries (m) and keys (n)."""

    m: int
    n: int
    warps: int
    stages: int


@dataclasses.dataclass(frozen=True)
class Config:
    BD: int            # head dim padded to a power of two >= 16 (masked, never in memory)
    fwd: Tiles
    dkdv: Tiles
    dq: Tiles
    delta_rows: int
    precision: str     # "ieee" for fp32 inputs (exact fp32 dots), else the tensor-core default


# Compiled tiles by padded head dim, for fp16/bf16: the fastest of benchmarks/tools/fa_sweep.py
# on an H100 at the bench shapes (results index: flash_attention-sweep). Below 64 the D64
# tiles; D256 (not swept) keeps its fp32 accumulators of [rows, 256] within 8 warps' registers.
# D64's dQ: 64 x 64 at 4 warps, on an H200 0.92x / 0.91x the time of 128 x 32 at 8 (full / causal,
# B16 H16 N1024), 1.00x / 0.99x at B4 H64 N4096 (NVIDIA_H200-flash_d64_bwd-sweep.txt; the H100's
# sweep at B4 H64: 1.03x / 0.96x).
_GPU_TILES = {
    # BD: (fwd, dkdv, dq)
    16: (Tiles(128, 64, 8, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 3)),
    32: (Tiles(128, 64, 8, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 3)),
    64: (Tiles(128, 64, 8, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 3)),
    128: (Tiles(128, 128, 8, 3), Tiles(64, 128, 8, 3), Tiles(128, 64, 8, 3)),
    256: (Tiles(64, 32, 8, 2), Tiles(32, 32, 8, 2), Tiles(64, 32, 8, 2)),
}
# fp32 (IEEE dots, twice the shared memory per element): smaller tiles, not tuned.
_GPU_TILES_FP32 = {
    16: (Tiles(64, 32, 4, 2), Tiles(32, 64, 4, 2), Tiles(64, 32, 4, 2)),
    32: (Tiles(64, 32, 4, 2), Tiles(32, 64, 4, 2), Tiles(64, 32, 4, 2)),
    64: (Tiles(64, 32, 4, 2), Tiles(32, 64, 4, 2), Tiles(64, 32, 4, 2)),
    128: (Tiles(64, 32, 4, 2), Tiles(32, 64, 4, 2), Tiles(64, 32, 4, 2)),
    256: (Tiles(32, 32, 4, 1), Tiles(32, 32, 4, 1), Tiles(32, 32, 4, 1)),
}
# The interpreter: small, unequal blocks, so that short test sequences still cross
# several blocks and every boundary case (masked and unmasked ranges) runs.
_INTERPRETER_TILES = (Tiles(32, 16, 4, 1), Tiles(16, 32, 4, 1), Tiles(32, 16, 4, 1))
# With dropout (a Philox draw covers 16 queries x 32 keys: kernels._dropout_keep), key blocks of 32.
_INTERPRETER_DROPOUT_TILES = (Tiles(16, 32, 4, 1), Tiles(16, 32, 4, 1), Tiles(16, 32, 4, 1))


class Settings(NamedTuple):
    """The tiles of the forward, dK/dV and dQ kernels on a GPU (default: the tables above)."""

    fwd: Tiles
    dkdv: Tiles
    dq: Tiles


def config(D: int, dtype: str, target: Target, settings: Optional[Settings] = None, dropout: bool = False) -> Config:
    BD = max(16, next_pow2(D))
    if target.interpret:
        fwd, dkdv, dq = _INTERPRETER_DROPOUT_TILES if dropout else _INTERPRETER_TILES
    elif settings is not None:
        fwd, dkdv, dq = settings
    else:
        fwd, dkdv, dq = (_GPU_TILES_FP32 if dtype == "float32" else _GPU_TILES)[BD]
    if dropout and any(t.m % 16 or t.n % 32 for t in (fwd, dkdv, dq)):
        raise ValueError(f"settings: dropout needs query blocks of a multiple of 16 and key blocks of a multiple "
                         f"of 32 rows (one Philox draw's), got {(fwd, dkdv, dq)}")
    return Config(BD, fwd, dkdv, dq, delta_rows=64 if BD <= 128 else 32,
                  precision=dot_precision(dtype))


def check_flash_attention(q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal, softmax_scale,
                          return_lse=False, layout: str = "bhnd") -> Tuple[int, int, int, int, int, int]:
    """Validates the arguments of flash_attention (q, k, v as the caller lays them out:
    ``layout``); returns (B, Hq, Hkv, Nq, Nk, D)."""
    check_layout(layout)
    h, n = axes(layout)
    names = ("[B, Hq, Nq, D]", "[B, Hkv, Nk, D]") if layout == "bhnd" else ("[B, Nq, Hq, D]", "[B, Nk, Hkv, D]")
    for name, spec, desc in (("q", q, names[0]), ("k", k, names[1]), ("v", v, names[1])):
        checks.check_rank(name, spec, 4, desc)
        checks.check_float(name, spec)
    checks.check_same_dtype(("q", "k", "v"), (q, k, v))
    checks.check_same_device(("q", "k", "v"), (q, k, v))
    B, Hq, Nq, D = q.shape[0], q.shape[h], q.shape[n], q.shape[3]
    Hkv, Nk = k.shape[h], k.shape[n]
    checks.check_dim("k", k, 0, B, "B, as in q")
    checks.check_dim("k", k, 3, D, "D, the head size of q")
    checks.check_shape("v", v, tuple(k.shape), f"{names[1]}, the shape of k")
    # B, the heads, Nq and Nk may be 0: empty results, or (Nk = 0) queries that see no key
    _check_heads(Hq, Hkv, D, "q.shape[3] (D)", causal, return_lse, softmax_scale)
    return B, Hq, Hkv, Nq, Nk, D


def _check_heads(Hq: int, Hkv: int, D: int, d_name: str, causal, return_lse, softmax_scale) -> None:
    checks.check_range(d_name, D, 1, MAX_HEAD_DIM)
    if Hkv == 0 and Hq:
        raise ValueError(f"k: expected at least one kv head for Hq={Hq} query heads, got Hkv=0")
    if Hkv and Hq % Hkv:
        raise ValueError(f"k: expected a number of kv heads that divides Hq={Hq} (grouped-query attention), "
                         f"got Hkv={Hkv}")
    checks.check_bool("causal", causal)
    checks.check_bool("return_lse", return_lse)
    check_softmax_scale(softmax_scale)


def check_varlen(q: ArraySpec, k: ArraySpec, v: ArraySpec, cu_q: ArraySpec, cu_k: ArraySpec, max_seqlen_q,
                 max_seqlen_k, *, causal, softmax_scale, return_lse=False) -> Tuple[int, int, int, int, int, int]:
    """Validates the arguments of flash_attention_varlen; returns (B, Hq, Hkv, Tq, Tk, D), B the
    number of sequences."""
    for name, spec, desc in (("q", q, "[Tq, Hq, D]"), ("k", k, "[Tk, Hkv, D]"), ("v", v, "[Tk, Hkv, D]")):
        checks.check_rank(name, spec, 3, desc)
        checks.check_float(name, spec)
    checks.check_same_dtype(("q", "k", "v"), (q, k, v))
    (Tq, Hq, D), (Tk, Hkv) = q.shape, k.shape[:2]
    checks.check_dim("k", k, 2, D, "D, the head size of q")
    checks.check_shape("v", v, tuple(k.shape), "[Tk, Hkv, D], the shape of k")
    for name, spec in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        checks.check_int(name, spec)
        checks.check_rank(name, spec, 1, "[B + 1]")
        checks.check_range(f"{name}.shape[0] (B + 1)", spec.shape[0], 1)
    checks.check_shape("cu_seqlens_k", cu_k, tuple(cu_q.shape), "[B + 1], the shape of cu_seqlens_q")
    checks.check_same_device(("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"), (q, k, v, cu_q, cu_k))
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name}: expected a Python int (static: it sizes the launch grid), "
                            f"got {type(value).__name__}")
        checks.check_range(name, value, 0)
    _check_heads(Hq, Hkv, D, "q.shape[2] (D)", causal, return_lse, softmax_scale)
    return cu_q.shape[0] - 1, Hq, Hkv, Tq, Tk, D


def check_softmax_scale(softmax_scale) -> None:
    """None (1 / sqrt(D)) or a finite float: the softmax attentions' scale argument."""
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and not isinstance(softmax_scale, bool)
                                          and math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale: expected None or a finite float, got {softmax_scale!r}")


class Options(NamedTuple):
    """flash_attention's score and mask options, checked and normalised (the static part):
    window (left, right), None for an unbounded side, or None; softcap > 0 or None; the
    dropout probability and its seed (an int, or None when the array "seed" carries it)."""

    window: Optional[Tuple[Optional[int], Optional[int]]] = None
    softcap: Optional[float] = None
    dropout_p: float = 0.0
    seed: Optional[int] = None


NO_OPTIONS = Options()
# the optional arrays, in the kernels' pointer order after their own inputs
OPTION_ARRAYS = ("alibi_slopes", "q_lengths", "kv_lengths", "q_segment_ids", "kv_segment_ids", "bias", "mask", "seed")
NO_ARRAYS = (None,) * len(OPTION_ARRAYS)
# The dropout draw (kernels._dropout_keep): Philox4x32-7 (FlashAttention 2's; the fewest rounds
# that pass BigCrush, Salmon et al. 2011), 8 bits a pair: p is rounded to a multiple of 2**-8.
DROPOUT_ROUNDS = 7
DROPOUT_BITS = 8


def check_dropout(dropout_p, seed) -> Tuple[float, Optional[int]]:
    """(dropout_p as a float, the int seed or None): dropout_p a float in [0, 1); with
    dropout_p > 0 a seed is required (an int here; an array is checked with the arrays)."""
    checks.check_dropout_p("dropout_p", dropout_p)
    if dropout_p > 0 and seed is None:
        raise ValueError("seed: expected an int, a 0-d integer array, a jax.random key or a torch.Generator "
                         f"with dropout_p={dropout_p}, got None")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        checks.check_seed(int(seed))
        return float(dropout_p), int(seed)
    if isinstance(seed, (bool, float, str)):
        checks.check_seed(seed)
    return float(dropout_p), None


def dropout_threshold(dropout_p: float) -> Tuple[int, float]:
    """(thr, scale): a draw u of DROPOUT_BITS bits keeps its element iff u >= thr, so the drop
    probability is thr / 2**8 (dropout_p rounded, at most 1 - 2**-8), and kept elements are
    scaled by 1 / (1 - thr / 2**8): the expectation of the output is exact."""
    full = 1 << DROPOUT_BITS
    thr = min(int(round(dropout_p * full)), full - 1)
    return thr, full / (full - thr)


def check_window(window_size) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """None, or (left, right) with each side an int >= 0, or None / -1 (unbounded, as
    FlashAttention's -1): the normalised window, None when both sides are unbounded."""
    if window_size is None:
        return None
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected None or (left, right), got {window_size!r}")
    sides = []
    for name, side in zip(("left", "right"), window_size):
        if side is None or (isinstance(side, int) and not isinstance(side, bool) and side == -1):
            sides.append(None)
        elif isinstance(side, int) and not isinstance(side, bool) and side >= 0:
            sides.append(int(side))
        else:
            raise ValueError(f"window_size: expected its {name} side an int >= 0 or None (or -1: unbounded), "
                             f"got {side!r}")
    return None if sides == [None, None] else tuple(sides)


def check_softcap(softcap) -> Optional[float]:
    """The softcap as a float, or None: off for None or 0 (FlashAttention's 0.0)."""
    if softcap == 0 and not isinstance(softcap, bool):
        return None
    checks.check_softcap(softcap)
    return None if softcap is None else float(softcap)


def check_option_arrays(arrays: dict, q: ArraySpec, B: int, Hq: int, Nq: int, Nk: int) -> None:
    """The optional arrays' shapes and dtypes: alibi_slopes fp32 [Hq] or [B, Hq]; q_lengths,
    kv_lengths integer [B]; q_segment_ids [B, Nq] and kv_segment_ids [B, Nk], integer; bias
    (float) and mask (bool) broadcastable to [B, Hq, Nq, Nk]; seed a 0-d integer or a key's
    data."""
    slopes = arrays.get("alibi_slopes")
    if slopes is not None:
        if slopes.dtype != "float32":
            raise TypeError(f"alibi_slopes: expected float32, got {slopes.dtype}")
        if tuple(slopes.shape) not in ((Hq,), (B, Hq)):
            raise ValueError(f"alibi_slopes: expected shape ({Hq},) or ({B}, {Hq}) ([Hq] or [B, Hq]), "
                             f"got {tuple(slopes.shape)}")
    for name, shape in (("q_lengths", (B,)), ("kv_lengths", (B,)), ("q_segment_ids", (B, Nq)),
                        ("kv_segment_ids", (B, Nk))):
        spec = arrays.get(name)
        if spec is not None:
            checks.check_int(name, spec)
            checks.check_shape(name, spec, shape, "[B]" if len(shape) == 1 else "[B, N]")
    if arrays.get("seed") is not None:
        checks.seed_words(arrays["seed"], "q", q)
    for name, kind in (("bias", "float"), ("mask", "bool")):
        spec = arrays.get(name)
        if spec is None:
            continue
        if kind == "float":
            checks.check_float(name, spec)
        elif spec.dtype != "bool":
            raise TypeError(f"{name}: expected a bool array (True: the pair takes part), got {spec.dtype}")
        pair_strides(name, spec, (B, Hq, Nq, Nk))
    present = [(n, s) for n, s in arrays.items() if s is not None]
    checks.check_same_device(("q", *(n for n, _ in present)), (q, *(s for _, s in present)))


def pair_strides(name: str, spec: Optional[ArraySpec], shape: Tuple[int, int, int, int]) -> Tuple[int, ...]:
    """The [B, Hq, Nq, Nk] strides of a bias or mask broadcastable to ``shape`` (numpy's rules:
    at most 4 axes, each its size or 1), 0 on the broadcast axes; zeros for None."""
    if spec is None:
        return (0, 0, 0, 0)
    dims = tuple(spec.shape)
    if len(dims) > 4 or any(d not in (1, want) for d, want in zip(dims[::-1], shape[::-1])):
        raise ValueError(f"{name}: expected a shape broadcastable to {shape} ([B, Hq, Nq, Nk]), got {dims}")
    strides = (0,) * (4 - len(dims)) + tuple(spec.strides)
    full = (1,) * (4 - len(dims)) + dims
    return tuple(0 if d == 1 else st for d, st in zip(full, strides))


def _heads_in_loop(G: int, constexprs: dict) -> bool:
    """Whether dk/dv take their G query heads' (head, block) pairs in one loop: with G > 1 (a loop
    over heads spilled 1672 bytes a thread on an H100: GQA dk/dv 5.5 -> 5.1 ms at B2 Hq32 Hkv8
    N8192, results flash_attention-gqa.txt); not with a bias or a mask (not measured there)."""
    return G > 1 and not (constexprs.get("HAS_BIAS") or constexprs.get("HAS_MASK"))


def _stages(tiles: Tiles, constexprs: dict) -> int:
    """Pipelining depth: at most 2 with a bias or mask, whose [BLOCK_M, BLOCK_N] tiles are
    staged in shared memory beside k and v (3 stages at D 128 need 256 KiB; Hopper has 227)."""
    return min(tiles.stages, 2) if constexprs["HAS_BIAS"] or constexprs["HAS_MASK"] else tiles.stages


def _base2_lse(constexprs: dict) -> bool:
    """Whether the forward saves its base-2 lse for the backward: with scores that are not
    q k^T * scale * log2(e) as rounded (softcap, ALiBi, a bias), lse * log2(e) would not give
    them back."""
    return constexprs["SOFTCAP"] or constexprs["ALIBI"] or constexprs["HAS_BIAS"]


def _option_launch(opts: Options, arrays: dict, causal: bool, scale: float, B: int, Hq: int, Nq: int, Nk: int):
    """(the kernels' option inputs, scalars, the scalars after the option arrays' strides, constexprs)
    for ``opts`` and the optional arrays (absent ones read as q: never loaded)."""
    far = Nq + Nk + 1  # an unbounded side: past every key and query
    left, right = opts.window if opts.window is not None else (None, None)
    window = opts.window is not None and (left is not None or not causal)
    right = 0 if causal else right
    cap = opts.softcap
    slopes = arrays.get("alibi_slopes")
    qseg, kseg = arrays.get("q_segment_ids"), arrays.get("kv_segment_ids")
    seg_strides = (*(qseg.strides if qseg is not None else (0, 0)), *(kseg.strides if kseg is not None else (0, 0)))
    alibi_strides = (0, 0) if slopes is None else ((0, 1) if len(slopes.shape) == 1 else tuple(slopes.strides))
    dropout = opts.dropout_p > 0
    seed = arrays.get("seed") if dropout else None
    inputs = tuple(n if arrays.get(n) is not None and (n != "seed" or dropout) else "q" for n in OPTION_ARRAYS)
    scalars = (far if left is None else left, far if right is None else right,
               scale / cap if cap else 0.0, cap * LOG2E if cap else 0.0)
    pairs = tuple(st for n in ("bias", "mask") for st in pair_strides(n, arrays.get(n), (B, Hq, Nq, Nk)))
    # what the bias and mask tiles' 16-byte loads along the keys need to be declared (kernels._pair_aligned)
    pair_align = alignment(Nk, *pairs[:3], *pairs[4:7]) if arrays.get("bias") is not None or \
        arrays.get("mask") is not None else 1
    # a bias or mask per head but shared by the batch: the B programs of a head run together
    # and read its tiles from L2 (kernels._batch_inner)
    batch_inner = B > 1 and any(arrays.get(n) is not None and pairs[i] == 0 and pairs[i + 1] != 0
                                for n, i in (("bias", 0), ("mask", 4)))
    thr, drop_scale = dropout_threshold(opts.dropout_p)
    constexprs = {"WINDOW": window, "SOFTCAP": cap is not None, "ALIBI": slopes is not None,
                  "Q_LENS": arrays.get("q_lengths") is not None, "KV_LENS": arrays.get("kv_lengths") is not None,
                  "SEGMENTS": qseg is not None, "HAS_BIAS": arrays.get("bias") is not None,
                  "HAS_MASK": arrays.get("mask") is not None, "DROPOUT": dropout,
                  "SEED_WORDS": 0 if seed is None else (1 if tuple(seed.shape) == () else 2), "DROP_THR": thr,
                  "DROP_SCALE": drop_scale, "PAIR_ALIGN": pair_align, "BATCH_INNER": batch_inner}
    tail = (*alibi_strides, *seg_strides, *pairs, int(opts.seed or 0) if dropout else 0)
    return inputs, scalars, tail, constexprs


def dot_precision(dtype: str) -> str:
    """The dots' input precision: IEEE fp32 for fp32 inputs (exact), else the tensor-core default."""
    return "ieee" if dtype == "float32" else "tf32"


def resolve_scale(softmax_scale: Optional[float], D: int) -> float:
    return 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)


def _align(D: int, *arrays: ArraySpec) -> int:
    return row_alignment((D,), arrays)


def _constexprs(cfg: Config, tiles: Tiles, D: int, causal: bool, align: int) -> dict:
    return {"BLOCK_M": tiles.m, "BLOCK_N": tiles.n, "BD": cfg.BD, "CAUSAL": causal, "EVEN_D": D == cfg.BD,
            "PRECISION": cfg.precision, "ALIGN": align}


@cached_plan
def forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal: bool, softmax_scale: Optional[float],
                 target: Target, settings: Optional[Settings] = None, layout: str = "bhnd",
                 options: Options = NO_OPTIONS, arrays: Tuple[Optional[ArraySpec], ...] = NO_ARRAYS) -> Plan:
    """Inputs: q, k, v (laid out as ``layout``) and the optional arrays OPTION_ARRAYS (in that
    order: None for an absent one). Results: o (q's shape and dtype), lse [B, Hq, Nq] (fp32,
    natural log; -inf for a query that sees no key)."""
    B, Hq, Hkv, Nq, Nk, D = check_flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, layout=layout)
    named = dict(zip(OPTION_ARRAYS, arrays))
    check_option_arrays(named, q, B, Hq, Nq, Nk)
    q, k, v = (as_bhnd(s, layout) for s in (q, k, v))
    scale = resolve_scale(softmax_scale, D)
    o_shape = (B, Hq, Nq, D)
    geo = _Gluon(B, Hq, Hkv, Nq, Nk, D, layout)
    gluon = _hopper_forward(q, k, v, D, Nk, target, layout, options, arrays, dropout=HOPPER_DROPOUT)
    if settings is None and gluon and \
            _persistent(geo, causal, options.window, named.get("kv_lengths") is not None) is not None:
        return _hopper_plan(q, k, v, geo, causal, scale, options, named, target)
    cfg = config(D, q.dtype, target, settings, options.dropout_p > 0)
    o_inputs, o_scalars, o_strides, o_const = _option_launch(options, named, causal, scale, B, Hq, Nq, Nk)
    launch = Launch(
        kern.fa_fwd_kernel, (cdiv(Nq, cfg.fwd.m), B * Hq), ("q", "k", "v", *o_inputs),
        (Hq, Hq // Hkv if Hkv else 1, Nq, Nk, D, scale * LOG2E, *o_scalars, *q.strides, *k.strides, *v.strides,
         *bhnd_strides(o_shape, layout), *o_strides, Nq, Nk),
        (Buffer("o", laid_out(o_shape, layout), q.dtype), Buffer("lse", (B, Hq, Nq), "float32"),
         optional_output("lse_base2", (B, Hq, Nq), "float32", _base2_lse(o_const))),
        {**_constexprs(cfg, cfg.fwd, D, causal, _align(D, q, k, v)), **o_const}, num_warps=cfg.fwd.warps,
        num_stages=_stages(cfg.fwd, o_const),
    )
    return Plan((launch,), ("o", "lse", "lse_base2"))


# The Gluon forward (hopper.py): the ring depth and the registers of the producer and consumer
# warpgroups (setmaxnreg; 240 x 256 + 24 x 128 fill the 64K a block may hold). The fastest on an
# H100 (results flash_gluon.txt): 240 spare the consumers' spills. The producers copy by TMA.
HOPPER = {"BLOCK_N": 128, "STAGES": 3, "PRODUCER_REGS": 24, "CONSUMER_REGS": 240}
# The global scratch a Gluon program makes its two TMA descriptors in (hopper._descriptor,
# _head_descriptor): 128 bytes each (test_compile_sm90 checks the compiled kernel's need).
TMA_SCRATCH = 256
# The dense forward runs persistent (hopper.fa_fwd_hopper_persistent_kernel,
# three descriptors a program) where its items are short: a program's fixed cost (5-6 key tiles,
# results flash_gluon.txt 29c) then overlaps the last item's work. On an H200 it took 0.78-0.996x
# the per-item time at 4.5 to 32.5 key tiles an item on average, 0.99-1.14x from 48 on
# (NVIDIA_H200-flash_gluon.txt 30c).
HOPPER_PERSISTENT = True
PERSISTENT_MAX_TILES = 40
# With kv lengths too: the consumers zero the last V tile's rows past a batch's keys (bits equal to
# the per-item kernel, 0.96x plain causal against its 1.07x on an H200: NVIDIA_H200-flash_gluon.txt 30f).
PERSISTENT_KV_LENS = True
PERSISTENT_SCRATCH = 384
HOPPER_HEAD_DIMS = (128,)
# The dense forward's own (fa_fwd_hopper_kernel and its persistent form); HOPPER_HEAD_DIMS is every
# other Gluon kernel's (backward, packed sequences, block-sparse, decode). D 64 runs the persistent
# form only, and only where a query block visits at least D64_MIN_TILES key tiles on average: on an
# H200 it took 0.87-0.93x the portable kernel's time at 16.5-64.5 tiles, 1.01x at 8, 1.12x at 4.5;
# one item a program 0.94-1.50x (NVIDIA_H200-flash_gluon.txt 32).
HOPPER_FORWARD_HEAD_DIMS = (64, 128)
D64_MIN_TILES = 16
# the option arrays the Gluon kernels take (their pointer order), and those the backward's apply
HOPPER_ARRAYS = ("q_lengths", "kv_lengths", "alibi_slopes", "q_segment_ids", "kv_segment_ids")
HOPPER_BACKWARD_ARRAYS = ("q_lengths", "kv_lengths", "alibi_slopes")
# Attention dropout on the dense Gluon forward, either form (hopper._draw_masks: the mask
# drawn by the producer warpgroup into shared memory, not by the consumers, which the draws slowed to
# 1.32x plain causal on an H100: NVIDIA_H100_80GB_HBM3-flash_gluon.txt 23). On an H200 (B4 H32 N4096
# D128 bf16 causal, p 0.1) 1.36x plain causal against the portable kernel's 1.48x
# (NVIDIA_H200-flash_gluon.txt 37). Its ring: STAGES of K / V tiles and masks (two stages fit shared
# memory; the third K / V stage alone is worth 1.14x); the producer's registers for the draws
# (setmaxnreg: PRODUCER_REGS + 2 CONSUMER_REGS <= 512; consumers at 232 spill). D 128 only: at D 64
# the persistent form with dropout spilled (a 448-byte stack against 8 without, sm_90 compile).
HOPPER_DROPOUT = True
HOPPER_DROPOUT_CONFIG = {"STAGES": 2, "PRODUCER_REGS": 32, "CONSUMER_REGS": 240}
HOPPER_DROPOUT_DIMS = (128,)
# The dense forward's K / V ring with split barriers (hopper._tile_ring SPLIT): a K slot comes free
# at its QK, a step before its V. Off: bits equal to the joint barriers', but on an H200 1.011x their
# time with 3 stages and 1.05x with dropout's 2 (a plain ring of 2: 1.03x against 1.15x;
# NVIDIA_H200-flash_gluon.txt 38).
HOPPER_SPLIT_KV = False


def _gluon_applies(q: ArraySpec, D: int, Nk: int, target: Target, options: Options, others,
                   dims: Optional[Tuple[int, ...]] = None, dropout: bool = False) -> bool:
    """The Gluon kernels' common conditions: a Hopper GPU (Target.gluon), fp16 / bf16, D in
    ``dims`` (default HOPPER_HEAD_DIMS), at least one key, no option but a window and softcap (and
    causal; with ``dropout``, dropout), none of ``others`` (option arrays they do not take) given."""
    if not target.gluon or kern.hopper is None:
        return False
    if q.dtype not in ("float16", "bfloat16") or D not in (HOPPER_HEAD_DIMS if dims is None else dims) or Nk == 0:
        return False
    taken = Options(window=options.window, softcap=options.softcap)
    if dropout:
        taken = taken._replace(dropout_p=options.dropout_p, seed=options.seed)
    return options == taken and all(a is None for a in others)


def _hopper_forward(q: ArraySpec, k: ArraySpec, v: ArraySpec, D: int, Nk: int, target: Target, layout: str,
                    options: Options, arrays, taken: Tuple[str, ...] = HOPPER_ARRAYS,
                    dims: Optional[Tuple[int, ...]] = None, dropout: bool = False) -> bool:
    """Whether the forward runs the Gluon kernel (hopper.fa_fwd_hopper_kernel): _gluon_applies
    (causal, GQA, a window, softcap and the option arrays named in ``taken``: q / kv lengths,
    ALiBi slopes, segment ids; D in ``dims``, default HOPPER_FORWARD_HEAD_DIMS; with ``dropout``,
    dropout and its seed array), and q, k, v rows cp.async can copy (_cp_async_rows). Anything
    else: the portable kernel."""
    dropout = dropout and options.dropout_p > 0
    if dropout and D not in HOPPER_DROPOUT_DIMS:
        return False
    others = [a for n, a in zip(OPTION_ARRAYS, arrays) if n not in taken and not (dropout and n == "seed")]
    dims = HOPPER_FORWARD_HEAD_DIMS if dims is None else dims
    return _gluon_applies(q, D, Nk, target, options, others, dims, dropout) and _cp_async_rows(q, k, v)


def _cp_async_rows(*specs: ArraySpec) -> bool:
    """Whether the Gluon kernels' cp.async (16 bytes a copy) and TMA can copy these arrays' rows
    ([B, H, N, D], or packed [T, H, D]): 16-byte aligned, unit d stride, the other strides
    multiples of 8 elements."""
    rows = all(s.strides[-1] == 1 and s.aligned for s in specs)
    return rows and alignment(*(st for s in specs for st in s.strides[:-1])) >= 8


def _hopper_options(options: Options, named: dict, causal: bool, scale: float, B: int, Hq: int, Nq: int, Nk: int):
    """What the Gluon kernels take of the options (a window, softcap, q / kv lengths, ALiBi,
    segment ids): the input names of HOPPER_ARRAYS (q for an absent one: never read), the
    scalars (left, right, cap_in, cap_out, the slopes' b and h strides, the q and kv segment
    ids' b and n strides), the constexprs."""
    inputs, scalars, tail, const = _option_launch(options, named, causal, scale, B, Hq, Nq, Nk)
    names = dict(zip(OPTION_ARRAYS, inputs))
    return (tuple(names[n] for n in HOPPER_ARRAYS), (*scalars, *tail[:6]),
            {n: const[n] for n in ("WINDOW", "Q_LENS", "KV_LENS", "ALIBI", "SOFTCAP", "SEGMENTS")})


class _Gluon(NamedTuple):
    """How the Gluon kernels see one attention call: dense [B, H, N, D] in ``layout``, or packed
    ([T, H, D] sequences through cu_seqlens, ``packed`` = (Tq, Tk); Nq, Nk the max_seqlen)."""
    B: int
    Hq: int
    Hkv: int
    Nq: int
    Nk: int
    D: int
    layout: str = "bhnd"
    packed: Optional[Tuple[int, int]] = None

    def strides(self, spec: ArraySpec) -> Tuple[int, int, int]:
        """An input's (b, h, n) strides as the kernels take them (packed: batch stride 0)."""
        return _packed(spec.strides)[:3] if self.packed else spec.strides[:3]

    def output(self, name: str, queries: bool, dtype: str) -> Tuple[Buffer, Tuple[int, int, int]]:
        """An output of q's shape (queries) or k's and its (b, h, n) strides."""
        heads = self.Hq if queries else self.Hkv
        if self.packed:
            shape = (self.packed[0 if queries else 1], heads, self.D)
            return Buffer(name, shape, dtype), _packed(row_major_strides(shape))[:3]
        shape = (self.B, heads, self.Nq if queries else self.Nk, self.D)
        return Buffer(name, laid_out(shape, self.layout), dtype), bhnd_strides(shape, self.layout)[:3]

    def rows(self) -> Tuple[int, ...]:
        """lse's shape: [B, Hq, Nq], packed [Hq, Tq]."""
        return (self.Hq, self.packed[0]) if self.packed else (self.B, self.Hq, self.Nq)

    def grid(self, queries: bool) -> Tuple[int, int]:
        """Blocks of 128 query rows (queries) or keys for each (batch, head); packed: of the
        longest sequence, and a slot after the last sequence (it fills the rows outside them)."""
        n, heads = (self.Nq, self.Hq) if queries else (self.Nk, self.Hkv)
        if self.packed:
            return _varlen_blocks(self.packed[0 if queries else 1], n, 128), (self.B + 1) * heads
        return cdiv(n, 128), self.B * heads

    def tail(self) -> Tuple[int, int]:
        """The kernels' last scalars, Tq and Tk (Nq and Nk dense: unused)."""
        return self.packed or (self.Nq, self.Nk)

    def options(self, options: Options, named: dict, causal: bool, scale: float):
        """_hopper_options; packed, cu_seqlens_q and cu_seqlens_k in the lengths' places and VARLEN."""
        arrays, scalars, const = _hopper_options(options, named, causal, scale, self.B, self.Hq, self.Nq, self.Nk)
        if self.packed:
            return ("cu_seqlens_q", "cu_seqlens_k", *arrays[2:]), scalars, {**const, "VARLEN": True}
        return arrays, scalars, const

    def dropout(self, options: Options, named: dict, causal: bool, scale: float) -> Tuple[str, int, dict]:
        """What every Gluon attention kernel takes of dropout: the seed array's input name (q for none:
        never read; their last input), the int seed (their last scalar, 0 for none) and the constexprs
        DROPOUT, SEED_WORDS, DROP_THR, DROP_SCALE (none without dropout), as _option_launch makes them."""
        inputs, _, tail, const = _option_launch(options, named, causal, scale, self.B, self.Hq, self.Nq, self.Nk)
        names = ("DROPOUT", "SEED_WORDS", "DROP_THR", "DROP_SCALE")
        return inputs[-1], tail[-1], {n: const[n] for n in names} if options.dropout_p > 0 else {}


def mean_key_tiles(Nq: int, Nk: int, causal: bool, window, rows: int = 128, tile: int = 128) -> float:
    """The key tiles (of ``tile`` keys) a block of ``rows`` queries visits, on average over the
    blocks: causal and the window (left, right) bottom-right aligned, as the kernels skip tiles."""
    left, right = window if window is not None else (None, None)
    right = 0 if causal else right
    shift = Nk - Nq
    total = 0
    for m in range(0, Nq, rows):
        lo = 0 if left is None else min(max(m + shift - left, 0), Nk)
        hi = Nk if right is None else min(max(min(m + rows, Nq) + shift + right, 0), Nk)
        total += max(cdiv(hi, tile) - lo // tile, 0)
    return total / max(cdiv(Nq, rows), 1)


def _persistent(geo: _Gluon, causal: bool, window, kv_lens: bool) -> Optional[bool]:
    """Whether the dense Gluon forward runs its persistent form (True) or one item a program
    (False); None where neither should run (D 64 where the persistent form does not pay: the
    portable kernel then)."""
    if HOPPER_PERSISTENT and not geo.packed and (PERSISTENT_KV_LENS or not kv_lens):
        tiles = mean_key_tiles(geo.Nq, geo.Nk, causal, window)
        if geo.D == 64:
            return True if tiles >= D64_MIN_TILES else None
        return tiles <= PERSISTENT_MAX_TILES
    return None if geo.D == 64 else False


def _hopper_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, geo: _Gluon, causal: bool, scale: float, options: Options,
                 named: dict, target: Target) -> Plan:
    arrays, opt_scalars, const = geo.options(options, named, causal, scale)
    o, o_strides = geo.output("o", True, q.dtype)
    seed_input, seed, dropout = geo.dropout(options, named, causal, scale)
    split = {"SPLIT_KV": True} if HOPPER_SPLIT_KV and not geo.packed else {}
    config = {**HOPPER, **(HOPPER_DROPOUT_CONFIG if dropout else {}), **split, **dropout}
    kern_fn, grid, tail, scratch = kern.hopper.fa_fwd_hopper_kernel, geo.grid(True), geo.tail(), TMA_SCRATCH
    if _persistent(geo, causal, options.window, const["KV_LENS"]):
        items = math.prod(grid)
        kern_fn, grid, tail, scratch = (kern.hopper.fa_fwd_hopper_persistent_kernel, (min(items, target.num_sms), 1),
                                        (geo.B,), PERSISTENT_SCRATCH)
    arrays, tail = (*arrays, seed_input), (*tail, seed)
    launch = Launch(
        kern_fn, grid, ("q", "k", "v", *arrays),
        (geo.Hq, geo.Hq // geo.Hkv, geo.Nq, geo.Nk, scale * LOG2E, *opt_scalars, *geo.strides(q), *geo.strides(k),
         *geo.strides(v), *o_strides, *tail),
        (o, Buffer("lse", geo.rows(), "float32"),
         optional_output("lse_base2", geo.rows(), "float32", const["ALIBI"] or const["SOFTCAP"]),
         scratch_buffer("tma_scratch", grid, scratch)),
        {"CAUSAL": causal, "D": geo.D, **config, **const}, num_warps=4,
    )
    return Plan((launch,), ("o", "lse", "lse_base2"))


# The Gluon backward (hopper.fa_bwd_dkdv_hopper_kernel, fa_bwd_dq_hopper_kernel) where it applies;
# False runs the portable backward kernels everywhere (a switch for comparing the two).
HOPPER_BACKWARD = True
# As HOPPER's: the ring's depth (Q / dO tiles for dK / dV, K / V tiles for dQ), the partitions'
# registers (the dK / dV producer is the default partition: PRODUCER_REGS is the dQ kernel's).
# Not tuned yet.
HOPPER_BWD = {"STAGES": 2, "PRODUCER_REGS": 24, "CONSUMER_REGS": 240}
# dQ by the persistent kernel (hopper.fa_bwd_dq_hopper_persistent_kernel; dense, no lengths) where a
# query block's key tiles are at most PERSISTENT_MAX_TILES on average, as the forward: the backward
# 0.92-0.94x one item a program at 4.5-16 tiles, 0.99-1.00x at 16.5-32.5 (NVIDIA_H200-flash_gluon.txt 34).
# dK / dV has no persistent form: written so, its consumers spilled in the tile loop (section 33).
HOPPER_BWD_PERSISTENT = True
DQ_PERSISTENT_SCRATCH = 512
# Attention dropout on the Gluon backward (D in HOPPER_DROPOUT_DIMS): the producers draw each tile's
# masks into a shared ring as the forward's (dK / dV: one [ROWS, 128 keys] ring whose key halves the
# consumers read transposed; dQ: a [ROWS, 64 keys] ring a consumer), the dQ producer at the
# registers the forward's draw needs (the dK / dV producer is the default partition: 32 left). On an
# H200 (B4 H32 N4096 D128 bf16 causal, p 0.1) the backward 1.27x plain's time against the portable
# dropout backward's 1.50x; fwd+bwd 1.29x plain (NVIDIA_H200-flash_gluon.txt 39). dQ's rings (K / V
# tiles, masks) 3 deep: its kernel 1.34x plain's against 1.39x with 2 (dK / dV's 1.17x against 1.16x
# with 3: kept at 2; section 40).
HOPPER_DROPOUT_BACKWARD = True
HOPPER_BWD_DROPOUT = {"PRODUCER_REGS": HOPPER_DROPOUT_CONFIG["PRODUCER_REGS"]}
DQ_DROPOUT_STAGES = 3


def _hopper_backward(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, D: int, Nk: int, target: Target,
                     layout: str, options: Options, arrays) -> bool:
    """Whether dK, dV and dQ run the Gluon kernels: where the forward runs its Gluon kernel with
    the option arrays of HOPPER_BACKWARD_ARRAYS alone (no segment ids yet; dropout with
    HOPPER_DROPOUT_BACKWARD), do laid out as q must be."""
    return HOPPER_BACKWARD and _hopper_forward(q, k, v, D, Nk, target, layout, options, arrays,
                                               HOPPER_BACKWARD_ARRAYS, HOPPER_HEAD_DIMS,
                                               HOPPER_DROPOUT_BACKWARD) and _cp_async_rows(do)


def _hopper_backward_launches(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, geo: _Gluon, causal: bool,
                              scale: float, options: Options, named: dict, target: Target) -> Tuple[Launch, Launch]:
    """The dK / dV and dQ launches of the Gluon backward (after the portable delta launch)."""
    arrays, opt_scalars, o_const = geo.options(options, named, causal, scale)
    seed_input, seed, dropout = geo.dropout(options, named, causal, scale)
    # with ALiBi or softcap the forward's base-2 lse (the scores are not s * scale * log2(e)), else the delta launch's
    inputs = ("q", "k", "v", "do", "lse_base2" if o_const["ALIBI"] or o_const["SOFTCAP"] else "lse2", "delta", *arrays,
              seed_input)
    common = (geo.Hq, geo.Hq // geo.Hkv, geo.Nq, geo.Nk, scale * LOG2E, scale, *opt_scalars, *geo.strides(q),
              *geo.strides(k), *geo.strides(v), *geo.strides(do))
    const = {"CAUSAL": causal, "D": geo.D, **HOPPER_BWD, **(HOPPER_BWD_DROPOUT if dropout else {}), **o_const,
             **dropout}
    (dk, dk_strides), (dv, dv_strides) = geo.output("dk", False, k.dtype), geo.output("dv", False, v.dtype)
    dq, dq_strides = geo.output("dq", True, q.dtype)
    key_grid, query_grid = geo.grid(False), geo.grid(True)
    dkdv = Launch(kern.hopper.fa_bwd_dkdv_hopper_kernel, key_grid, inputs,
                  (*common, *dk_strides, *dv_strides, *geo.tail(), seed),
                  (dk, dv, scratch_buffer("tma_scratch_dkdv", key_grid, TMA_SCRATCH)), const, num_warps=4)
    dq_fn, dq_tail, dq_scratch = kern.hopper.fa_bwd_dq_hopper_kernel, geo.tail(), TMA_SCRATCH
    if HOPPER_BWD_PERSISTENT and not (geo.packed or o_const["Q_LENS"] or o_const["KV_LENS"]) and \
            mean_key_tiles(geo.Nq, geo.Nk, causal, options.window) <= PERSISTENT_MAX_TILES:
        dq_fn, dq_tail, dq_scratch = (kern.hopper.fa_bwd_dq_hopper_persistent_kernel, (*geo.tail(), geo.B),
                                      DQ_PERSISTENT_SCRATCH)
        query_grid = (min(math.prod(query_grid), target.num_sms), 1)
    dq_const = {**const, "STAGES": DQ_DROPOUT_STAGES} if dropout else const
    dq = Launch(dq_fn, query_grid, inputs, (*common, *dq_strides, *dq_tail, seed),
                (dq, scratch_buffer("tma_scratch_dq", query_grid, dq_scratch)), dq_const, num_warps=4)
    return dkdv, dq


@cached_plan
def backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, causal: bool,
                  softmax_scale: Optional[float], has_dlse: bool, target: Target,
                  settings: Optional[Settings] = None, layout: str = "bhnd", options: Options = NO_OPTIONS,
                  arrays: Tuple[Optional[ArraySpec], ...] = NO_ARRAYS) -> Plan:
    """Inputs: q, k, v, o (the forward's), do (o's shape), lse and, with has_dlse, dlse (the
    cotangent of lse), the optional arrays as forward_plan. Results: dq, dk, dv (the shapes
    and dtype of q, k, v), all laid out as ``layout``."""
    B, Hq, Hkv, Nq, Nk, D = check_flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, layout=layout)
    named = dict(zip(OPTION_ARRAYS, arrays))
    checks.check_shape("do", do, tuple(q.shape), "the shape of the output")
    checks.check_same_dtype(("q", "do"), (q, do))
    q, k, v, do = (as_bhnd(s, layout) for s in (q, k, v, do))
    cfg = config(D, q.dtype, target, settings, options.dropout_p > 0)
    scale = resolve_scale(softmax_scale, D)
    G = Hq // Hkv if Hkv else 1
    o_strides = bhnd_strides(q.shape, layout)
    rows = (B, Hq, Nq)
    delta = Launch(
        kern.fa_bwd_delta_kernel, (cdiv(Nq, cfg.delta_rows), B * Hq), ("o", "do", "lse", "dlse" if has_dlse else "lse"),
        (Hq, Nq, D, *o_strides, *do.strides),
        (Buffer("delta", rows, "float32"), Buffer("lse2", rows, "float32")),
        {"BLOCK_M": cfg.delta_rows, "BD": cfg.BD, "HAS_DLSE": has_dlse, "ALIGN": _align(D, do)}, num_warps=4,
    )
    if settings is None and _hopper_backward(q, k, v, do, D, Nk, target, layout, options, arrays):
        dkdv, dq = _hopper_backward_launches(q, k, v, do, _Gluon(B, Hq, Hkv, Nq, Nk, D, layout), causal, scale, options,
                                             named, target)
        return Plan((delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "lse_base2"))
    align = _align(D, q, k, v, do)
    o_inputs, o_scalars, o_strides, o_const = _option_launch(options, named, causal, scale, B, Hq, Nq, Nk)
    lse2 = "lse_base2" if _base2_lse(o_const) else "lse2"
    dkdv = Launch(
        kern.fa_bwd_dkdv_kernel, (cdiv(Nk, cfg.dkdv.n), B * Hkv), ("q", "k", "v", "do", lse2, "delta", *o_inputs),
        (Hkv, G, Nq, Nk, D, scale * LOG2E, scale, *o_scalars, *q.strides, *k.strides, *v.strides, *do.strides,
         *bhnd_strides(k.shape, layout), *bhnd_strides(v.shape, layout), *o_strides, Nq, Nk),
        (Buffer("dk", laid_out(k.shape, layout), k.dtype), Buffer("dv", laid_out(v.shape, layout), v.dtype)),
        {**_constexprs(cfg, cfg.dkdv, D, causal, align), **o_const, "HEADS_IN_LOOP": _heads_in_loop(G, o_const)},
        num_warps=cfg.dkdv.warps,
        num_stages=_stages(cfg.dkdv, o_const),
    )
    dq = Launch(
        kern.fa_bwd_dq_kernel, (cdiv(Nq, cfg.dq.m), B * Hq), ("q", "k", "v", "do", lse2, "delta", *o_inputs),
        (Hq, G, Nq, Nk, D, scale * LOG2E, scale, *o_scalars, *q.strides, *k.strides, *v.strides, *do.strides,
         *bhnd_strides(q.shape, layout), *o_strides, Nq, Nk),
        (Buffer("dq", laid_out(q.shape, layout), q.dtype),),
        {**_constexprs(cfg, cfg.dq, D, causal, align), **o_const}, num_warps=cfg.dq.warps,
        num_stages=_stages(cfg.dq, o_const),
    )
    return Plan((delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "lse_base2"))


# -- packed sequences (flash_attention_varlen) ----------------------------------------------
# The same kernels with VARLEN: q [Tq, Hq, D], k, v [Tk, Hkv, D] as heads of one batch whose
# rows start at cu_seqlens[b] (batch strides 0), Nq and Nk the max_seqlen (the grid's rows),
# lse [Hq, Tq]. Grid slot B (after the last sequence) fills the rows no sequence covers.


def _packed(strides: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    """The kernels' (b, h, n, d) strides of a packed [T, H, D] array: batch stride 0 (each
    sequence's rows are reached through cu_seqlens)."""
    return (0, strides[1], strides[0], strides[2])


def _varlen_options(options: Options, alibi: Optional[ArraySpec], seed: Optional[ArraySpec], causal: bool,
                    scale: float, B: int, Hq: int, Nq: int, Nk: int):
    """_option_launch for packed sequences: cu_seqlens_q, cu_seqlens_k in the lengths' places."""
    inputs, scalars, strides, const = _option_launch(options, {"alibi_slopes": alibi, "seed": seed}, causal, scale,
                                                     B, Hq, Nq, Nk)
    return (inputs[0], "cu_seqlens_q", "cu_seqlens_k", *inputs[3:]), scalars, strides, {**const, "VARLEN": True}


def _hopper_varlen(q: ArraySpec, k: ArraySpec, v: ArraySpec, D: int, Hkv: int, Tq: int, Tk: int, target: Target,
                   options: Options, seed: Optional[ArraySpec], *more: ArraySpec) -> bool:
    """Whether packed sequences run the Gluon kernels (VARLEN): _gluon_applies (causal, GQA, a
    window, softcap and ALiBi the options they take), query and key rows, and q, k, v (and ``more``:
    the backward's do) rows cp.async can copy."""
    return Hkv > 0 and Tq > 0 and _gluon_applies(q, D, Tk, target, options, [seed]) and _cp_async_rows(q, k, v, *more)


def _varlen_blocks(rows: int, max_seqlen: int, block: int) -> int:
    """Grid axis 0 of a varlen launch: blocks of the longest sequence, at least one (slot B's
    programs fill the rows outside every sequence), none without rows."""
    return 0 if rows == 0 else max(1, cdiv(max_seqlen, block))


@cached_plan
def varlen_forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, cu_q: ArraySpec, cu_k: ArraySpec, *,
                        max_seqlen_q: int, max_seqlen_k: int, causal: bool, softmax_scale: Optional[float],
                        target: Target, options: Options = NO_OPTIONS, alibi: Optional[ArraySpec] = None,
                        seed: Optional[ArraySpec] = None, settings: Optional[Settings] = None) -> Plan:
    """Inputs: q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes and seed (each or None). Results: o [Tq,
    Hq, D] (q's dtype), lse [Hq, Tq] (fp32), lse_base2 (with softcap or ALiBi)."""
    B, Hq, Hkv, Tq, Tk, D = check_varlen(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                         softmax_scale=softmax_scale)
    check_option_arrays({"alibi_slopes": alibi, "seed": seed}, q, B, Hq, max_seqlen_q, max_seqlen_k)
    cfg = config(D, q.dtype, target, settings, options.dropout_p > 0)
    scale = resolve_scale(softmax_scale, D)
    if settings is None and _hopper_varlen(q, k, v, D, Hkv, Tq, Tk, target, options, seed):
        geo = _Gluon(B, Hq, Hkv, max_seqlen_q, max_seqlen_k, D, packed=(Tq, Tk))
        return _hopper_plan(q, k, v, geo, causal, scale, options, {"alibi_slopes": alibi}, target)
    o_inputs, o_scalars, o_strides, o_const = _varlen_options(options, alibi, seed, causal, scale, B, Hq, max_seqlen_q,
                                                              max_seqlen_k)
    launch = Launch(
        kern.fa_fwd_kernel, (_varlen_blocks(Tq, max_seqlen_q, cfg.fwd.m), (B + 1) * Hq), ("q", "k", "v", *o_inputs),
        (Hq, Hq // Hkv if Hkv else 1, max_seqlen_q, max_seqlen_k, D, scale * LOG2E, *o_scalars,
         *_packed(q.strides), *_packed(k.strides), *_packed(v.strides), *_packed(row_major_strides((Tq, Hq, D))),
         *o_strides, Tq, Tk),
        (Buffer("o", (Tq, Hq, D), q.dtype), Buffer("lse", (Hq, Tq), "float32"),
         optional_output("lse_base2", (Hq, Tq), "float32", _base2_lse(o_const))),
        {**_constexprs(cfg, cfg.fwd, D, causal, _align(D, q, k, v)), **o_const}, num_warps=cfg.fwd.warps,
        num_stages=_stages(cfg.fwd, o_const),
    )
    return Plan((launch,), ("o", "lse", "lse_base2"))


@cached_plan
def varlen_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, cu_q: ArraySpec, cu_k: ArraySpec,
                         do: ArraySpec, *, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                         softmax_scale: Optional[float], has_dlse: bool, target: Target,
                         options: Options = NO_OPTIONS, alibi: Optional[ArraySpec] = None,
                         seed: Optional[ArraySpec] = None, settings: Optional[Settings] = None) -> Plan:
    """Inputs: varlen_forward_plan's, o, lse (and lse_base2), do and with has_dlse dlse.
    Results: dq, dk, dv (the shapes and dtype of q, k, v)."""
    B, Hq, Hkv, Tq, Tk, D = check_varlen(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                         softmax_scale=softmax_scale)
    checks.check_shape("do", do, tuple(q.shape), "the shape of the output")
    checks.check_same_dtype(("q", "do"), (q, do))
    cfg = config(D, q.dtype, target, settings, options.dropout_p > 0)
    scale = resolve_scale(softmax_scale, D)
    G = Hq // Hkv if Hkv else 1
    o_rows = _packed(row_major_strides((Tq, Hq, D)))
    delta = Launch(  # one batch of Hq heads of Tq rows: lse and delta are [Hq, Tq]
        kern.fa_bwd_delta_kernel, (cdiv(Tq, cfg.delta_rows), Hq), ("o", "do", "lse", "dlse" if has_dlse else "lse"),
        (Hq, Tq, D, *o_rows, *_packed(do.strides)),
        (Buffer("delta", (Hq, Tq), "float32"), Buffer("lse2", (Hq, Tq), "float32")),
        {"BLOCK_M": cfg.delta_rows, "BD": cfg.BD, "HAS_DLSE": has_dlse, "ALIGN": _align(D, do)}, num_warps=4,
    )
    if settings is None and HOPPER_BACKWARD and _hopper_varlen(q, k, v, D, Hkv, Tq, Tk, target, options, seed, do):
        geo = _Gluon(B, Hq, Hkv, max_seqlen_q, max_seqlen_k, D, packed=(Tq, Tk))
        dkdv, dq = _hopper_backward_launches(q, k, v, do, geo, causal, scale, options, {"alibi_slopes": alibi},
                                             target)
        return Plan((delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "lse_base2"))
    align = _align(D, q, k, v, do)
    o_inputs, o_scalars, o_strides, o_const = _varlen_options(options, alibi, seed, causal, scale, B, Hq, max_seqlen_q,
                                                              max_seqlen_k)
    lse2 = "lse_base2" if _base2_lse(o_const) else "lse2"
    common = (max_seqlen_q, max_seqlen_k, D, scale * LOG2E, scale, *o_scalars, *_packed(q.strides),
              *_packed(k.strides), *_packed(v.strides), *_packed(do.strides))
    dkdv = Launch(
        kern.fa_bwd_dkdv_kernel, (_varlen_blocks(Tk, max_seqlen_k, cfg.dkdv.n), (B + 1) * Hkv),
        ("q", "k", "v", "do", lse2, "delta", *o_inputs),
        (Hkv, G, *common, *_packed(row_major_strides((Tk, Hkv, D))), *_packed(row_major_strides((Tk, Hkv, D))),
         *o_strides, Tq, Tk),
        (Buffer("dk", (Tk, Hkv, D), k.dtype), Buffer("dv", (Tk, Hkv, D), v.dtype)),
        {**_constexprs(cfg, cfg.dkdv, D, causal, align), **o_const, "HEADS_IN_LOOP": _heads_in_loop(G, o_const)},
        num_warps=cfg.dkdv.warps,
        num_stages=_stages(cfg.dkdv, o_const),
    )
    dq = Launch(
        kern.fa_bwd_dq_kernel, (_varlen_blocks(Tq, max_seqlen_q, cfg.dq.m), (B + 1) * Hq),
        ("q", "k", "v", "do", lse2, "delta", *o_inputs),
        (Hq, G, *common, *o_rows, *o_strides, Tq, Tk),
        (Buffer("dq", (Tq, Hq, D), q.dtype),),
        {**_constexprs(cfg, cfg.dq, D, causal, align), **o_const}, num_warps=cfg.dq.warps,
        num_stages=_stages(cfg.dq, o_const),
    )
    return Plan((delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "lse_base2"))
