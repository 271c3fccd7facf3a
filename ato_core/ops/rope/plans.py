"""rope: argument checks and launch plans (kernels.py beside it). q, k row-major [B, H, N, D]."""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ato_core import checks
from . import kernels as kern
from ato_core.launch import ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2
from ato_core.target import Target

class Settings(NamedTuple):
    """A program's positions (block_n, at most), the elements of q or k it loads at once (a
    tile: HEADS heads x block_n positions x D), the tiles it rotates with one load of cos and
    sin (0: every head of q and k), and its warps (GPU)."""

    block_n: int
    elements: int
    tiles: int
    warps: int


# Swept on an H100 (benchmarks/tools/ops_sweep.py --fwd; results index: transformer_ops-fwd-sweep):
# 16 positions x 2 heads (of D128), one tile per program, 8 warps.
SETTINGS = Settings(16, 4096, 1, 8)


def check_rope(q: ArraySpec, k: ArraySpec, cos: ArraySpec, sin: ArraySpec, positions: Optional[ArraySpec],
               interleaved) -> None:
    checks.check_rank("q", q, 4, "[B, Hq, N, D]")
    checks.check_rank("k", k, 4, "[B, Hkv, N, D]")
    for name, spec in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        checks.check_float(name, spec, float64=True)
    checks.check_same_dtype(("q", "k"), (q, k))
    checks.check_same_device(("q", "k", "cos", "sin"), (q, k, cos, sin))
    B, _, N, D = q.shape
    checks.check_dim("k", k, 0, B, "B, as in q")
    checks.check_dim("k", k, 2, N, "N, as in q")
    checks.check_dim("k", k, 3, D, "D, as in q")
    if D % 2:
        raise ValueError(f"q: expected an even head size D (pairs are rotated), got D={D}")
    checks.check_rank("cos", cos, 2, "[max_positions, D/2] or [max_positions, D]")
    if cos.shape[1] not in (D // 2, D):
        raise ValueError(f"cos: expected [max_positions, D/2] or [max_positions, D] with D={D}, got shape "
                         f"{tuple(cos.shape)}")
    checks.check_shape("sin", sin, tuple(cos.shape), "the shape of cos")
    if positions is not None:
        checks.check_int("positions", positions)
        checks.check_shape("positions", positions, (B, N), "[B, N]")
        checks.check_same_device(("q", "positions"), (q, positions))
    elif N > cos.shape[0]:
        raise ValueError(f"cos: expected at least N={N} positions (rows) when positions is None, got {cos.shape[0]}")
    checks.check_bool("interleaved", interleaved)


def table(cos: ArraySpec, D: int, interleaved: bool) -> Tuple[int, int]:
    """(row width, column step) where pair i reads its cos and sin. A [P, D/2] table holds
    pair i at column i. A [P, D] table holds each pair's value at the pair's first element,
    as the full-width tables are built: column i for (x[i], x[i + D/2]) (cat(c, c), Hugging
    Face's LLaMA), column 2i when interleaved (c repeated element-wise, GPT-J's). The other
    half is not read (nor checked)."""
    full = cos.shape[1] == D and D > 0
    return cos.shape[1], (2 if full and interleaved else 1)


@cached_plan
def plan(q: ArraySpec, k: ArraySpec, cos: ArraySpec, sin: ArraySpec, positions: Optional[ArraySpec], *,
         interleaved: bool, inverse: bool, target: Target, settings: Optional[Settings] = None) -> Plan:
    """Inputs: q, k, cos, sin, positions. Results: q_rot, k_rot (the inverse rotation with
    ``inverse``: the backward, applied to the cotangents). ``settings``: default SETTINGS."""
    settings = settings or SETTINGS
    check_rope(q, k, cos, sin, positions, interleaved)
    B, Hq, N, D = q.shape
    Hkv = k.shape[1]
    half = D // 2
    width, step = table(cos, D, interleaved)
    block_i = max(next_pow2(half), 16)
    # The interpreter takes 4 positions and tiles of 4 heads, two tiles per program: several
    # position blocks, heads masked off in a tile (Hkv < 4), the loop over tiles and q and k
    # tiles in one program.
    block_n = min(4 if target.interpret else settings.block_n, next_pow2(N))
    fit = max(settings.elements // (block_n * 2 * block_i), 1)
    heads = 4 if target.interpret else min(1 << (fit.bit_length() - 1), next_pow2(max(Hq, Hkv)))  # powers of 2
    tiles = cdiv(Hq, heads) + cdiv(Hkv, heads)
    per_program = 2 if target.interpret else (settings.tiles or tiles)
    per_program = max(per_program, cdiv(tiles, 65535))  # grid axis 1 holds at most 65535
    # (an empty q launches no program)
    checks.check_range("B * cdiv(N, BLOCK_N) (q's position blocks, grid axis 0)", B * cdiv(N, block_n), 0, 2 ** 31 - 1)
    launch = Launch(
        kern.rope_kernel, (B * cdiv(N, block_n) if D else 0, cdiv(tiles, per_program)),
        ("q", "k", "cos", "sin", "positions" if positions is not None else "cos"),
        (N, Hq, Hkv, D, cos.shape[0], width, per_program),
        (Buffer("q_rot", tuple(q.shape), q.dtype), Buffer("k_rot", tuple(k.shape), k.dtype)),
        {"BLOCK_N": block_n, "BLOCK_I": block_i, "HEADS": heads, "HAS_POS": positions is not None,
         "INTERLEAVED": interleaved, "SIGN": -1.0 if inverse else 1.0, "ALIGN": alignment(D), "TABLE_STEP": step,
         "TABLE_ALIGN": alignment(width)},
        num_warps=settings.warps,
    )
    return Plan((launch,), ("q_rot", "k_rot"), dense=("q", "k", "cos", "sin", "positions"))
