"""rope: argument checks and launch plans (kernels: ato_core/kernels/rope.py; reference:
ato_core/reference/rope.py). q, k row-major [B, H, N, D]."""

from __future__ import annotations

from typing import Optional

from . import checks
from .kernels import rope as kern
from .launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2
from .target import Target

INT_DTYPES = ("int32", "int64")
# Elements of q or k per program (BLOCK_N positions x D) and its warps.
ROPE_ELEMENTS = 4096
ROPE_WARPS = 4


def check_rope(q: ArraySpec, k: ArraySpec, cos: ArraySpec, sin: ArraySpec, positions: Optional[ArraySpec],
               interleaved) -> None:
    checks.check_rank("q", q, 4, "[B, Hq, N, D]")
    checks.check_rank("k", k, 4, "[B, Hkv, N, D]")
    for name, spec in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        checks.check_float(name, spec)
    checks.check_same_dtype(("q", "k"), (q, k))
    checks.check_same_device(("q", "k", "cos", "sin"), (q, k, cos, sin))
    B, _, N, D = q.shape
    checks.check_dim("k", k, 0, B, "B, as in q")
    checks.check_dim("k", k, 2, N, "N, as in q")
    checks.check_dim("k", k, 3, D, "D, as in q")
    if D % 2:
        raise ValueError(f"q: expected an even head size D (pairs are rotated), got D={D}")
    checks.check_rank("cos", cos, 2, "[max_positions, D/2]")
    checks.check_dim("cos", cos, 1, D // 2, "D/2")
    checks.check_shape("sin", sin, tuple(cos.shape), "the shape of cos")
    if positions is not None:
        if positions.dtype not in INT_DTYPES:
            raise TypeError(f"positions: expected an integer dtype in {INT_DTYPES}, got {positions.dtype}")
        checks.check_shape("positions", positions, (B, N), "[B, N]")
    elif N > cos.shape[0]:
        raise ValueError(f"cos: expected at least N={N} positions (rows) when positions is None, got {cos.shape[0]}")
    checks.check_bool("interleaved", interleaved)


@cached_plan
def plan(q: ArraySpec, k: ArraySpec, cos: ArraySpec, sin: ArraySpec, positions: Optional[ArraySpec], *,
         interleaved: bool, inverse: bool, target: Target) -> Plan:
    """Inputs: q, k, cos, sin, positions. Results: q_rot, k_rot (the inverse rotation with
    ``inverse``: the backward, applied to the cotangents)."""
    check_rope(q, k, cos, sin, positions, interleaved)
    B, Hq, N, D = q.shape
    Hkv = k.shape[1]
    half = D // 2
    block_i = max(next_pow2(half), 16)
    # BLOCK_N positions of one head per program: BLOCK_N * D contiguous elements (8 KB of bf16
    # at D = 128), where one program per position and all heads read D-element pieces a head
    # apart (N * D elements). The interpreter takes 4 positions, to exercise several blocks.
    block_n = 4 if target.interpret else max(1, ROPE_ELEMENTS // (2 * block_i))
    if not target.interpret:  # grid axis 1 (position blocks) holds at most 65535
        checks.check_range("q.shape[2] (N)", N, 1, 65535 * block_n)
    launch = Launch(
        kern.rope_kernel, (B * (Hq + Hkv), cdiv(N, block_n)),  # axis 1 holds at most 65535
        ("q", "k", "cos", "sin", "positions" if positions is not None else "cos"),
        (N, Hq, Hkv, D, cos.shape[0]),
        (Buffer("q_rot", tuple(q.shape), q.dtype), Buffer("k_rot", tuple(k.shape), k.dtype)),
        {"BLOCK_N": block_n, "BLOCK_I": block_i, "HAS_POS": positions is not None, "INTERLEAVED": interleaved,
         "SIGN": -1.0 if inverse else 1.0, "ALIGN": alignment(D)},
        num_warps=ROPE_WARPS,
    )
    return Plan((launch,), ("q_rot", "k_rot"), dense=("q", "k", "cos", "sin", "positions"))
