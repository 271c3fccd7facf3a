"""cross_entropy: argument checks and launch plans (kernels: ato_core/kernels/cross_entropy.py;
reference: ato_core/reference/cross_entropy.py). logits row-major [T, V]."""

from __future__ import annotations

from . import checks
from .kernels import cross_entropy as kern
from .launch import ArraySpec, Buffer, Launch, Plan, cached_plan, next_pow2
from .target import Target

MAX_V = 262144
REDUCTIONS = ("none", "sum", "mean")
INT_DTYPES = ("int32", "int64")
# Vocabulary piece per loop step and warps of the per-row kernels (compiled). Swept on an
# H100 (benchmarks/ops_sweep.py, T8192 V128256 bf16 loss+grad): 2048 x 8 warps 2760 us,
# 4096 x 8 2924 us, 8192 x 16 2935 us, 16384 x 16 3307 us.
BLOCK_V = 2048
WARPS = 8


def _block_v(V: int, target: Target) -> int:
    return min(max(next_pow2(V), 16), 64 if target.interpret else BLOCK_V)


def check_cross_entropy(logits: ArraySpec, targets: ArraySpec, ignore_index, reduction, label_smoothing) -> None:
    checks.check_rank("logits", logits, 2, "[T, V]")
    checks.check_float("logits", logits)
    checks.check_rank("targets", targets, 1, "[T]")
    if targets.dtype not in INT_DTYPES:
        raise TypeError(f"targets: expected an integer dtype in {INT_DTYPES}, got {targets.dtype}")
    checks.check_same_device(("logits", "targets"), (logits, targets))
    T, V = logits.shape
    checks.check_dim("targets", targets, 0, T, "T, the rows of logits")
    checks.check_range("logits.shape[0] (T)", T, 1)
    checks.check_range("logits.shape[1] (V)", V, 1, MAX_V)
    if not (isinstance(ignore_index, int) and not isinstance(ignore_index, bool)):
        raise TypeError(f"ignore_index: expected an int, got {type(ignore_index).__name__}")
    checks.check_choice("reduction", reduction, REDUCTIONS)
    if not (isinstance(label_smoothing, (int, float)) and not isinstance(label_smoothing, bool)
            and 0.0 <= label_smoothing <= 1.0):
        raise ValueError(f"label_smoothing: expected a float in [0, 1], got {label_smoothing!r}")


def check_target_values(targets, V: int, ignore_index: int) -> None:
    """Targets that are not ignore_index must lie in [0, V). ``targets``: an integer NumPy
    array (the adapters pass the values where they can see them; under jax.jit they cannot,
    and the kernels give such a row NaN instead of reading out of bounds)."""
    import numpy as np

    t = np.asarray(targets)
    bad = (t != ignore_index) & ((t < 0) | (t >= V))
    if bad.any():
        raise ValueError(f"targets: expected values in [0, {V}) or ignore_index={ignore_index}, got {int(t[bad][0])}")


@cached_plan
def forward_plan(logits: ArraySpec, targets: ArraySpec, *, ignore_index: int, reduction: str,
                 label_smoothing: float, target: Target) -> Plan:
    """Inputs: logits, targets. Results: loss ([T], or [] when reduced), lse [T], count [1]
    (targets not ignored, fp32)."""
    check_cross_entropy(logits, targets, ignore_index, reduction, label_smoothing)
    T, V = logits.shape
    fwd = Launch(kern.ce_fwd_kernel, (T,), ("logits", "targets"), (T, V, int(ignore_index), float(label_smoothing)),
                 (Buffer("row_loss", (T,), "float32"), Buffer("lse", (T,), "float32")),
                 {"BLOCK_V": _block_v(V, target), "SMOOTH": label_smoothing > 0}, num_warps=WARPS)
    red = Launch(kern.ce_reduce_kernel, (1,), ("row_loss", "targets"), (T, int(ignore_index)),
                 (Buffer("total", (), "float32"), Buffer("count", (1,), "float32")),
                 {"BLOCK": 1024, "MEAN": reduction == "mean"}, num_warps=4)
    loss = "row_loss" if reduction == "none" else "total"
    return Plan((fwd, red), (loss, "lse", "count"), dense=("logits", "targets"))


@cached_plan
def backward_plan(logits: ArraySpec, targets: ArraySpec, *, ignore_index: int, reduction: str,
                  label_smoothing: float, target: Target) -> Plan:
    """Inputs: logits, targets, lse, dloss ([T] or []), count. Results: dlogits (logits'
    shape and dtype)."""
    T, V = logits.shape
    launch = Launch(kern.ce_bwd_kernel, (T,), ("logits", "targets", "lse", "dloss", "count"),
                    (T, V, int(ignore_index), float(label_smoothing)),
                    (Buffer("dlogits", (T, V), logits.dtype),),
                    {"BLOCK_V": _block_v(V, target), "REDUCTION": REDUCTIONS.index(reduction)}, num_warps=WARPS)
    return Plan((launch,), ("dlogits",), dense=("logits", "targets", "dloss"))
