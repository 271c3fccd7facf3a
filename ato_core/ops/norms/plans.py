"""layer_norm, rms_norm, dropout_residual_layer_norm: argument checks and launch plans.

Inputs are
addressed as row-major [M, N] (N the last axis, M the product of the others); the adapters
make them contiguous (``Plan.dense``).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

from ato_core import checks
from . import kernels as kern
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, itemsize, next_pow2, numel,
                     optional_output)
from ato_core.target import Target

MAX_N = 65536
# Widest row a program holds in registers (one pass); wider rows are walked in pieces.
SINGLE_MAX = 8192
class BwdSettings(NamedTuple):
    """Launch settings of the backward. Its programs each walk a share of the rows and reduce
    their dw/db into one fp32 partial row. ``by_width``: per row width (BLOCK_N up to the
    key), the programs per SM, their warps and how many rows deep Triton pipelines their
    loads through shared memory (stages); ``looped``: programs per SM and warps for rows wider
    than one piece (not pipelined); ``smem_bytes``: the shared memory the pipelined rows of
    one program may take (an H100 block may have 227 KB); ``sum_cols``: columns per program of
    the partial-row sums."""

    by_width: Tuple[Tuple[int, Tuple[int, int, int]], ...]
    looped: Tuple[int, int] = (2, 8)
    smem_bytes: int = 200 * 1024
    sum_cols: int = 32


# Swept on an H100 by device time (benchmarks/tools/norm_kernels.py --bwd-sweep; results index:
# norm-bwd-sweep).
BWD_SETTINGS = BwdSettings(((1024, (4, 4, 3)), (4096, (2, 4, 3)), (MAX_N, (2, 8, 3))))


def _rows(x: ArraySpec) -> Tuple[int, int]:
    N = x.shape[-1]
    return numel(x.shape[:-1]), N


def _block(N: int, target: Target) -> Tuple[int, bool]:
    single_max = 64 if target.interpret else SINGLE_MAX  # the interpreter: exercise the looped path
    if N <= single_max:
        return max(next_pow2(N), 16), True
    return (32 if target.interpret else 4096), False


def _warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


def _bwd_settings(block: int, single: bool, row_bytes: int, settings: BwdSettings) -> Tuple[int, int, int]:
    """(programs per SM, warps, pipeline stages) of the backward; ``row_bytes``: the bytes of
    one row's pipelined loads (x, dy and dh: each in x's dtype, as autograd and JAX hand them)."""
    if not single:
        return (*settings.looped, 1)
    programs, warps, stages = next(v for width, v in sorted(settings.by_width) if block <= width)
    if (stages - 1) * row_bytes > settings.smem_bytes:  # Triton buffers stages - 1 rows ahead
        stages = 1
    return programs, warps, stages


def check_norm(name_x: str, x: ArraySpec, weight: Optional[ArraySpec], bias: Optional[ArraySpec], eps) -> int:
    checks.check_float(name_x, x, float64=True)
    if x.ndim < 1:
        raise ValueError(f"{name_x}: expected at least 1 dimension, got shape {tuple(x.shape)}")
    N = x.shape[-1]
    checks.check_range(f"{name_x}.shape[-1]", N, 0, MAX_N)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            checks.check_float(name, t, float64=True)
            checks.check_shape(name, t, (N,), f"[N] with N = {N}, the last axis of {name_x}")
            checks.check_same_device((name_x, name), (x, t))
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps: expected a positive float, got {eps!r}")
    return N


def check_dropout(p, seed, training) -> float:
    """Validates the dropout arguments (``seed``: the int, or None when an array carries it);
    returns the dropout probability that applies (0 when not training)."""
    checks.check_dropout_p("p", p)
    checks.check_seed(seed)
    checks.check_bool("training", training)
    return float(p) if training else 0.0


def _dtype(spec: Optional[ArraySpec], default: str) -> str:
    return default if spec is None else spec.dtype


@cached_plan
def forward_plan(x: ArraySpec, residual: Optional[ArraySpec], weight: Optional[ArraySpec],
                 bias: Optional[ArraySpec], seed_array: Optional[ArraySpec] = None, *, rms: bool, eps: float,
                 p: float, seed: Optional[int], target: Target) -> Plan:
    """Inputs: x, residual (dropout + residual when given), weight, bias, seed (the dropout
    seed as an array, when ``seed_array`` is its spec; else ``seed``). Results: y (x's
    shape and dtype), h (with a residual: dropout(x) + residual), mean [M] (LayerNorm),
    rstd [M] (fp32)."""
    N = check_norm("x", x, weight, bias, eps)
    words = checks.seed_words(seed_array, "x", x) if seed_array is not None else 0
    if residual is not None:
        checks.check_shape("residual", residual, tuple(x.shape), "the shape of x")
        checks.check_same_dtype(("x", "residual"), (x, residual))
        checks.check_same_device(("x", "residual"), (x, residual))
    M, N = _rows(x)
    block, single = _block(N, target)
    outs = [Buffer("y", tuple(x.shape), x.dtype),
            optional_output("h", tuple(x.shape), x.dtype, residual is not None),
            optional_output("mean", (M,), checks.acc_dtype(x.dtype), not rms), Buffer("rstd", (M,), checks.acc_dtype(x.dtype))]
    launch = Launch(
        kern.norm_fwd_kernel, (M if N else 0,), ("x", "residual" if residual else "x", "weight" if weight else "x",
                                            "bias" if bias else "x", "seed" if words and p > 0 else "x"),
        (M, N, float(eps), float(p), int(seed or 0)), tuple(outs),
        {"BLOCK_N": block, "SINGLE": single, "RMS": rms, "HAS_W": weight is not None, "HAS_B": bias is not None,
         "HAS_RES": residual is not None, "DROPOUT": p > 0, "ALIGN": alignment(N), "SEED_WORDS": words if p > 0 else 0},
        num_warps=_warps(block),
    )
    return Plan((launch,), ("y", "h", "mean", "rstd"), dense=("x", "residual", "weight", "bias", "seed"))


@cached_plan
def backward_plan(x: ArraySpec, weight: Optional[ArraySpec], bias: Optional[ArraySpec], *, rms: bool,
                  has_residual: bool, has_dh: bool, p: float, seed: Optional[int], target: Target,
                  settings: Optional[BwdSettings] = None, seed_array: Optional[ArraySpec] = None) -> Plan:
    """Inputs: h (with a residual; else x), weight, dy, dh (the cotangent of h, with
    has_dh), mean, rstd. Results: dx, dresidual (with a residual), dw, db (the dtypes of
    weight and bias; dummies when absent). ``settings``: default BWD_SETTINGS."""
    settings = settings or BWD_SETTINGS
    hx = "h" if has_residual else "x"
    M, N = _rows(x)
    block, single = _block(N, target)
    programs_per_sm, warps, stages = _bwd_settings(block, single, block * itemsize(x.dtype) * (3 if has_dh else 2),
                                                    settings)
    programs = min(M, 4 if target.interpret else round(target.num_sms * programs_per_sm)) if M * N else 0
    rpp = cdiv(M, programs) if programs else 0
    programs = cdiv(M, rpp) if programs else 0  # none for an empty x: dw and db are sums of no rows, 0
    part = (programs, N)
    bwd = Launch(
        kern.norm_bwd_kernel, (programs,), (hx, "weight" if weight else hx, "dy", "dh" if has_dh else "dy",
                                     "mean", "rstd", "seed" if seed_array is not None and p > 0 else hx),
        (M, N, rpp, float(p), int(seed or 0)),
        (Buffer("dx", tuple(x.shape), x.dtype),
         optional_output("dresidual", tuple(x.shape), x.dtype, has_residual),
         # the looped kernel adds into its partial rows; the single-piece one writes them whole
         optional_output("dw_part", part, checks.acc_dtype(x.dtype), weight is not None, zeroed=not single),
         optional_output("db_part", part, checks.acc_dtype(x.dtype), bias is not None, zeroed=not single)),
        {"BLOCK_N": block, "SINGLE": single, "RMS": rms, "HAS_W": weight is not None, "HAS_B": bias is not None,
         "HAS_RES": has_residual, "HAS_DH": has_dh, "DROPOUT": p > 0, "ALIGN": alignment(N),
         "STAGES": stages,
         "SEED_WORDS": checks.seed_words(seed_array, "x", x) if seed_array is not None and p > 0 else 0},
        num_warps=warps,
    )
    launches = [bwd]
    sums = [(name, spec) for name, spec in (("dw", weight), ("db", bias)) if spec is not None]
    if sums:  # dw and db in one launch (axis 1 of its grid)
        launches.append(Launch(
            kern.partial_sum_kernel, (cdiv(N, settings.sum_cols), len(sums)), ("dw_part", "db_part"), (programs, N),
            (optional_output("dw", (N,), _dtype(weight, "float32"), weight is not None),
             optional_output("db", (N,), _dtype(bias, "float32"), bias is not None)),
            {"BLOCK": settings.sum_cols, "ROWS": 32, "HAS_W": weight is not None, "HAS_B": bias is not None}, num_warps=4))
    results = ("dx", "dresidual", "dw" if weight else "dw_part", "db" if bias else "db_part")
    return Plan(tuple(launches), results, dense=(hx, "weight", "dy", "dh", "seed"))
