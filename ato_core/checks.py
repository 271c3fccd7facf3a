"""Argument checks shared by every op. Each raises ValueError or TypeError naming the
argument, what was expected and what was given; they read only ArraySpecs."""

from __future__ import annotations

import math
from typing import Sequence

from .launch import FLOAT_DTYPES, ArraySpec


def check_float(name: str, spec: ArraySpec, float64: bool = False) -> None:
    """A float dtype of FLOAT_DTYPES, or also float64 with ``float64`` (the row ops)."""
    allowed = (*FLOAT_DTYPES, "float64") if float64 else FLOAT_DTYPES
    if spec.dtype not in allowed:
        raise TypeError(f"{name}: expected a floating dtype in {allowed}, got {spec.dtype}")


def acc_dtype(dtype: str) -> str:
    """The accumulation dtype of a row op: float64 for float64 inputs, else float32."""
    return "float64" if dtype == "float64" else "float32"


INT_DTYPES = ("int32", "int64")


def check_int(name: str, spec: ArraySpec) -> None:
    if spec.dtype not in INT_DTYPES:
        raise TypeError(f"{name}: expected an integer dtype in {INT_DTYPES}, got {spec.dtype}")


def check_rank(name: str, spec: ArraySpec, rank: int, layout: str) -> None:
    if spec.ndim != rank:
        raise ValueError(f"{name}: expected rank {rank} ({layout}), got shape {tuple(spec.shape)}")


def check_same_dtype(names: Sequence[str], specs: Sequence[ArraySpec]) -> None:
    first = specs[0].dtype
    for name, spec in zip(names[1:], specs[1:]):
        if spec.dtype != first:
            raise TypeError(f"{name}: expected dtype {first} (the dtype of {names[0]}), got {spec.dtype}")


def check_same_device(names: Sequence[str], specs: Sequence[ArraySpec]) -> None:
    first = specs[0].device
    for name, spec in zip(names[1:], specs[1:]):
        if spec.device != first:
            raise ValueError(f"{name}: expected device {first} (the device of {names[0]}), got {spec.device}")


def check_dim(name: str, spec: ArraySpec, axis: int, expected: int, what: str) -> None:
    if spec.shape[axis] != expected:
        raise ValueError(f"{name}: expected size {expected} on axis {axis} ({what}), got shape {tuple(spec.shape)}")


def check_shape(name: str, spec: ArraySpec, expected: Sequence[int], layout: str) -> None:
    if tuple(spec.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {tuple(expected)} ({layout}), got {tuple(spec.shape)}")


def check_range(name: str, value: int, lo: int, hi: int | None = None) -> None:
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: expected {bound}, got {value}")


def check_choice(name: str, value, choices: Sequence) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {tuple(choices)}, got {value!r}")


def check_softcap(value) -> None:
    """A score or logit soft-cap: None or a finite float > 0 (cross_entropy, flash_attention)."""
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                  and 0.0 < value < math.inf):
        raise ValueError(f"softcap: expected None or a finite float > 0, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


def check_heads(module: str, hidden_size: int, num_heads: int, num_kv_heads) -> tuple:
    """A grouped-query layer's head counts (``module`` names it): hidden_size a multiple of
    num_heads, num_kv_heads (None: num_heads) a divisor of it. Returns (num_kv_heads,
    head_dim)."""
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads < 1 or hidden_size % num_heads:
        raise ValueError(f"{module}: hidden_size: expected a multiple of num_heads={num_heads}, got {hidden_size}")
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"{module}: num_kv_heads: expected a divisor of num_heads={num_heads}, got {num_kv_heads}")
    return num_kv_heads, hidden_size // num_heads


def check_dropout_p(name: str, p) -> None:
    """A dropout probability: a Python float in [0, 1)."""
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p < 1.0):
        raise ValueError(f"{name}: expected a float in [0, 1), got {p!r}")


def check_seed(seed) -> None:
    """A static dropout seed: an int in [0, 2**31), or None when an array carries it."""
    if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2 ** 31):
        raise ValueError(f"seed: expected an int in [0, 2**31), a 0-d integer array or a random key, got {seed!r}")


def seed_words(seed: ArraySpec, like_name: str, like: ArraySpec) -> int:
    """How a kernel reads a seed array (SEED_WORDS of triton_helpers.dropout_seed): 1 for a 0-d
    int32/int64/uint32, 2 for a JAX key's data (uint32 or int32 [2]); checks it (on ``like``'s
    device)."""
    if seed.dtype not in ("int32", "int64", "uint32"):
        raise TypeError(f"seed: expected an int, or an array of dtype int32, int64 or uint32, got {seed.dtype}")
    if seed.shape == ():
        words = 1
    elif tuple(seed.shape) == (2,) and seed.dtype != "int64":
        words = 2
    else:
        raise ValueError(f"seed: expected a 0-d integer array or a random key's data (uint32 [2]), got shape "
                         f"{tuple(seed.shape)} of {seed.dtype}")
    check_same_device((like_name, "seed"), (like, seed))
    return words
