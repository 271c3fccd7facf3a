"""based_attention, based_step and taylor_feature_map: argument checks and launch plans.

The scan over segments is linear_attention's (scan; bidirectional: its segment split too);
what is decided here: the padded feature dimension DP, the causal segment length, the tiles
of the state passes (STATE) and of the block kernels (BLOCKS) and the dot operands.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional, Tuple

from ato_core import checks
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, cached_plan, cdiv, next_pow2, numel,
                             optional_output, row_alignment)
from ato_core.layout import as_bhnd, bhnd_strides, laid_out
from ato_core.target import Target

from ..linear_attention.plans import (as_one_row, check_eps, check_qkv, check_state, dot_operands, f32, scan,
                                      segments, state_addressing, step_shaped)
from . import kernels as kern

MAX_FEATURE_DIM = 32
MAX_HEAD_DIM = 256


class StateSettings(NamedTuple):
    """The state passes (based_state_kernel, based_bwd_state_kernel): quadratic features per
    program (FT; its [FT, BV] state tile is held in registers), rows per step, warps,
    pipelining stages."""

    features: int = 128
    chunk: int = 64
    num_warps: int = 4
    num_stages: int = 1


STATE = StateSettings()
INTERPRETER_STATE = StateSettings(features=64, chunk=16, num_warps=4, num_stages=1)
# The causal state walks (based_state_walk_kernel, based_bwd_state_walk_kernel): the state
# pass and the scan in one program per (row tile, Dv tile, b*h) walking the whole sequence.
WALK = StateSettings(features=64, chunk=128, num_warps=4, num_stages=1)
INTERPRETER_WALK = StateSettings(features=64, chunk=16, num_warps=4, num_stages=1)


class Waves(NamedTuple):
    """Programs per SM from which each direction's causal pass walks (else segments and a
    scan): the forward's walk is the faster from about one (H100, d 16: B2 H16 N4096, 128
    programs, 142 against 150 us; B4, 221 against 276), the backward's from two."""

    forward: float = 0.9
    backward: float = 2.0


WALK_WAVES = Waves()
# The state passes' Dv tile.
STATE_BV = 64
# The block kernels' Dv tile: fp32 elements of [DP*DP, BV] (tf32 operands, fp16 inputs: half).
BLOCK_TILE_ELEMS = 16384


class BlockSettings(NamedTuple):
    """The block kernels (output, dq, dk/dv): rows per block (BM), causal segment length in
    rows (a multiple of BM: each row meets its segment's start state and the segment's rows
    before it), quadratic features per state tile (FT), warps, pipelining stages, and a cap
    on registers a thread (Config.block_maxnreg) or None."""

    rows: int = 64
    seg_len: int = 256
    features: int = 64
    num_warps: int = 4
    num_stages: int = 2
    maxnreg: Optional[int] = None


# 168 registers: 3 programs an SM instead of 2 (230-255 registers uncapped). H100, d16 Dv64 bf16
# causal B8 H16 N4096: output pass 176 against 212 us, dq 246 against 287, dk/dv 368 against 398,
# same bits (NVIDIA_H100_80GB_HBM3-based-walk.txt section 5).
BLOCKS = BlockSettings(maxnreg=168)
# The interpreter: small blocks and segments, so short test sequences cross both.
INTERPRETER_BLOCKS = BlockSettings(rows=16, seg_len=64, features=64, num_warps=4, num_stages=1)


