"""block_sparse: argument checks and launch plans (kernels.py beside it)."""

from __future__ import annotations

import math
import struct
from typing import Tuple

from ato_core import checks
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2, optional_output,
                             row_alignment, row_major_strides, scratch_buffer)
from ato_core.layout import as_bhnd, bhnd_strides, laid_out
from ato_core.target import Target, has_gluon

from ..flash_attention import kernels as fa_kern
from ..flash_attention import plans as fa_plans
from . import kernels as kern

# the Hopper kernels, in Gluon: only with the Triton they were written for (target.has_gluon)
if has_gluon():
    from . import hopper
else:
    hopper = None

BLOCK_SIZES = (16, 32, 64, 128, 256)
# Elements of x a coarsening program loads at once (ROWS tokens x BD; the interpreter: a block
# in INTERPRETER_TILES tiles of at least 4 rows, so that a test block spans several); the
# programs' warps. One block a program: the fastest on an H100 (results: block_sparse-sweep.txt).
TILE_ELEMENTS = 8192
INTERPRETER_TILES = 4
WARPS = 4
# The Gluon coarsening kernel (hopper.max_l2_coarsen_hopper_kernel, sm_90): programs an SM (each
# holding STAGES tiles of TILE_ELEMENTS in shared memory, 4 warps), the ring's depth, and the
# tiles a program it needs at least: its fixed cost (a descriptor, the ring's fill, the tail,
# about 6 us) made it slower than the portable kernel at 8 and 10 tiles a program, faster at 31
# (results NVIDIA_H200-block_sparse-sweep.txt 44-48).
HOPPER_COARSEN = {"PROGRAMS_PER_SM": 4, "STAGES": 2, "MIN_TILES": 16}


