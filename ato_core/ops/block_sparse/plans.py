"""block_sparse: argument checks and launch plans (kernels.py beside it)."""

from __future__ import annotations

import math
import struct

from ato_core import checks
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, cached_plan, cdiv, next_pow2, row_alignment, row_major_strides
from ato_core.target import Target

from ..flash_attention import kernels as fa_kern
from ..flash_attention import plans as fa_plans
from . import kernels as kern

BLOCK_SIZES = (16, 32, 64, 128, 256)
# Elements of x a coarsening program loads at once (ROWS tokens x BD; the interpreter: 4 rows,
# so that a test block spans several tiles); the programs' warps. One block a program: the
# fastest on an H100 (results: block_sparse-sweep.txt).
TILE_ELEMENTS = 8192
INTERPRETER_ROWS = 4
WARPS = 4


def check_block_size(block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size: expected a power of two from 16 to 256, got {block_size!r}")
    return block_size


def check_coarsen(x: ArraySpec, block_size) -> tuple:
    """Validates max_l2_coarsen's arguments; returns (B, H, N, D, M)."""
    checks.check_rank("x", x, 4, "[B, H, N, D]")
    checks.check_float("x", x)
    B, H, N, D = x.shape
    checks.check_range("x.shape[0] (B)", B, 1)
    checks.check_range("x.shape[1] (H)", H, 1)
    checks.check_range("x.shape[2] (N)", N, 1, 2 ** 31 - 1)
    checks.check_range("x.shape[3] (D)", D, 1, fa_plans.MAX_HEAD_DIM)
    bs = check_block_size(block_size)
    M = cdiv(N, bs)
    checks.check_range("B * H * ceil(N / block_size) (the blocks, one program each)", B * H * M, 1, 2 ** 31 - 1)
    return B, H, N, D, M


def _tile(D: int, block_size: int, target: Target):
    BD = max(16, next_pow2(D))
    rows = INTERPRETER_ROWS if target.interpret else max(1, TILE_ELEMENTS // BD)
    return BD, min(rows, block_size)


def _coarsen_launch(x: ArraySpec, block_size: int, target: Target, names=("x", "x_coarse", "index")) -> Launch:
    B, H, N, D, M = check_coarsen(x, block_size)
    BD, rows = _tile(D, block_size, target)
    return Launch(kern.max_l2_coarsen_kernel, (B * H * M,), (names[0],), (H, N, D, M, *x.strides),
                  (Buffer(names[1], (B, H, M, D), x.dtype), Buffer(names[2], (B, H, M), "int32")),
                  {"BLOCK": block_size, "ROWS": rows, "BD": BD, "ALIGN": row_alignment((D,), (x,))},
                  num_warps=WARPS)


@cached_plan
def coarsen_plan(x: ArraySpec, *, block_size: int, target: Target) -> Plan:
    """Inputs: x. Results: x_coarse [B, H, M, D] (x's dtype), index [B, H, M] int32."""
    return Plan((_coarsen_launch(x, block_size, target),), ("x_coarse", "index"))


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
                       softmax_scale) -> tuple:
    """Validates block_sparse_attention's arguments; returns (B, Hq, Hkv, Nq, Nk, D, Mq, Mk)."""
    B, Hq, Hkv, Nq, Nk, D = fa_plans.check_flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale)
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


def _lists(mask: ArraySpec, B: int, H: int, Mq: int, Mk: int, Nq: int, Nk: int, bs: int, causal: bool,
           columns: bool) -> Launch:
    lines, length = (Mk, Mq) if columns else (Mq, Mk)
    name = "cols" if columns else "rows"
    return Launch(kern.bs_lists_kernel, (B * H * lines,), ("block_mask",), (Mq, Mk, Nq, Nk, bs, *mask.strides, H),
                  (Buffer(name, (B * H * lines, length), "int32"), Buffer(name + "_count", (B * H * lines,), "int32")),
                  {"CHUNK": min(next_pow2(length), 4096), "COLUMNS": columns, "CAUSAL": causal}, num_warps=4)


@cached_plan
def block_sparse_forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, mask: ArraySpec, *, block_size: int,
                              causal: bool, softmax_scale, target: Target) -> Plan:
    """Inputs: q, k, v, block_mask. Results: o [B, Hq, Nq, D] (q's dtype), lse [B, Hq, Nq] fp32,
    rows, rows_count (each query block's kept key blocks, for the backward)."""
    B, Hq, Hkv, Nq, Nk, D, Mq, Mk = check_block_sparse(q, k, v, mask, block_size, causal, softmax_scale)
    cfg = fa_plans.config(D, q.dtype, target)
    fwd, _, _ = _bs_tiles(cfg, block_size, target)
    scale = fa_plans.resolve_scale(softmax_scale, D)
    o_shape = (B, Hq, Nq, D)
    launch = Launch(
        kern.bs_fwd_kernel, (cdiv(Nq, fwd.m), B * Hq), ("q", "k", "v", "rows", "rows_count"),
        (Hq, Hq // Hkv, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, *q.strides, *k.strides, *v.strides,
         *row_major_strides(o_shape)),
        (Buffer("o", o_shape, q.dtype), Buffer("lse", (B, Hq, Nq), "float32")),
        {"BS": block_size, **fa_plans._constexprs(cfg, fwd, D, causal, fa_plans._align(D, q, k, v))},
        num_warps=fwd.warps, num_stages=fwd.stages)
    return Plan((_lists(mask, B, Hq, Mq, Mk, Nq, Nk, block_size, causal, False), launch),
                ("o", "lse", "rows", "rows_count"))


