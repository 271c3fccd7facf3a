"""linear_cross_entropy: argument checks and launch plans (kernels.py beside it). x [..., H]
seen as [T, H] (row-major), weight [V, H], bias [V], targets [...] as [T].

The plans come in pieces so that vocabulary parallelism can put collectives between them:
:func:`stats_plan` (this device's partials), :func:`merge_plan` (partials of every column
to losses), :func:`backward_plan` (this device's gradients; dx a partial sum over its
columns). :func:`forward_plan` is the first two in one plan."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ato_core import checks
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, itemsize, numel,
                             optional_output, row_major_strides)
from ato_core.ops.cross_entropy import kernels as ce_kern
from ato_core.ops.cross_entropy.plans import MAX_V, check_options
from ato_core.target import Target

from . import kernels as kern


class Tiles(NamedTuple):
    """Tiles of the matmuls: logits [bt, bv] (forward and dlogits) with bk of H per step;
    dweight and dx [bm, bn] with bk2 per step; warps and pipeline stages of all of them."""

    bt: int
    bv: int
    bk: int
    bm: int
    bn: int
    bk2: int
    warps: int
    stages: int


class Settings(NamedTuple):
    """Tiles by input dtype size (2: bf16/fp16, 4: fp32), the row blocks that share their
    columns in flight (group), the programs per SM the forward's vocabulary splits aim at,
    and the most bytes of dlogits the backward holds at once (its vocabulary chunk)."""

    half: Tiles
    single: Tiles
    group: int
    programs_per_sm: int
    chunk_bytes: int


SETTINGS = Settings(half=Tiles(128, 256, 64, 128, 256, 64, 8, 3), single=Tiles(64, 128, 32, 64, 128, 32, 4, 3),
                    group=8, programs_per_sm=4, chunk_bytes=64 << 20)
INTERPRETER_TILES = Tiles(16, 32, 16, 16, 32, 16, 4, 1)


def _tiles(dtype: str, target: Target, settings: Settings) -> Tiles:
    if target.interpret:
        return INTERPRETER_TILES
    return settings.single if dtype == "float32" else settings.half


def rows(x: ArraySpec):
    """(T, H): x [..., H] as T rows of H."""
    return numel(x.shape[:-1]), x.shape[-1]


def check_linear_cross_entropy(x: ArraySpec, weight: ArraySpec, targets: ArraySpec, bias: Optional[ArraySpec],
                               ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss,
                               v_total: Optional[int] = None) -> None:
    if x.ndim < 1:
        raise ValueError("x: expected at least 1 dimension [..., H], got a scalar")
    checks.check_float("x", x)
    checks.check_rank("weight", weight, 2, "[V, H]")
    checks.check_float("weight", weight)
    checks.check_same_dtype(("x", "weight"), (x, weight))
    checks.check_int("targets", targets)
    specs = [("x", x), ("weight", weight), ("targets", targets)] + ([("bias", bias)] if bias is not None else [])
    checks.check_same_device([n for n, _ in specs], [s for _, s in specs])
    T, H = rows(x)
    checks.check_dim("weight", weight, 1, H, "H, x's last axis")
    V = weight.shape[0]
    checks.check_range("weight.shape[0] (V)", V, 1, MAX_V)
    checks.check_range("x.shape[-1] (H)", H, 1)
    checks.check_shape("targets", targets, tuple(x.shape[:-1]), "x's shape without its last axis")
    if bias is not None:
        checks.check_shape("bias", bias, (V,), "[V]")
        checks.check_float("bias", bias)
    check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss)
    if v_total is not None:
        checks.check_range("the vocabulary of all shards (V_total)", v_total, V, MAX_V)


def _cap(softcap):
    return float(softcap or 1.0), 1.0 / float(softcap or 1.0)


@cached_plan
def stats_plan(x: ArraySpec, weight: ArraySpec, targets: ArraySpec, bias: Optional[ArraySpec], *, v_total: int,
               label_smoothing: float, softcap: Optional[float], target: Target,
               settings: Optional[Settings] = None) -> Plan:
    """Inputs: x, weight, targets (column indices of this weight: shifted by its first column
    under vocabulary parallelism), bias. Result: part [P, 4, T] fp32, the partials of
    kernels.lce_stats_kernel. v_total: the vocabulary of all devices (label smoothing's V)."""
    settings = settings or SETTINGS
    T, H = rows(x)
    V = weight.shape[0]
    tl_ = _tiles(x.dtype, target, settings)
    n_t, n_vb = cdiv(T, tl_.bt), cdiv(V, tl_.bv)
    n_split = max(1, min(n_vb, cdiv(target.num_sms * settings.programs_per_sm, max(n_t, 1))))
    per_split = cdiv(n_vb, n_split)
    n_split = cdiv(n_vb, per_split)  # (no split without columns)
    launch = Launch(
        kern.lce_stats_kernel, (n_t * n_split,), ("x", "weight", "bias" if bias is not None else "x", "targets"),
        (T, V, H, 1.0 / v_total, *_cap(softcap), per_split, n_split),
        (Buffer("part", (n_split, 4, T), "float32"),),
        {"BT": tl_.bt, "BV": tl_.bv, "BK": tl_.bk, "GROUP": settings.group, "EVEN_K": H % tl_.bk == 0,
         "HAS_BIAS": bias is not None, "SOFTCAP": softcap is not None, "SMOOTH": label_smoothing > 0,
         "IEEE": x.dtype == "float32", "ALIGN": alignment(H)},
        num_warps=tl_.warps, num_stages=tl_.stages)
    return Plan((launch,), ("part",), dense=("x", "weight", "targets", "bias"))


@cached_plan
def merge_plan(part: ArraySpec, targets: ArraySpec, *, v_total: int, ignore_index: int, reduction: str,
               label_smoothing: float, z_loss: float, return_z_loss: bool) -> Plan:
    """Inputs: part [P, 4, T] (every column's partials), targets (global column indices).
    Results: loss (targets' shape for "none", else a scalar; fp32), lse [T], scale [T] (for
    the backward), z_loss (with ``return_z_loss``, reduced as the loss; else a dummy)."""
    P, T = part.shape[0], part.shape[2]
    mean = reduction == "mean"
    launches = []
    if mean:
        launches.append(Launch(ce_kern.ce_count_kernel, (1,), ("targets",), (T, int(ignore_index)),
                               (Buffer("count", (1,), "float32"),), {"BLOCK": 1024}, num_warps=4))
    block = 256
    launches.append(Launch(
        kern.lce_merge_kernel, (cdiv(T, block),), ("part", "targets", "count" if mean else "part"),
        (T, P, v_total, int(ignore_index), float(label_smoothing), float(z_loss)),
        (Buffer("row_loss", tuple(targets.shape), "float32"), Buffer("lse", (T,), "float32"),
         Buffer("scale", (T,), "float32"), optional_output("row_z", tuple(targets.shape), "float32", return_z_loss)),
        {"BLOCK": block, "MEAN": mean, "ZLOSS": z_loss > 0, "ZOUT": return_z_loss}, num_warps=4))
    results = ["row_loss", "lse", "scale", "row_z" if return_z_loss else "lse"]
    if reduction != "none":
        for i in (0, 3) if return_z_loss else (0,):
            out = "total" if i == 0 else "z_total"
            launches.append(Launch(ce_kern.ce_reduce_kernel, (1,), (results[i], "count" if mean else results[i]),
                                   (T,), (Buffer(out, (), "float32"),), {"BLOCK": 1024, "MEAN": mean}, num_warps=4))
            results[i] = out
    return Plan(tuple(launches), tuple(results), dense=("targets",))


@cached_plan
def forward_plan(x: ArraySpec, weight: ArraySpec, targets: ArraySpec, bias: Optional[ArraySpec], *,
                 ignore_index: int, reduction: str, label_smoothing: float, z_loss: float,
                 softcap: Optional[float], return_z_loss: bool, target: Target,
                 settings: Optional[Settings] = None) -> Plan:
    """Inputs: x, weight, targets, bias. Results: those of :func:`merge_plan`."""
    check_linear_cross_entropy(x, weight, targets, bias, ignore_index, reduction, label_smoothing, z_loss, softcap,
                               return_z_loss)
    V = weight.shape[0]
    stats = stats_plan(x, weight, targets, bias, v_total=V, label_smoothing=label_smoothing, softcap=softcap,
                       target=target, settings=settings)
    part = stats.buffer("part")
    merge = merge_plan(ArraySpec(part.shape, "float32", row_major_strides(part.shape), x.device), targets, v_total=V, ignore_index=ignore_index,
                       reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss,
                       return_z_loss=return_z_loss)
    return Plan(stats.launches + merge.launches, merge.results, dense=stats.dense)


def chunk(T: int, V: int, dtype: str, target: Target, settings: Settings) -> int:
    """The backward's vocabulary chunk: a multiple of the logits tile's width, as wide as
    ``chunk_bytes`` of dlogits ([T, C]) allows (at least one tile), no wider than V needs."""
    tl_ = _tiles(dtype, target, settings)
    if target.interpret:  # two tiles: the CPU tests take several chunks
        width = 2 * tl_.bv
    else:
        width = max(1, settings.chunk_bytes // (max(T, 1) * itemsize(dtype))) // tl_.bv * tl_.bv
    return min(max(width, tl_.bv), cdiv(V, tl_.bv) * tl_.bv)


@cached_plan
def backward_plan(x: ArraySpec, weight: ArraySpec, targets: ArraySpec, bias: Optional[ArraySpec],
                  dloss: ArraySpec, *, v_total: int, label_smoothing: float, z_loss: float,
                  softcap: Optional[float], target: Target, dx_dtype: Optional[str] = None,
                  settings: Optional[Settings] = None) -> Plan:
    """Inputs: x, weight, targets (this weight's column indices), bias, lse, scale (the
    forward's), dloss (the loss's cotangent: [T]-shaped for reduction "none", else a scalar).
    Results: dx (x's shape, in ``dx_dtype``, default x's; under vocabulary parallelism the
    sum over this device's columns), dweight, dbias (with a bias; else a dummy)."""
    settings = settings or SETTINGS
    T, H = rows(x)
    V = weight.shape[0]
    tl_ = _tiles(x.dtype, target, settings)
    C = chunk(T, V, x.dtype, target, settings)
    n_chunks = cdiv(V, C)
    cap = _cap(softcap)
    ieee = x.dtype == "float32"
    per_row = dloss.ndim >= 1
    bias_in = "bias" if bias is not None else "x"
    t_stride = cdiv(T, 16) * 16  # (x^T's rows 16-element aligned)
    align = alignment(H, C, t_stride)  # (the backward's arrays have rows of H, C and t_stride)
    launches = [Launch(kern.lce_transpose_kernel, (cdiv(T, 64) * cdiv(H, 64),), ("x",), (T, H, t_stride),
                       (Buffer("xt", (H, t_stride), x.dtype),), {"BT": 64, "BH": 64, "ALIGN": align}, num_warps=4)]
    for i in range(n_chunks):
        v0 = i * C
        prev = f"d{i - 1}" if i else "lse"
        launches.append(Launch(
            kern.lce_dlogits_kernel, (cdiv(T, tl_.bt) * cdiv(C, tl_.bv),),
            ("x", "weight", bias_in, "targets", "lse", "scale", "dloss", prev),
            (T, V, H, v0, C, 1.0 / v_total, float(label_smoothing), float(z_loss), *cap),
            (Buffer(f"d{i}", (T, C), x.dtype, alias=prev if i else None),),
            {"BT": tl_.bt, "BV": tl_.bv, "BK": tl_.bk, "GROUP": settings.group, "EVEN_K": H % tl_.bk == 0,
             "HAS_BIAS": bias is not None, "SOFTCAP": softcap is not None, "SMOOTH": label_smoothing > 0,
             "ZLOSS": z_loss > 0, "PER_ROW": per_row, "IEEE": ieee, "ALIGN": align},
            num_warps=tl_.warps, num_stages=tl_.stages))
        dw_prev = f"dw{i - 1}" if i else "lse"
        launches.append(Launch(
            kern.lce_dw_kernel, (cdiv(H, tl_.bm) * cdiv(C, tl_.bn),), ("xt", f"d{i}", dw_prev),
            (T, V, H, v0, C, t_stride),
            (Buffer(f"dw{i}", tuple(weight.shape), weight.dtype, alias=dw_prev if i else None),),
            {"BM": tl_.bm, "BN": tl_.bn, "BK": tl_.bk2, "EVEN_T": T % tl_.bk2 == 0, "IEEE": ieee, "ALIGN": align},
            num_warps=tl_.warps, num_stages=tl_.stages))
        if bias is not None:
            db_prev = f"db{i - 1}" if i else "lse"
            launches.append(Launch(
                kern.lce_dbias_kernel, (cdiv(C, 16),), (f"d{i}", db_prev), (T, V, v0, C),
                (Buffer(f"db{i}", (V,), bias.dtype, alias=db_prev if i else None),),
                {"BLOCK_C": 16, "BLOCK_T": 256, "ALIGN": align}, num_warps=4))
        first, last = i == 0, i == n_chunks - 1
        acc_prev = f"acc{i - 1}" if i else "lse"
        launches.append(Launch(
            kern.lce_dx_kernel, (cdiv(T, tl_.bm) * cdiv(H, tl_.bn),), (f"d{i}", "weight", acc_prev),
            (T, V, H, v0, C),
            (optional_output(f"acc{i}", (T, H), "float32", not last) if first else
             Buffer(f"acc{i}", (T, H), "float32", alias=acc_prev) if not last else
             optional_output(f"acc{i}", (T, H), "float32", False),
             optional_output("dx" if last else f"dx{i}", tuple(x.shape), dx_dtype or x.dtype, last)),
            {"BM": tl_.bm, "BN": tl_.bn, "BK": tl_.bk2, "GROUP": settings.group,
             "EVEN_C": C % tl_.bk2 == 0 and v0 + C <= V, "FIRST": first, "LAST": last, "IEEE": ieee, "ALIGN": align},
            num_warps=tl_.warps, num_stages=tl_.stages))
    last = n_chunks - 1
    results = ("dx", f"dw{last}", f"db{last}" if bias is not None else f"d{last}")  # (no bias: not returned)
    return Plan(tuple(launches), results, dense=("x", "weight", "targets", "bias", "dloss"))


def vocab_parallel_plans(x: ArraySpec, weight: ArraySpec, targets: ArraySpec, bias: Optional[ArraySpec], shards: int,
                         static, target: Target):
    """One device's plans under vocabulary parallelism (``weight`` its [V / shards, H] rows,
    ``static`` the op's LCE): (stats, merge, backward builder). The caller runs ``stats`` on
    its targets shifted by its first row, gathers every device's ``part`` along axis 0 in
    device order ([shards * P, 4, T]), runs ``merge`` on that and the unshifted targets, and
    for the gradient ``backward(dloss spec)``, whose dx (fp32) it sums over the devices."""
    checks.check_range("the number of vocabulary shards", shards, 1)
    v_total = shards * weight.shape[0]
    check_linear_cross_entropy(x, weight, targets, bias, static.ignore_index, static.reduction,
                               static.label_smoothing, static.z_loss, static.softcap, static.return_z_loss, v_total)
    stats = stats_plan(x, weight, targets, bias, v_total=v_total, label_smoothing=static.label_smoothing,
                       softcap=static.softcap, target=target)
    P, _, T = stats.buffer("part").shape
    gathered = (shards * P, 4, T)
    merge = merge_plan(ArraySpec(gathered, "float32", row_major_strides(gathered), x.device), targets,
                       v_total=v_total, ignore_index=static.ignore_index, reduction=static.reduction,
                       label_smoothing=static.label_smoothing, z_loss=static.z_loss,
                       return_z_loss=static.return_z_loss)

    def backward(dloss: ArraySpec) -> Plan:
        return backward_plan(x, weight, targets, bias, dloss, v_total=v_total, label_smoothing=static.label_smoothing,
                             z_loss=static.z_loss, softcap=static.softcap, target=target, dx_dtype="float32")

    return stats, merge, backward