def check_block_size(block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size: expected a power of two from 16 to 256, got {block_size!r}")
    return block_size


def check_coarsen(x: ArraySpec, block_size) -> tuple:
    """Validates max_l2_coarsen's arguments; returns (B, H, N, D, M)."""
    checks.check_rank("x", x, 4, "[B, H, N, D]")
    checks.check_float("x", x)
    B, H, N, D = x.shape
    checks.check_range("x.shape[2] (N)", N, 0, 2 ** 31 - 1)  # B, H, N may be 0: empty results
    checks.check_range("x.shape[3] (D)", D, 1, fa_plans.MAX_HEAD_DIM)
    bs = check_block_size(block_size)
    M = cdiv(N, bs)
    checks.check_range("B * H * ceil(N / block_size) (the blocks, one program each)", B * H * M, 0, 2 ** 31 - 1)
    return B, H, N, D, M


def _tile(D: int, block_size: int, target: Target):
    BD = max(16, next_pow2(D))
    rows = max(4, block_size // INTERPRETER_TILES) if target.interpret else max(1, TILE_ELEMENTS // BD)
    return BD, min(rows, block_size)


def _hopper_coarsen(x: ArraySpec, D: int, target: Target) -> bool:
    """Whether max_l2_coarsen runs the Gluon kernel: a Hopper GPU, fp16 / bf16, D a power of two
    from 16 to 256, rows TMA can copy (flash attention's _cp_async_rows)."""
    return (hopper is not None and target.gluon and x.dtype in ("float16", "bfloat16") and 16 <= D <= 256
            and D == next_pow2(D) and fa_plans._cp_async_rows(x))


def _coarsen_launches(x: ArraySpec, block_size: int, target: Target, names=("x", "x_coarse", "index"), y=None,
                      y_names=()) -> Tuple[Launch, ...]:
    """max_l2_coarsen of x and, if given, of y (curvature_block_mask's q and k: the same B, N, D):
    on Hopper, with enough tiles, one Gluon launch for both, else a portable launch each."""
    B, H, N, D, M = check_coarsen(x, block_size)
    BD, rows = _tile(D, block_size, target)
    HY = 0 if y is None else y.shape[1]
    outputs = (Buffer(names[1], (B, H, M, D), x.dtype), Buffer(names[2], (B, H, M), "int32"))
    y_outputs = (optional_output(y_names[1] if y is not None else "y_coarse", (B, HY, M, D), x.dtype, y is not None),
                 optional_output(y_names[2] if y is not None else "y_index", (B, HY, M), "int32", y is not None))
    blocks, programs = B * (H + HY) * M, HOPPER_COARSEN["PROGRAMS_PER_SM"] * target.num_sms
    if (blocks and blocks * (block_size // rows) >= HOPPER_COARSEN["MIN_TILES"] * programs
            and _hopper_coarsen(x, D, target) and (y is None or _hopper_coarsen(y, D, target))):
        grid = (min(blocks, programs),)
        y_name, y_strides = (names[0], x.strides[:3]) if y is None else (y_names[0], y.strides[:3])
        return (Launch(hopper.max_l2_coarsen_hopper_kernel, grid, (names[0], y_name),
                       (B, H, HY, N, M, *x.strides[:3], *y_strides),
                       (*outputs, *y_outputs, scratch_buffer(names[1] + "_tma_scratch", grid, fa_plans.TMA_SCRATCH)),
                       {"BLOCK": block_size, "ROWS_C": rows, "D": D, "STAGES": HOPPER_COARSEN["STAGES"]},
                       num_warps=4),)
    launch = Launch(kern.max_l2_coarsen_kernel, (B * H * M,), (names[0],), (H, N, D, M, *x.strides), outputs,
                    {"BLOCK": block_size, "ROWS": rows, "BD": BD, "ALIGN": row_alignment((D,), (x,))},
                    num_warps=WARPS)
    return (launch,) + (() if y is None else _coarsen_launches(y, block_size, target, y_names))


@cached_plan
def coarsen_plan(x: ArraySpec, *, block_size: int, target: Target) -> Plan:
    """Inputs: x. Results: x_coarse [B, H, M, D] (x's dtype), index [B, H, M] int32."""
    return Plan(_coarsen_launches(x, block_size, target), ("x_coarse", "index"))


@cached_plan
def coarsen_backward_plan(x: ArraySpec, *, block_size: int, target: Target) -> Plan:
    """Inputs: dx_coarse, index (row-major). Results: dx [B, H, N, D] (x's dtype)."""
    B, H, N, D, M = check_coarsen(x, block_size)
    BD, rows = _tile(D, block_size, target)
    launch = Launch(kern.max_l2_coarsen_bwd_kernel, (B * H * M,), ("dx_coarse", "index"), (N, D, M),
                    (Buffer("dx", (B, H, N, D), x.dtype),),
                    {"BLOCK": block_size, "ROWS": rows, "BD": BD, "ALIGN": row_alignment((D,), ())},
                    num_warps=WARPS)
    return Plan((launch,), ("dx",), dense=("dx_coarse", "index"))


# -- block-sparse attention -------------------------------------------------------------

def check_block_sparse(q: ArraySpec, k: ArraySpec, v: ArraySpec, mask: ArraySpec, block_size, causal,
                       softmax_scale, layout: str = "bhnd") -> tuple:
    """Validates block_sparse_attention's arguments (q, k, v in ``layout``); returns (B, Hq, Hkv,
    Nq, Nk, D, Mq, Mk)."""
    B, Hq, Hkv, Nq, Nk, D = fa_plans.check_flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                                                           layout=layout)
    bs = check_block_size(block_size)
    Mq, Mk = cdiv(Nq, bs), cdiv(Nk, bs)
    checks.check_rank("block_mask", mask, 4, "[B, Hq, ceil(Nq / block_size), ceil(Nk / block_size)]")
    if mask.dtype != "bool":
        raise TypeError(f"block_mask: expected bool, got {mask.dtype}")
    checks.check_shape("block_mask", mask, (B, Hq, Mq, Mk),
                       f"[B, Hq, ceil(Nq / block_size), ceil(Nk / block_size)] with block_size {bs}")
    checks.check_same_device(("q", "block_mask"), (q, mask))
    return B, Hq, Hkv, Nq, Nk, D, Mq, Mk


def _bs_tiles(cfg, block_size: int, target: Target):
    """flash attention's tiles, no larger than a mask block (so a tile never straddles two), the
    forward's and dq's key tiles at most 64 rows. A tile cut below 128 rows runs on 4 warps (GPU),
    and in the backward with 2 stages (the fastest on an H100: results block_sparse-sweep.txt 13)."""
    def clip(t, n_max, stages):
        m, n = min(t.m, block_size), min(t.n, block_size, n_max)
        if (m, n) == (t.m, t.n):
            return t
        if target.interpret or max(m, n) >= 128:
            return fa_plans.Tiles(m, n, t.warps, t.stages)
        return fa_plans.Tiles(m, n, 4, stages or t.stages)
    return clip(cfg.fwd, 64, None), clip(cfg.dkdv, 256, 2), clip(cfg.dq, 64, 2)


# Blocks from which the Gluon kernels (block_sparse/hopper.py, flash attention's Hopper settings)
# run on Hopper: 128-row query (or key) tiles within one block.
HOPPER_MIN_BLOCK = 128


def _hopper_forward(q: ArraySpec, k: ArraySpec, v: ArraySpec, D: int, Nk: int, block_size: int,
                    target: Target) -> bool:
    """Whether the forward (and, with do's rows, the backward) runs the Gluon kernels: flash
    attention's Gluon conditions (a Hopper GPU, fp16 / bf16, D 128, a key, rows TMA can
    copy) and blocks of at least 128."""
    return (hopper is not None and block_size >= HOPPER_MIN_BLOCK
            and fa_plans._gluon_applies(q, D, Nk, target, fa_plans.Options(), ())
            and fa_plans._cp_async_rows(q, k, v))


def _lists(mask: ArraySpec, B: int, H: int, Mq: int, Mk: int, Nq: int, Nk: int, bs: int, causal: bool,
           columns: bool) -> Launch:
    lines, length = (Mk, Mq) if columns else (Mq, Mk)
    name = "cols" if columns else "rows"
    return Launch(kern.bs_lists_kernel, (B * H * lines,), ("block_mask",), (Mq, Mk, Nq, Nk, bs, *mask.strides, H),
                  (Buffer(name, (B * H * lines, length), "int32"), Buffer(name + "_count", (B * H * lines,), "int32")),
                  {"CHUNK": min(next_pow2(length), 4096), "COLUMNS": columns, "CAUSAL": causal}, num_warps=4)


@cached_plan
def block_sparse_forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, mask: ArraySpec, *, block_size: int,
                              causal: bool, softmax_scale, target: Target, layout: str = "bhnd") -> Plan:
    """Inputs: q, k, v (in ``layout``), block_mask. Results: o [B, Hq, Nq, D] (q's dtype, in
    ``layout``), lse [B, Hq, Nq] fp32, rows, rows_count (each query block's kept key blocks, for
    the backward)."""
    B, Hq, Hkv, Nq, Nk, D, Mq, Mk = check_block_sparse(q, k, v, mask, block_size, causal, softmax_scale, layout)
    q, k, v = (as_bhnd(s, layout) for s in (q, k, v))
    cfg = fa_plans.config(D, q.dtype, target)
    fwd, _, _ = _bs_tiles(cfg, block_size, target)
    scale = fa_plans.resolve_scale(softmax_scale, D)
    o_shape = (B, Hq, Nq, D)
    lists = _lists(mask, B, Hq, Mq, Mk, Nq, Nk, block_size, causal, False)
    if _hopper_forward(q, k, v, D, Nk, block_size, target):
        geo = fa_plans._Gluon(B, Hq, Hkv, Nq, Nk, D, layout)
        o, o_strides = geo.output("o", True, q.dtype)
        grid = geo.grid(True)
        launch = Launch(
            hopper.bs_fwd_hopper_kernel, grid, ("q", "k", "v", "rows", "rows_count"),
            (Hq, Hq // Hkv, Nq, Nk, Mq, Mk, scale * fa_plans.LOG2E, *geo.strides(q), *geo.strides(k), *geo.strides(v),
             *o_strides),
            (o, Buffer("lse", geo.rows(), "float32"), scratch_buffer("tma_scratch", grid, fa_plans.TMA_SCRATCH)),
            {"CAUSAL": causal, "BS": block_size, "D": D, **fa_plans.HOPPER}, num_warps=4)
        return Plan((lists, launch), ("o", "lse", "rows", "rows_count"))
    launch = Launch(
        kern.bs_fwd_kernel, (cdiv(Nq, fwd.m), B * Hq), ("q", "k", "v", "rows", "rows_count"),
        (Hq, Hq // Hkv, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, *q.strides, *k.strides, *v.strides,
         *bhnd_strides(o_shape, layout)),
        (Buffer("o", laid_out(o_shape, layout), q.dtype), Buffer("lse", (B, Hq, Nq), "float32")),
        {"BS": block_size, **fa_plans._constexprs(cfg, fwd, D, causal, fa_plans._align(D, q, k, v))},
        num_warps=fwd.warps, num_stages=fwd.stages)
    return Plan((lists, launch), ("o", "lse", "rows", "rows_count"))


@cached_plan
def block_sparse_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, mask: ArraySpec, do: ArraySpec, *,
                               block_size: int, causal: bool, softmax_scale, has_dlse: bool,
                               target: Target, layout: str = "bhnd") -> Plan:
    """Inputs: q, k, v, block_mask, o, lse, rows, rows_count (the forward's), do and, with
    has_dlse, dlse. Results: dq, dk, dv (q, k, v, do, o, dq, dk, dv in ``layout``)."""
    B, Hq, Hkv, Nq, Nk, D, Mq, Mk = check_block_sparse(q, k, v, mask, block_size, causal, softmax_scale, layout)
    checks.check_shape("do", do, tuple(q.shape), "the shape of the output")
    checks.check_same_dtype(("q", "do"), (q, do))
    q, k, v, do = (as_bhnd(s, layout) for s in (q, k, v, do))
    cfg = fa_plans.config(D, q.dtype, target)
    _, dkdv_t, dq_t = _bs_tiles(cfg, block_size, target)
    scale = fa_plans.resolve_scale(softmax_scale, D)
    G = Hq // Hkv
    rows = (B, Hq, Nq)
    delta = Launch(
        fa_kern.fa_bwd_delta_kernel, (cdiv(Nq, cfg.delta_rows), B * Hq), ("o", "do", "lse", "dlse" if has_dlse else "lse"),
        (Hq, Nq, D, *bhnd_strides(q.shape, layout), *do.strides),
        (Buffer("delta", rows, "float32"), Buffer("lse2", rows, "float32")),
        {"BLOCK_M": cfg.delta_rows, "BD": cfg.BD, "HAS_DLSE": has_dlse, "ALIGN": fa_plans._align(D, do)}, num_warps=4)
    cols = _lists(mask, B, Hq, Mq, Mk, Nq, Nk, block_size, causal, True)
    if fa_plans.HOPPER_BACKWARD and _hopper_forward(q, k, v, D, Nk, block_size, target) and \
            fa_plans._cp_async_rows(do):
        return Plan((cols, delta, *_hopper_backward(q, k, v, do, fa_plans._Gluon(B, Hq, Hkv, Nq, Nk, D, layout), Mq,
                                                      Mk, block_size, causal, scale)),
                    ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "rows", "rows_count"))
    align = fa_plans._align(D, q, k, v, do)
    strides = (*q.strides, *k.strides, *v.strides, *do.strides)
    dkdv = Launch(
        kern.bs_bwd_dkdv_kernel, (cdiv(Nk, dkdv_t.n), B * Hkv),
        ("q", "k", "v", "do", "lse2", "delta", "cols", "cols_count"),
        (Hkv, G, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, scale, *strides, *bhnd_strides(k.shape, layout),
         *bhnd_strides(v.shape, layout)),
        (Buffer("dk", laid_out(k.shape, layout), k.dtype), Buffer("dv", laid_out(v.shape, layout), v.dtype)),
        {"BS": block_size, **fa_plans._constexprs(cfg, dkdv_t, D, causal, align)}, num_warps=dkdv_t.warps,
        num_stages=dkdv_t.stages)
    dq = Launch(
        kern.bs_bwd_dq_kernel, (cdiv(Nq, dq_t.m), B * Hq), ("q", "k", "v", "do", "lse2", "delta", "rows", "rows_count"),
        (Hq, G, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, scale, *strides, *bhnd_strides(q.shape, layout)),
        (Buffer("dq", laid_out(q.shape, layout), q.dtype),),
        {"BS": block_size, **fa_plans._constexprs(cfg, dq_t, D, causal, align)}, num_warps=dq_t.warps,
        num_stages=dq_t.stages)
    return Plan((cols, delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "rows", "rows_count"))