@cached_plan
def block_sparse_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, mask: ArraySpec, do: ArraySpec, *,
                               block_size: int, causal: bool, softmax_scale, has_dlse: bool,
                               target: Target) -> Plan:
    """Inputs: q, k, v, block_mask, o, lse, rows, rows_count (the forward's), do and, with
    has_dlse, dlse. Results: dq, dk, dv."""
    B, Hq, Hkv, Nq, Nk, D, Mq, Mk = check_block_sparse(q, k, v, mask, block_size, causal, softmax_scale)
    checks.check_shape("do", do, tuple(q.shape), "[B, Hq, Nq, D], the shape of the output")
    checks.check_same_dtype(("q", "do"), (q, do))
    cfg = fa_plans.config(D, q.dtype, target)
    _, dkdv_t, dq_t = _bs_tiles(cfg, block_size, target)
    scale = fa_plans.resolve_scale(softmax_scale, D)
    G = Hq // Hkv
    rows = (B, Hq, Nq)
    delta = Launch(
        fa_kern.fa_bwd_delta_kernel, (cdiv(Nq, cfg.delta_rows), B * Hq), ("o", "do", "lse", "dlse" if has_dlse else "lse"),
        (Hq, Nq, D, *row_major_strides(q.shape), *do.strides),
        (Buffer("delta", rows, "float32"), Buffer("lse2", rows, "float32")),
        {"BLOCK_M": cfg.delta_rows, "BD": cfg.BD, "HAS_DLSE": has_dlse, "ALIGN": fa_plans._align(D, do)}, num_warps=4)
    align = fa_plans._align(D, q, k, v, do)
    strides = (*q.strides, *k.strides, *v.strides, *do.strides)
    dkdv = Launch(
        kern.bs_bwd_dkdv_kernel, (cdiv(Nk, dkdv_t.n), B * Hkv),
        ("q", "k", "v", "do", "lse2", "delta", "cols", "cols_count"),
        (Hkv, G, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, scale, *strides, *row_major_strides(k.shape),
         *row_major_strides(v.shape)),
        (Buffer("dk", tuple(k.shape), k.dtype), Buffer("dv", tuple(v.shape), v.dtype)),
        {"BS": block_size, **fa_plans._constexprs(cfg, dkdv_t, D, causal, align)}, num_warps=dkdv_t.warps,
        num_stages=dkdv_t.stages)
    dq = Launch(
        kern.bs_bwd_dq_kernel, (cdiv(Nq, dq_t.m), B * Hq), ("q", "k", "v", "do", "lse2", "delta", "rows", "rows_count"),
        (Hq, G, Nq, Nk, D, Mq, Mk, scale * fa_plans.LOG2E, scale, *strides, *row_major_strides(q.shape)),
        (Buffer("dq", tuple(q.shape), q.dtype),),
        {"BS": block_size, **fa_plans._constexprs(cfg, dq_t, D, causal, align)}, num_warps=dq_t.warps,
        num_stages=dq_t.stages)
    cols = _lists(mask, B, Hq, Mq, Mk, Nq, Nk, block_size, causal, True)
    return Plan((cols, delta, dkdv, dq), ("dq", "dk", "dv"), dense=("o", "lse", "dlse", "rows", "rows_count"))


# -- curvature block mask ---------------------------------------------------------------

# Rows and columns of a score tile of the curvature kernel (the interpreter: 16).
CAB_TILE = 64


def check_curvature(q: ArraySpec, k: ArraySpec, block_size, keep, lam, causal, local_blocks) -> tuple:
    """Validates curvature_block_mask's arguments; returns (B, Hq, Hkv, N, D, M)."""
    # q and k as flash attention takes them (k standing in for v), then one length for both
    B, Hq, Hkv, N, _, D = fa_plans.check_flash_attention(q, k, k, causal=causal, softmax_scale=None)
    checks.check_dim("k", k, 2, N, "N, as in q (self-attention)")
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
                   local_blocks: int, target: Target) -> Plan:
    """Inputs: q, k. Result: mask [B, Hq, M, M] bool (with the coarse scores A and F, fp32)."""
    B, Hq, Hkv, N, D, M = check_curvature(q, k, block_size, keep, lam, causal, local_blocks)
    tile = 16 if target.interpret else CAB_TILE
    BD = max(16, next_pow2(D))
    rows = B * Hq
    scores = Launch(kern.cab_scores_kernel, (rows,), ("qc", "kc"),
                    (Hq, Hq // Hkv, M, D, 1.0 / math.sqrt(D), float(lam)),
                    (Buffer("cab_a", (rows, M, M), "float32"), Buffer("cab_f", (rows, M, M), "float32")),
                    {"BM": tile, "BD": BD, "PRECISION": "ieee"}, num_warps=4)
    keep_bits = struct.unpack("<q", struct.pack("<d", float(keep)))[0]
    select = Launch(kern.cab_select_kernel, (rows * M,), ("cab_f",), (M, keep_bits, local_blocks),
                    (Buffer("mask", (B, Hq, M, M), "bool"),),
                    {"BM": next_pow2(M), "CAUSAL": causal}, num_warps=4)
    return Plan((_coarsen_launch(q, block_size, target, ("q", "qc", "q_index")),
                 _coarsen_launch(k, block_size, target, ("k", "kc", "k_index")), scores, select), ("mask",))
