"""cross_entropy: argument checks and launch plans (kernels.py beside it). logits row-major
[..., V], seen as [T, V] with T the product of the leading dims (targets [...], as [T])."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

from ato_core import checks
from . import kernels as kern
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, next_pow2, numel, optional_output
from ato_core.target import Target

MAX_V = 262144
REDUCTIONS = ("none", "sum", "mean")
class Settings(NamedTuple):
    """Launch settings of the forward kernel: programs per SM of its persistent grid with the
    gradient and for the loss alone, the vocabulary piece per loop step (BLOCK_V), warps, and
    each thread's contiguous run in the log-sum-exp (VEC; BLOCK_V and VEC powers of 2). The
    loss alone shares the last three, so that it is bitwise the same whether or not the
    gradient is computed (the grid only decides which program takes a row). The backward
    (a scaling pass) takes BLOCK_V and warps from here too."""

    programs_per_sm: float
    loss_programs_per_sm: float
    block_v: int
    warps: int
    vec: int


# Swept on an H100 (benchmarks/tools/ops_sweep.py --ce; results index: cross_entropy-sweep): with
# the gradient, few rows in flight, for L2 (see the kernel); the loss alone reads a row once.
SETTINGS = Settings(1, 2, 16384, 32, 16)


def _block_v(V: int, target: Target, settings: Settings) -> int:
    return min(max(next_pow2(V), 16), 64 if target.interpret else settings.block_v)


def check_cross_entropy(logits: ArraySpec, targets: ArraySpec, ignore_index, reduction, label_smoothing,
                        z_loss=0.0, softcap=None, return_z_loss=False) -> None:
    if logits.ndim < 1:
        raise ValueError("logits: expected at least 1 dimension [..., V], got a scalar")
    checks.check_float("logits", logits, float64=True)
    checks.check_int("targets", targets)
    checks.check_same_device(("logits", "targets"), (logits, targets))
    checks.check_shape("targets", targets, tuple(logits.shape[:-1]), "logits' shape without its last (class) axis")
    T, V = rows(logits)
    checks.check_range(f"logits.shape[{logits.ndim - 1}] (V)", V, 1, MAX_V)
    check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss)


def check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss) -> None:
    """The options of cross_entropy (and of linear_cross_entropy, which takes the same)."""
    if not (isinstance(ignore_index, int) and not isinstance(ignore_index, bool)):
        raise TypeError(f"ignore_index: expected an int, got {type(ignore_index).__name__}")
    checks.check_choice("reduction", reduction, REDUCTIONS)
    if not (isinstance(label_smoothing, (int, float)) and not isinstance(label_smoothing, bool)
            and 0.0 <= label_smoothing <= 1.0):
        raise ValueError(f"label_smoothing: expected a float in [0, 1], got {label_smoothing!r}")
    if not (isinstance(z_loss, (int, float)) and not isinstance(z_loss, bool) and 0.0 <= z_loss < math.inf):
        raise ValueError(f"z_loss: expected a finite float >= 0, got {z_loss!r}")
    checks.check_softcap(softcap)
    checks.check_bool("return_z_loss", return_z_loss)


def check_target_values(targets, V: int, ignore_index: int) -> None:
    """Targets that are not ignore_index must lie in [0, V). ``targets``: an integer NumPy
    array. The adapters check the values where they are on the host already: on a GPU that
    would cost a device-to-host synchronisation every call, and under jax.jit the values
    are unknown; there the kernels give such a row a NaN loss and gradient instead of
    reading out of bounds."""
    import numpy as np

    t = np.asarray(targets)
    bad = (t != ignore_index) & ((t < 0) | (t >= V))
    if bad.any():
        raise ValueError(f"targets: expected values in [0, {V}) or ignore_index={ignore_index}, got {int(t[bad][0])}")


def rows(logits: ArraySpec):
    """(T, V): logits [..., V] as T rows of V."""
    return numel(logits.shape[:-1]), logits.shape[-1]


def _programs(T: int, grad: bool, target: Target, settings: Settings) -> int:
    """Persistent grid of the forward (with the gradient: few rows in flight, one per SM, so
    that most of a row is still in L2 when its program reads it the second time; see
    kernels.py)."""
    per_sm = settings.programs_per_sm if grad else settings.loss_programs_per_sm
    return min(T, max(1, round(target.num_sms * per_sm)))  # (none for no rows)


@cached_plan
def forward_plan(logits: ArraySpec, targets: ArraySpec, *, ignore_index: int, reduction: str,
                 label_smoothing: float, grad: bool, target: Target, z_loss: float = 0.0,
                 softcap: Optional[float] = None, return_z_loss: bool = False,
                 settings: Optional[Settings] = None) -> Plan:
    """Inputs: logits, targets. Results: loss (targets' shape, fp32, for "none", else a scalar), dlogits
    (with ``grad``: the gradient for dloss = 1, logits' shape and dtype; else a dummy), z_loss
    (with ``return_z_loss``: the z-loss term, reduced as the loss; else a dummy).
    ``settings``: default SETTINGS."""
    settings = settings or SETTINGS
    check_cross_entropy(logits, targets, ignore_index, reduction, label_smoothing, z_loss, softcap, return_z_loss)
    zout = return_z_loss
    acc = checks.acc_dtype(logits.dtype)  # the loss: float64 for float64 logits, else float32
    T, V = rows(logits)
    mean = reduction == "mean"
    launches = []
    if mean:
        launches.append(Launch(kern.ce_count_kernel, (1,), ("targets",), (T, int(ignore_index)),
                               (Buffer("count", (1,), "float32"),), {"BLOCK": 1024}, num_warps=4))
    block_v = _block_v(V, target, settings)
    launches.append(Launch(
        kern.ce_fwd_kernel, (_programs(T, grad, target, settings),), ("logits", "targets", "count" if mean else "targets"),
        (T, V, int(ignore_index), float(label_smoothing), float(z_loss), float(softcap or 1.0),
         1.0 / float(softcap or 1.0)),
        (Buffer("row_loss", tuple(targets.shape), acc),
         optional_output("dlogits", tuple(logits.shape), logits.dtype, grad),
         optional_output("row_z", tuple(targets.shape), acc, zout)),
        {"BLOCK_V": block_v, "VEC": min(settings.vec, block_v), "SMOOTH": label_smoothing > 0, "MEAN": mean,
         "GRAD": grad, "ALIGN": alignment(V), "ZLOSS": z_loss > 0, "ZOUT": zout, "SOFTCAP": softcap is not None},
        num_warps=settings.warps))
    results = ["row_loss", "dlogits", "row_z" if zout else None]
    if reduction != "none":
        for i in (0, 2) if zout else (0,):
            out = ("total", None, "z_total")[i]
            launches.append(Launch(kern.ce_reduce_kernel, (1,), (results[i], "count" if mean else results[i]), (T,),
                                   (Buffer(out, (), acc),), {"BLOCK": 1024, "MEAN": mean}, num_warps=4))
            results[i] = out
    if results[2] is None:  # not returned: a small stand-in (torch.compile copies a result listed twice)
        results[2] = results[0]
    return Plan(tuple(launches), tuple(results), dense=("logits", "targets"))


def in_place(dtype: str) -> bool:
    """Whether the backward scales the forward's gradient in place (one backward per forward):
    yes, but for float64 logits, where it writes a new array so that gradcheck's repeated
    backwards see the forward's gradient each time."""
    return dtype != "float64"


@cached_plan
def backward_plan(dlogits: ArraySpec, dloss: ArraySpec, *, target: Target, settings: Optional[Settings] = None) -> Plan:
    """Inputs: dlogits (the forward's gradient for dloss = 1), dloss (the targets' shape for
    reduction "none", else a scalar). Result: dlogits * dloss, written in place over dlogits
    (:func:`in_place`). ``settings``: default SETTINGS."""
    settings = settings or SETTINGS
    T, V = rows(dlogits)
    inplace = in_place(dlogits.dtype)
    launch = Launch(kern.ce_bwd_kernel, (T,), ("dlogits", "dloss"), (V,),
                    (Buffer("scaled", tuple(dlogits.shape), dlogits.dtype, alias="dlogits" if inplace else None),),
                    {"BLOCK_V": _block_v(V, target, settings), "PER_ROW": dloss.ndim >= 1, "ALIGN": alignment(V),
                     "INPLACE": inplace},
                    num_warps=settings.warps)
    return Plan((launch,), ("scaled",), dense=("dloss",))