def _hopper_backward(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, geo: fa_plans._Gluon, Mq: int, Mk: int,
                     block_size: int, causal: bool, scale: float) -> Tuple[Launch, Launch]:
    """The Gluon dK / dV (on the columns) and dQ (on the rows) launches, flash's Hopper backward
    settings (q, k, v, do as [B, H, N, D] specs; geo: flash_attention's plans._Gluon)."""
    head = (geo.Hq, geo.Hq // geo.Hkv, geo.Nq, geo.Nk, Mq, Mk, scale * fa_plans.LOG2E, scale, *geo.strides(q),
            *geo.strides(k), *geo.strides(v), *geo.strides(do))
    const = {"CAUSAL": causal, "BS": block_size, "D": geo.D, **fa_plans.HOPPER_BWD}
    (dk, dk_strides), (dv, dv_strides) = geo.output("dk", False, k.dtype), geo.output("dv", False, v.dtype)
    dq, dq_strides = geo.output("dq", True, q.dtype)
    key_grid, query_grid = geo.grid(False), geo.grid(True)
    dkdv = Launch(hopper.bs_bwd_dkdv_hopper_kernel, key_grid,
                  ("q", "k", "v", "do", "lse2", "delta", "cols", "cols_count"), (*head, *dk_strides, *dv_strides),
                  (dk, dv, scratch_buffer("tma_scratch_dkdv", key_grid, fa_plans.TMA_SCRATCH)), const, num_warps=4)
    dq = Launch(hopper.bs_bwd_dq_hopper_kernel, query_grid,
                ("q", "k", "v", "do", "lse2", "delta", "rows", "rows_count"), (*head, *dq_strides),
                (dq, scratch_buffer("tma_scratch_dq", query_grid, fa_plans.TMA_SCRATCH)), const, num_warps=4)
    return dkdv, dq