def feature_tile(features: int, DP: int) -> int:
    """Quadratic features per state tile: ``features``, within [DP, 1024 // DP]. The cap:
    at DP 32, 64-feature tiles miscompile the dq kernel (Triton 3.6, sm_90: shared-memory
    reads out of range, found by compute-sanitizer); 32 pass (results index: Based)."""
    return max(DP, min(features, 1024 // DP))


def features(d: int) -> int:
    """F = 1 + d + d^2, the size of the Taylor feature map of d-dimensional inputs."""
    return 1 + d + d * d


def pairs(d: int) -> int:
    """The packed layout's quadratic rows (kernels._pair_weight): d (d // 2 + 1)."""
    return d * (d // 2 + 1)


def packed_features(d: int) -> int:
    """Fp, the rows of a packed state: 1 + d + pairs(d) (161 for d 16: F is 273)."""
    return 1 + d + pairs(d)


def quad_tiles(d: int, ft: int) -> Tuple[int, int]:
    """The packed quadratic rows in tiles: (tiles of ft, the size of one more tile for the
    rest: a power of two >= 16, at most ft; 0 when none is left)."""
    n, rest = divmod(pairs(d), ft)
    return n, (max(16, next_pow2(rest)) if rest else 0)


@dataclasses.dataclass(frozen=True)
class Config:
    B: int
    H: int
    N: int
    d: int
    Dv: int
    F: int
    Fp: int          # rows of the packed states the chunked passes use (kernels._pair_weight)
    DP: int          # d padded to a power of two >= 16 (the dot's smallest K)
    BV: int          # Dv tile of the block kernels
    nvt: int         # their Dv tiles
    nseg: int        # segments of the state passes
    seg_len: int
    state: StateSettings
    blocks: BlockSettings
    dot_bf16: bool
    precision: str
    walk: Optional[StateSettings] = None   # the causal passes' state walk, when taken

    @property
    def state_ft(self) -> int:
        """Quadratic features per state-pass program: the settings', at most the packed rows."""
        return min(self.state.features, max(16, next_pow2(pairs(self.d))))

    @property
    def state_tiles(self) -> Tuple[int, int]:
        return quad_tiles(self.d, self.state_ft)

    @property
    def state_bv(self) -> int:
        return min(max(16, next_pow2(self.Dv)), STATE_BV)

    @property
    def state_grid(self) -> Tuple[int, int, int]:
        """(quadratic tiles * Dv tiles, segments, B*H): see kernels._state_program."""
        n, tt = self.state_tiles
        tiles = (n + (tt > 0)) * cdiv(self.Dv, self.state_bv)
        return tiles, self.nseg, self.B * self.H

    @property
    def state_args(self) -> Tuple[int, ...]:
        """The state passes' scalars before c and the strides: H, N, seg_len, d, Dv, Fp, nvt,
        nmain."""
        return self.H, self.N, self.seg_len, self.d, self.Dv, self.Fp, cdiv(self.Dv, self.state_bv), self.state_tiles[0]

    @property
    def state_constexprs(self) -> dict:
        return {"DP": self.DP, "BV": self.state_bv, "FT": self.state_ft, "TT": self.state_tiles[1], "CHUNK": self.state.chunk,
                "DOT_BF16": self.dot_bf16, "PRECISION": self.precision}

    @property
    def walk_ft(self) -> int:
        return min(self.walk.features, max(16, next_pow2(pairs(self.d))))

    @property
    def walk_grid(self) -> Tuple[int, int]:
        """(row tiles * Dv tiles, B*H): quadratic tiles, then the constant and linear rows."""
        n, tt = quad_tiles(self.d, self.walk_ft)
        return (n + (tt > 0) + 1) * cdiv(self.Dv, self.state_bv), self.B * self.H

    @property
    def walk_args(self) -> Tuple[int, ...]:
        """The walks' scalars before c: H, N, seg_len, d, Dv, Fp, nvt, nmain."""
        return (self.H, self.N, self.seg_len, self.d, self.Dv, self.Fp, cdiv(self.Dv, self.state_bv),
                quad_tiles(self.d, self.walk_ft)[0])

    @property
    def walk_constexprs(self) -> dict:
        return {"DP": self.DP, "BV": self.state_bv, "FT": self.walk_ft, "TT": quad_tiles(self.d, self.walk_ft)[1],
                "CHUNK": self.walk.chunk, "DOT_BF16": self.dot_bf16, "PRECISION": self.precision}

    @property
    def block_constexprs(self) -> dict:
        ft = feature_tile(self.blocks.features, self.DP)
        n, tt = quad_tiles(self.d, ft)
        return {"DP": self.DP, "BV": self.BV, "BM": self.blocks.rows, "FT": ft, "NMAIN": n, "TT": tt,
                "DOT_BF16": self.dot_bf16, "PRECISION": self.precision}

    @property
    def block_maxnreg(self) -> Optional[int]:
        """The block kernels' register cap: the settings' for bf16 dots at d <= 16, where it
        was measured (elsewhere the cap spills more: fp16, fp32 and d 32 take none)."""
        return self.blocks.maxnreg if self.dot_bf16 and self.DP == 16 else None

    @property
    def nblocks(self) -> int:
        return cdiv(self.N, self.blocks.rows)

    def start_states(self, row0: str) -> dict:
        """The causal scan's start states: in the dots' operand type where that is bf16 (the
        block kernels read them in it: half the bytes, the same bits), with their row 0, which
        phi's constant meets elementwise, in fp32 under the name ``row0``; else fp32."""
        return {"start_dtype": "bfloat16", "row0": row0} if self.dot_bf16 else {}

    def row0(self, causal: bool, states: str, row0: str) -> Tuple[str, int]:
        """(array, elements between states) where the block kernels read row 0 of ``states``."""
        if causal and self.dot_bf16:
            return row0, self.Dv
        return states, self.Fp * self.Dv


def config(B: int, H: int, N: int, d: int, Dv: int, dtype: str, causal: bool, target: Target,
           blocks: Optional[BlockSettings] = None, backward: bool = False) -> Config:
    """The launch settings of the forward's passes (the backward's with ``backward``: the
    walk's choice differs, WALK_WAVES)."""
    DP = max(16, next_pow2(d))
    bf16, precision = dot_operands(dtype, N)
    elems = BLOCK_TILE_ELEMS if bf16 or precision == "ieee" else BLOCK_TILE_ELEMS // 2
    BV = min(max(16, next_pow2(Dv)), max(16, elems // (DP * DP)))
    state = INTERPRETER_STATE if target.interpret else STATE
    blocks = blocks or (INTERPRETER_BLOCKS if target.interpret else BLOCKS)
    if causal:
        seg_len = blocks.seg_len
        nseg = cdiv(N, seg_len)
    else:
        nseg, seg_len, _, _ = segments(B * H, N, state.chunk, causal, target)
    cfg = Config(B, H, N, d, Dv, features(d), packed_features(d), DP, BV, cdiv(Dv, BV), nseg, seg_len, state, blocks,
                 bf16, precision)
    if causal and nseg > 1:
        walk_cfg = dataclasses.replace(cfg, walk=INTERPRETER_WALK if target.interpret else WALK)
        waves = WALK_WAVES.backward if backward else WALK_WAVES.forward
        if math.prod(walk_cfg.walk_grid) >= waves * target.num_sms:
            return walk_cfg
    return cfg


def resolve_scale(scale, d: int) -> float:
    """The scale of s = scale q . k: 1/sqrt(d) by default; a positive finite float."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: expected None or a positive finite float, got {scale!r}")
    return float(scale)


def check_based(q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal: bool, scale, eps,
                initial_state=None, layout: str = "bhnd") -> Tuple[int, int, int, int, int]:
    """Validates the arguments of based_attention; returns (B, H, N, d, Dv)."""
    B, H, N, d, Dv = check_qkv(q, k, v, "d", MAX_FEATURE_DIM, layout=layout)
    checks.check_bool("causal", causal)
    resolve_scale(scale, d)
    check_eps(eps)
    if initial_state is not None:
        if not causal:
            raise ValueError("initial_state: expected None when causal=False (a bidirectional pass has no "
                             "preceding state), got a state")
        check_state("initial_state", initial_state, B, H, features(d), Dv, q.device, "F")
    return B, H, N, d, Dv


def _align(d: int, Dv: int, *arrays: ArraySpec) -> int:
    return row_alignment((d, Dv), arrays)


def _scalars(cfg: Config, scale) -> Tuple[float, float]:
    """(c, scale) as kernel scalars: c = sqrt(scale) scales the features."""
    s = resolve_scale(scale, cfg.d)
    return math.sqrt(s), s


@cached_plan
def forward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal: bool, scale, eps: float, initial_state,
                 target: Target, exact_state: bool = True, final: bool = True,
                 layout: str = "bhnd") -> Tuple[Plan, Config]:
    """Inputs: q, k, v (laid out as ``layout``; o too) and, with an initial state, init_S, init_z.
    ``final``: whether the caller returns the final state (without it a state walk skips
    the products' rests, which only the final state takes: kernels._walk).

    Results: o [B,H,N,Dv] (q's dtype); S_final [B,H,F,Dv], z_final [B,H,F] (fp32; causal
    without ``final`` the packed total [B,H,Fp,Dv], [B,H,Fp], which the caller does not
    return); the backward's residuals rden [B,H,N] (1/den), S_res, z_res (each segment's
    start state when causal, the total otherwise; packed, [B,H,nseg,Fp,Dv], kernels._pair_weight).
    """
    B, H, N, d, Dv = check_based(q, k, v, causal=causal, scale=scale, eps=eps, initial_state=initial_state,
                                 layout=layout)
    q, k, v = (as_bhnd(t, layout) for t in (q, k, v))
    cfg = config(B, H, N, d, Dv, q.dtype, causal, target)
    c, s = _scalars(cfg, scale)
    BH, Fp = B * H, cfg.Fp
    align = _align(d, Dv, q, k, v)
    init = "init" if initial_state is not None else None
    pack = (_pack(cfg, ("init_S", "init_z"), ("initp_S", "initp_z")),) if init else ()
    if cfg.walk:
        states = _walk(cfg, kern.based_state_walk_kernel, ("k", "v"), (c, *k.strides, *v.strides), "initp" if init
                       else None, ("S_start", "z_start", "Sp_final", "zp_final", "s0_start"),
                       {"ALIGN": align, "EXACT": exact_state and final})
    else:
        state = Launch(
            kern.based_state_kernel, cfg.state_grid, ("k", "v"), (*cfg.state_args, c, *k.strides, *v.strides),
            (f32("part_S", B, H, cfg.nseg, Fp, Dv), f32("part_z", B, H, cfg.nseg, Fp)),
            {"ALIGN": align, "EXACT": exact_state, **cfg.state_constexprs}, num_warps=cfg.state.num_warps,
            num_stages=cfg.state.num_stages,
        )
        states = (state, scan(B, H, Fp, Dv, cfg.nseg, "part", "initp" if init else None,
                              ("S_start", "z_start", "Sp_final", "zp_final"), reverse=False, causal=causal,
                              **cfg.start_states("s0_start")))
    res_S, res_z = ("S_start", "z_start") if causal else ("Sp_final", "zp_final")
    row0, row0_stride = cfg.row0(causal, res_S, "s0_start")
    o_shape = (B, H, N, Dv)
    out = Launch(
        kern.based_fwd_kernel, (BH, cfg.nblocks, cfg.nvt), ("q", "k", "v", res_S, row0, res_z),
        (H, N, cfg.seg_len, d, Dv, Fp, *state_addressing(cfg, causal), row0_stride, c, s, float(eps),
         *q.strides, *k.strides, *v.strides, *bhnd_strides(o_shape, layout)),
        (Buffer("o", laid_out(o_shape, layout), q.dtype), f32("rden", B, H, N)),
        {"CAUSAL": causal, "ALIGN": align, **cfg.block_constexprs}, num_warps=cfg.blocks.num_warps,
        num_stages=cfg.blocks.num_stages, maxnreg=cfg.block_maxnreg,
    )
    if final or not causal:  # (bidirectional: the packed total is a residual, not to be returned twice)
        # with an initial state the walk's total is from zero: unpack adds the public one to it
        parts = (("Sp_final", "zp_final"), 1) if cfg.walk else (("part_S", "part_z"), cfg.nseg)
        unpack = (_unpack(cfg, "Sp_final", "zp_final", *parts, init, ("S_final", "z_final"), reverse=False),)
        finals = ("S_final", "z_final")
    else:  # not returned: the packed total stands in
        unpack, finals = (), ("Sp_final", "zp_final")
    plan = Plan((*pack, *states, out, *unpack), ("o", *finals, "rden", res_S, res_z),
                dense=("init_S", "init_z"))
    return plan, cfg


def _walk(cfg: Config, kernel, inputs: Tuple[str, ...], scalars: tuple, init: Optional[str],
          out: Tuple[str, str, str, str, str], constexprs: dict) -> Tuple[Launch, Launch]:
    """A causal state walk (kernels._walk): the state pass and the scan in one launch, after
    based_finite_kernel's flags of x (inputs[0], strides scalars[1:5]). Writes ``out`` =
    (start states S, z, the total S, z from zero, row 0 of the start S), as ``scan`` names
    them; with ``init`` (a packed state) the start states add it."""
    B, H, Fp, Dv, nseg = cfg.B, cfg.H, cfg.Fp, cfg.Dv, cfg.nseg
    ss, zs, sf, zf, row0 = out
    x, x_strides = inputs[0], scalars[1:5]
    fin = f"{x}_finite"
    finite = Launch(kern.based_finite_kernel, (B * H, nseg), (x,), (H, cfg.N, cfg.seg_len, cfg.d, *x_strides),
                    (Buffer(fin, (B * H * nseg,), "int32"),),
                    {"DP": cfg.DP, "ROWS": min(next_pow2(cfg.seg_len), 256), "ALIGN": constexprs["ALIGN"]}, num_warps=4)
    start = cfg.start_states(row0)
    inputs = (*inputs, fin, f"{init}_S" if init else inputs[0], f"{init}_z" if init else inputs[0])
    outputs = (Buffer(ss, (B, H, nseg, Fp, Dv), start.get("start_dtype", "float32")), f32(zs, B, H, nseg, Fp),
               f32(sf, B, H, Fp, Dv), f32(zf, B, H, Fp),
               optional_output(row0, (B, H, nseg, Dv), "float32", bool(start)))
    return finite, Launch(kernel, cfg.walk_grid, inputs, (*cfg.walk_args, *scalars), outputs,
                          {**constexprs, **cfg.walk_constexprs, "HAS_INIT": init is not None, "ROW0": bool(start)},
                          num_warps=cfg.walk.num_warps, num_stages=cfg.walk.num_stages)


PACK_ROWS = 32


def _pack(cfg: Config, public: Tuple[str, str], packed: Tuple[str, str]) -> Launch:
    """The public state (S [B,H,F,Dv], z [B,H,F]) named ``public`` in the packed layout
    (kernels._pair_weight), fp32, named ``packed``."""
    B, H, Dv = cfg.B, cfg.H, cfg.Dv
    bv = min(max(16, next_pow2(Dv)), 64)
    return Launch(kern.based_pack_kernel, (B * H, cdiv(cfg.Fp, PACK_ROWS), cdiv(Dv, bv)), public,
                  (cfg.d, Dv, cfg.F, cfg.Fp), (f32(packed[0], B, H, cfg.Fp, Dv), f32(packed[1], B, H, cfg.Fp)),
                  {"R": PACK_ROWS, "BV": bv}, num_warps=4)


def _unpack(cfg: Config, total_S: str, total_z: str, partials: Tuple[str, str], nseg: int, init: Optional[str],
            out: Tuple[str, str], reverse: bool) -> Launch:
    """The public state ``out`` [B,H,F,Dv], [B,H,F] of the scan's packed total; with ``init``
    (public) summed again from the ``nseg`` packed partials (S, z names), in the scan's order."""
    B, H, Dv = cfg.B, cfg.H, cfg.Dv
    bv = min(max(16, next_pow2(Dv)), 64)
    inputs = (total_S, total_z, *partials, f"{init}_S" if init else total_S, f"{init}_z" if init else total_z)
    return Launch(kern.based_unpack_kernel, (B * H, cdiv(cfg.F, PACK_ROWS), cdiv(Dv, bv)), inputs,
                  (nseg, cfg.d, Dv, cfg.F, cfg.Fp), (f32(out[0], B, H, cfg.F, Dv), f32(out[1], B, H, cfg.F)),
                  {"HAS_INIT": init is not None, "REVERSE": reverse, "R": PACK_ROWS, "BV": bv},
                  num_warps=4)


def _tiled(name: str, spec: ArraySpec, cfg: Config) -> Tuple[Buffer, Tuple[Launch, ...], int]:
    """Where a kernel writes its Dv tile's part of a gradient of ``spec``'s shape: the buffer
    itself when there is one tile, else fp32 partials [tiles, ...] summed by one more launch.
    Returns (the buffer the kernel writes, the launches after it, elements between tiles)."""
    shape = tuple(spec.shape)
    if cfg.nvt == 1:
        return Buffer(name, shape, spec.dtype), (), 0
    n = numel(shape)
    block = 1024
    total = Launch(kern.based_sum_tiles_kernel, (cdiv(n, block),), (f"{name}_tiles",), (n, cfg.nvt),
                   (Buffer(name, shape, spec.dtype),), {"BLOCK": block}, num_warps=4)
    return f32(f"{name}_tiles", cfg.nvt, *shape), (total,), n


@cached_plan
def backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, causal: bool, scale, eps: float,
                  has_dfinal: bool, target: Target, public_res: bool = False, layout: str = "bhnd") -> Plan:
    """Inputs: q, k, v, o, do (laid out as ``layout``), the forward's rden, S_res, z_res
    (packed; with ``public_res`` a public state, packed here); with has_dfinal the
    cotangents dfinal_S, dfinal_z of the final state. Results: dq, dk, dv (input dtype and
    layout) and dS0 [B,H,F,Dv], dz0 [B,H,F] (fp32), the gradient of the initial state."""
    B, H, N, d, Dv = check_based(q, k, v, causal=causal, scale=scale, eps=eps, layout=layout)
    checks.check_shape("do", do, laid_out((B, H, N, Dv), layout), "the shape of the output")
    laid = {"q": q, "k": k}  # (as the caller lays them out: the gradients' buffers)
    q, k, v, do = (as_bhnd(t, layout) for t in (q, k, v, do))
    cfg = config(B, H, N, d, Dv, q.dtype, causal, target, backward=True)
    c, s = _scalars(cfg, scale)
    BH, Fp = B * H, cfg.Fp
    align = _align(d, Dv, q, k, v, do)
    o_strides = bhnd_strides((B, H, N, Dv), layout)
    rows = 64
    g = Launch(
        kern.based_bwd_g_kernel, (BH, cdiv(N, rows)), ("do", "o", "rden"),
        (N, Dv, *do.strides, *o_strides, H), (f32("g", B, H, N),),
        {"ROWS": rows, "BV": min(max(16, next_pow2(Dv)), 128), "ALIGN": align}, num_warps=4,
    )
    packs = (_pack(cfg, ("dfinal_S", "dfinal_z"), ("dfinalp_S", "dfinalp_z")),) if has_dfinal else ()
    res = ("S_res", "z_res")
    if public_res:
        res = ("Sp_res", "zp_res")
        packs += (_pack(cfg, ("S_res", "z_res"), res),)
    if cfg.walk:
        states = _walk(cfg, kern.based_bwd_state_walk_kernel, ("q", "do", "rden", "g"), (c, *q.strides, *do.strides),
                       "dfinalp" if has_dfinal else None, ("R_start", "r_start", "dS0p", "dz0p", "r0_start"),
                       {"ALIGN": align})
    else:
        state = Launch(
            kern.based_bwd_state_kernel, cfg.state_grid, ("q", "do", "rden", "g"),
            (*cfg.state_args, c, *q.strides, *do.strides),
            (f32("rpart_S", B, H, cfg.nseg, Fp, Dv), f32("rpart_z", B, H, cfg.nseg, Fp)),
            {"ALIGN": align, **cfg.state_constexprs}, num_warps=cfg.state.num_warps, num_stages=cfg.state.num_stages,
        )
        states = (state, scan(B, H, Fp, Dv, cfg.nseg, "rpart", "dfinalp" if has_dfinal else None,
                              ("R_start", "r_start", "dS0p", "dz0p"), reverse=True, causal=causal,
                              **cfg.start_states("r0_start")))
    R_S, R_z = ("R_start", "r_start") if causal else ("dS0p", "dz0p")
    row0, row0_stride = cfg.row0(causal, R_S, "r0_start")
    common = (H, N, cfg.seg_len, d, Dv, Fp, *state_addressing(cfg, causal))
    ce = {"CAUSAL": causal, "ALIGN": align, **cfg.block_constexprs}
    grid = (BH, cfg.nblocks, cfg.nvt)
    warps, stages = cfg.blocks.num_warps, cfg.blocks.num_stages
    dq_buf, dq_sum, dq_stride = _tiled("dq", laid["q"], cfg)
    dq = Launch(
        kern.based_bwd_dq_kernel, grid, ("q", "k", "v", "do", "rden", "g", *res),
        (*common, c, s, dq_stride, *q.strides, *k.strides, *v.strides, *do.strides, *bhnd_strides(q.shape, layout)),
        (dq_buf,), ce, num_warps=warps, num_stages=stages, maxnreg=cfg.block_maxnreg,
    )
    dk_buf, dk_sum, dk_stride = _tiled("dk", laid["k"], cfg)
    dkdv = Launch(
        kern.based_bwd_dkdv_kernel, grid, ("q", "k", "v", "do", "rden", "g", R_S, row0, R_z),
        (*common, row0_stride, c, s, dk_stride, *q.strides, *k.strides, *v.strides, *do.strides,
         *bhnd_strides(k.shape, layout), *bhnd_strides(v.shape, layout)),
        (dk_buf, Buffer("dv", laid_out(v.shape, layout), v.dtype)), ce, num_warps=warps, num_stages=stages,
        maxnreg=cfg.block_maxnreg,
    )
    parts = (("dS0p", "dz0p"), 1) if cfg.walk else (("rpart_S", "rpart_z"), cfg.nseg)
    dS0 = _unpack(cfg, "dS0p", "dz0p", *parts, "dfinal" if has_dfinal else None, ("dS0", "dz0"), reverse=True)
    return Plan((g, *packs, *states, dq, *dq_sum, dkdv, *dk_sum, dS0), ("dq", "dk", "dv", "dS0", "dz0"),
                dense=("rden", "S_res", "z_res", "dfinal_S", "dfinal_z"))


def check_step(q: ArraySpec, k: ArraySpec, v: ArraySpec, state, scale, eps) -> Tuple[int, int, int, int]:
    B, H, d, Dv = check_qkv(q, k, v, "d", MAX_FEATURE_DIM, step=True)
    resolve_scale(scale, d)
    check_eps(eps)
    check_state("state", state, B, H, features(d), Dv, q.device, "F")
    return B, H, d, Dv


# Dv tile of the decoding step: its [F, BV] state slice is read and written once, so smaller
# tiles give more programs to keep memory busy.
STEP_TILE_ELEMS = 8192


@cached_plan
def step_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, state, *, scale, eps: float, target: Target,
              grad: bool = False) -> Plan:
    """Inputs: q, k ([B,H,d]), v ([B,H,Dv]), state_S, state_z. Results: o [B,H,Dv], S1, z1
    (fp32), rden [B,H] and, with ``grad``, o32 (o in fp32; else a placeholder)."""
    B, H, d, Dv = check_step(q, k, v, state, scale, eps)
    DP, F = max(16, next_pow2(d)), features(d)
    BV = min(max(16, next_pow2(Dv)), max(16, STEP_TILE_ELEMS // (DP * DP)))
    launch = Launch(
        kern.based_step_kernel, (B * H, cdiv(Dv, BV)), ("q", "k", "v", "state_S", "state_z"),
        (H, d, Dv, F, math.sqrt(resolve_scale(scale, d)), float(eps), *q.strides, *k.strides, *v.strides),
        (Buffer("o", (B, H, Dv), q.dtype), f32("S1", B, H, F, Dv), f32("z1", B, H, F), f32("rden", B, H),
         optional_output("o32", (B, H, Dv), "float32", grad)),
        {"DP": DP, "BV": BV, "ALIGN": _align(d, Dv, q, k, v), "STORE_O32": grad}, num_warps=8,
    )
    return Plan((launch,), ("o", "S1", "z1", "rden", "o32"), dense=("state_S", "state_z"))


@cached_plan
def step_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, scale, eps: float,
                       target: Target) -> Plan:
    """The causal backward of a one-row sequence whose start state is the step's input state
    (as linear_attention_step's). Inputs: q, k, v, o (the forward's o32), do, rden, S_res,
    z_res, dfinal_S, dfinal_z. Results: dq, dk, dv ([B,H,d] / [B,H,Dv]), dS0, dz0."""
    plan = backward_plan(as_one_row(q), as_one_row(k), as_one_row(v), as_one_row(do), causal=True, scale=scale,
                         eps=eps, has_dfinal=True, target=target, public_res=True)
    return step_shaped(plan, q, k, v)


def _rows_block(target: Target) -> int:
    return 64 if target.interpret else 32


def _check_taylor(x: ArraySpec, scale) -> Tuple[int, int]:
    checks.check_float("x", x)
    if x.ndim < 1:
        raise ValueError("x: expected at least 1 dimension [..., d], got a scalar")
    d = x.shape[-1]
    checks.check_range("x.shape[-1] (d)", d, 1, MAX_FEATURE_DIM)
    resolve_scale(scale, d)
    return numel(x.shape[:-1]), d


@cached_plan
def taylor_plan(x: ArraySpec, *, scale, target: Target) -> Plan:
    """phi(x), [..., d] -> [..., F]. Inputs: x. Results: y (x's dtype)."""
    M, d = _check_taylor(x, scale)
    rows = _rows_block(target)
    launch = Launch(kern.taylor_fwd_kernel, (max(cdiv(M, rows), 1),), ("x",),
                    (M, d, features(d), math.sqrt(resolve_scale(scale, d))),
                    (Buffer("y", (*x.shape[:-1], features(d)), x.dtype),),
                    {"DP": max(16, next_pow2(d)), "ROWS": rows}, num_warps=4)
    return Plan((launch,), ("y",), dense=("x",))


@cached_plan
def taylor_backward_plan(x: ArraySpec, dy: ArraySpec, *, scale, target: Target) -> Plan:
    """dx from dy = dphi. Inputs: x, dy. Results: dx."""
    M, d = _check_taylor(x, scale)
    rows = _rows_block(target)
    launch = Launch(kern.taylor_bwd_kernel, (max(cdiv(M, rows), 1),), ("x", "dy"),
                    (M, d, features(d), math.sqrt(resolve_scale(scale, d))),
                    (Buffer("dx", tuple(x.shape), x.dtype),), {"DP": max(16, next_pow2(d)), "ROWS": rows},
                    num_warps=4)
    return Plan((launch,), ("dx",), dense=("x", "dy"))