# -- curvature block mask ---------------------------------------------------------------

# The curvature mask's kernels: the score tiles (BM, BN, warps) of cab_scores_kernel and
# cab_split_kernel; An @ An's (BM, BN, BK, warps, stages), its BM, BN, warps the score tiles';
# the elements of F a warp of a cab_select_kernel program ranks (one warp a program up to a row
# of 512, then more warps, at most CAB_SELECT_MAX_WARPS, for one longer row): a program stops
# when its rows are done, so one row a program where a warp holds it. The interpreter's are
# small, so that test shapes span several tiles. GPU: the fastest on an H100 (results
# block_sparse-sweep.txt 19, 24, 29).
CAB_TILES = {"gpu": (64, 64, 4), "interpreter": (16, 16, 4)}
CAB_DOT_TILES = {"gpu": (64, 64, 32, 4, 3), "interpreter": (16, 16, 16, 4, 1)}
CAB_SELECT_ELEMENTS = {"gpu": 512, "interpreter": 64}
CAB_SELECT_MAX_WARPS = 4
# The coarse products' dot precision for fp32 inputs on the GPU (three tensor-core products,
# about 2^-21 relative); 16-bit inputs' products are exact in fp32.
CAB_PRECISION = "tf32x3"


def check_curvature(q: ArraySpec, k: ArraySpec, block_size, keep, lam, causal, local_blocks,
                    layout: str = "bhnd") -> tuple:
    """Validates curvature_block_mask's arguments (q, k in ``layout``); returns (B, Hq, Hkv, N, D, M)."""
    # q and k as flash attention takes them (k standing in for v), then one length for both
    B, Hq, Hkv, N, _, D = fa_plans.check_flash_attention(q, k, k, causal=causal, softmax_scale=None, layout=layout)
    checks.check_dim("k", k, 2 if layout == "bhnd" else 1, N, "N, as in q (self-attention)")
    for name, value in (("keep", keep), ("lam", lam)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite float, got {value!r}")
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep: expected a fraction in [0, 1], got {keep!r}")
    if isinstance(local_blocks, bool) or not isinstance(local_blocks, int) or local_blocks < 0:
        raise ValueError(f"local_blocks: expected an integer >= 0, got {local_blocks!r}")
    return B, Hq, Hkv, N, D, cdiv(N, check_block_size(block_size))


@cached_plan
def curvature_plan(q: ArraySpec, k: ArraySpec, *, block_size: int, keep: float, lam: float, causal: bool,
                   local_blocks: int, target: Target, layout: str = "bhnd") -> Plan:
    """Inputs: q, k (in ``layout``). Result: mask [B, Hq, M, M] bool (with An split into bf16
    AH + AL and F, fp32, as scratch)."""
    B, Hq, Hkv, N, D, M = check_curvature(q, k, block_size, keep, lam, causal, local_blocks, layout)
    q, k = as_bhnd(q, layout), as_bhnd(k, layout)
    where = "interpreter" if target.interpret else "gpu"
    BM, BN, score_warps = CAB_TILES[where]
    DM, DN, DK, warps, stages = CAB_DOT_TILES[where]
    T, rows = cdiv(M, BM), B * Hq
    precision = "ieee" if target.interpret else CAB_PRECISION
    align = alignment(M)
    # cab_split_kernel and cab_curvature_kernel recompute A's tiles on cab_scores_kernel's shapes
    # (BM, BN, warps): the same bits, so An is exact in F's first term (AH + AL alone lost masks)
    assert (DM, DN, warps) == (BM, BN, score_warps), "cab_curvature_kernel recomputes A on the score tiles"
    args = (Hq, Hq // Hkv, M, D, 1.0 / math.sqrt(D))
    tiles = {"BM": BM, "BN": BN, "BD": max(16, next_pow2(D)), "ALIGN": alignment(M, D),
             "PRECISION": precision if q.dtype == "float32" else fa_plans.dot_precision(q.dtype)}
    scores = Launch(kern.cab_scores_kernel, (T, rows), ("qc", "kc"), args,
                    (Buffer("cab_lo", (rows, T), "float32"), Buffer("cab_hi", (rows, T), "float32")),
                    tiles, num_warps=score_warps)
    split = Launch(kern.cab_split_kernel, (T, rows), ("qc", "kc", "cab_lo", "cab_hi"), args + (T,),
                   (Buffer("cab_ah", (rows, M, M), "bfloat16"), Buffer("cab_al", (rows, M, M), "bfloat16")),
                   dict(tiles, BT=next_pow2(T)), num_warps=score_warps)
    curvature = Launch(kern.cab_curvature_kernel, (cdiv(M, DM), cdiv(M, DN), rows),
                       ("qc", "kc", "cab_lo", "cab_hi", "cab_ah", "cab_al"), args + (T, float(lam)),
                       (Buffer("cab_f", (rows, M, M), "float32"),),
                       dict(tiles, BK=DK, BT=next_pow2(T), CAUSAL=causal), num_warps=warps, num_stages=stages)
    keep_bits = struct.unpack("<q", struct.pack("<d", float(keep)))[0]
    BW = next_pow2(M)
    per_warp = CAB_SELECT_ELEMENTS[where]
    select_warps = max(1, min(CAB_SELECT_MAX_WARPS, BW // per_warp))
    BR = max(1, min(per_warp * select_warps // BW, next_pow2(rows * M)))
    # causal: the blocks i < BW / 2 keep only blocks below BW / 2, ranked on half-wide tiles
    half = causal and BW >= 32
    half_programs = cdiv(rows * (BW // 2), 2 * BR) if half else 0
    programs = half_programs + cdiv(rows * (M - BW // 2 if half else M), BR)
    select = Launch(kern.cab_select_kernel, (programs,), ("cab_f",), (rows, M, half_programs, keep_bits, local_blocks),
                    (Buffer("mask", (B, Hq, M, M), "bool"),),
                    {"BR": BR, "BM": BW, "CAUSAL": causal, "HALF": half, "ALIGN": align}, num_warps=select_warps)
    coarsen = _coarsen_launches(q, block_size, target, ("q", "qc", "q_index"), k, ("k", "kc", "k_index"))
    return Plan((*coarsen, scores, split, curvature, select), ("mask",))


# -- cab attention: the mask, then attention on it ----------------------------------------

def _cab_mask(q: ArraySpec, block_size: int, layout: str) -> ArraySpec:
    """The spec of the mask cab_attention's forward builds (row-major bool [B, Hq, M, M])."""
    q = as_bhnd(q, layout)
    M = cdiv(q.shape[2], block_size)
    shape = (q.shape[0], q.shape[1], M, M)
    return ArraySpec(shape, "bool", row_major_strides(shape), q.device)


@cached_plan
def cab_forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, *, block_size: int, keep: float, lam: float,
                     causal: bool, local_blocks: int, softmax_scale, target: Target, layout: str = "bhnd") -> Plan:
    """Inputs: q, k, v (in ``layout``). Results: o, lse, mask (curvature_block_mask's), rows, rows_count."""
    mask = curvature_plan(q, k, block_size=block_size, keep=keep, lam=lam, causal=causal,
                          local_blocks=local_blocks, target=target, layout=layout)
    sparse = block_sparse_forward_plan(q, k, v, _cab_mask(q, block_size, layout), block_size=block_size,
                                       causal=causal, softmax_scale=softmax_scale, target=target,
                                       layout=layout).renamed({"block_mask": "mask"})
    return Plan(mask.launches + sparse.launches, ("o", "lse", "mask", "rows", "rows_count"))


@cached_plan
def cab_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, block_size: int, causal: bool,
                      softmax_scale, has_dlse: bool, target: Target, layout: str = "bhnd") -> Plan:
    """block_sparse_backward_plan on the forward's mask (input ``mask``)."""
    return block_sparse_backward_plan(q, k, v, _cab_mask(q, block_size, layout), do, block_size=block_size,
                                      causal=causal, softmax_scale=softmax_scale, has_dlse=has_dlse, target=target,
                                      layout=layout).renamed({"block_mask": "mask"})
