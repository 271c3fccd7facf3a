"""linear_attention, linear_attention_step and elu_plus_one: argument checks and launch plans.

Every block size, chunk length, segment count and dtype rule of this family is decided
here, from the shapes, the dtype and the Target, and nowhere else.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Tuple

from ato_core import checks
from ato_core.launch import (ArraySpec, Buffer, Launch, Plan, alignment, cached_plan, cdiv, next_pow2, numel,
                             optional_output, row_alignment)
from ato_core.layout import as_bhnd, bhnd_strides, check_layout, laid_out
from ato_core.target import Target

from . import feature_maps as fm_kern
from . import kernels as kern

MAX_HEAD_DIM = 256
# fp32 elements of one program's [Dk-tile, Dv-tile] state held in registers.
STATE_TILE_ELEMS = 8192


class Settings(NamedTuple):
    """waves: programs per SM that the segment split aims for (causal parallelism over the
    sequence); out_chunks: rows per program in the bidirectional output kernels, in chunks."""

    waves: int = 8
    out_chunks: int = 4


# Measured on an H200 (B8 N4096 H16 D64 bf16; results index: H200 diagnostics): waves 8 the
# fastest of 2-32; out_chunks 4 and 8 alike.
SETTINGS = Settings()
# Software-pipelining depth of the kernels that walk a segment backwards (dk, dv). With
# 2 or 3 stages, Triton 3.6 compiled la_bwd_dk_kernel (bf16, Dk=16, Dv=128, N=129) on an
# H200 into an out-of-range shared-memory access; with 1 it runs clean.
REVERSE_STAGES = 1
# Smallest padded head-dim tile. tl.dot accepts 16, but on an H200 Triton 3.6 compiles the
# bf16 backward with a 32-wide Dk tile (Dk=16, Dv=128) into wrong results (dq off by 76%,
# la_bwd_dq_kernel, any num_stages) and, with fp32 operands, into an illegal memory access
# (a bisect against fp32; results index: H200 diagnostics); with 64-wide tiles both are
# right. Loads are masked, so padding costs idle MMA lanes at Dk or Dv < 64, not memory traffic.
MIN_TILE = 64
# fp32 elements of one program's state tile in the scan over segments.
SCAN_TILE_ELEMS = 1024


@dataclasses.dataclass(frozen=True)
class Config:
    B: int
    H: int
    N: int
    Dk: int
    Dv: int
    BK: int          # Dk padded to a power of two >= MIN_TILE (kernels that need all of Dk)
    BV: int          # Dv likewise
    bv_tile: int     # Dv tile of the kernels that tile Dv (forward, dv)
    bk_tile: int     # Dk tile of the kernels that tile Dk (backward state, dq, dk)
    chunk: int
    nseg: int        # segments of the state pass (and of the causal output passes)
    seg_len: int
    nseg_out: int    # programs along the sequence in the output passes
    seg_len_out: int
    num_warps: int
    dot_bf16: bool
    precision: str

    @property
    def constexprs(self) -> dict:
        return {"CHUNK": self.chunk, "DOT_BF16": self.dot_bf16, "PRECISION": self.precision}


def config(B: int, H: int, N: int, Dk: int, Dv: int, dtype: str, causal: bool, target: Target,
           settings: Optional[Settings] = None) -> Config:
    settings = settings or SETTINGS
    BK, BV = max(MIN_TILE, next_pow2(Dk)), max(MIN_TILE, next_pow2(Dv))
    bv_tile = min(BV, max(MIN_TILE, STATE_TILE_ELEMS // BK))
    bk_tile = min(BK, max(MIN_TILE, STATE_TILE_ELEMS // BV))
    chunk = 64 if max(BK, BV) <= 128 else 32
    nseg, seg_len, nseg_out, seg_len_out = segments(B * H * cdiv(Dv, bv_tile), N, chunk, causal, target, settings)
    num_warps = 4 if max(BK * bv_tile, bk_tile * BV) <= 4096 else 8
    dot_bf16, precision = dot_operands(dtype, N)
    return Config(B, H, N, Dk, Dv, BK, BV, bv_tile, bk_tile, chunk, nseg, seg_len, nseg_out, seg_len_out,
                  num_warps, dot_bf16=dot_bf16, precision=precision)


def dot_operands(dtype: str, N: int) -> Tuple[bool, str]:
    """(DOT_BF16, PRECISION) of the chunked kernels' dots: bf16 operands for bf16 inputs, tf32
    for fp16, IEEE fp32 for fp32. One row (a decoding step's backward) is little work: IEEE
    fp32 dots, where bf16 or tf32 operands would round the fp32 state, whose products with do
    cancel in dq and dk."""
    ieee = dtype == "float32" or N == 1
    return dtype == "bfloat16" and not ieee, "ieee" if ieee else "tf32"


def segments(programs: int, N: int, chunk: int, causal: bool, target: Target,
             settings: Optional[Settings] = None) -> Tuple[int, int, int, int]:
    """How the sequence is split among programs: (nseg, seg_len) of the state pass (and of
    the causal output passes), (nseg_out, seg_len_out) of the output passes. ``programs``:
    programs per segment (B*H times the tiles of a segment). The split fills the GPU; the
    number of segments (and so the state buffers, [B*H, segments, F, Dv]) does not grow with N."""
    settings = settings or SETTINGS
    if N == 0:  # no segment: the passes over the sequence launch nothing, the scan passes the state on
        return 0, chunk, 0, chunk
    nseg = min(max(cdiv(settings.waves * target.num_sms, max(programs, 1)), 1), cdiv(N, chunk))
    seg_len = cdiv(cdiv(N, nseg), chunk) * chunk
    nseg = cdiv(N, seg_len)
    if causal:
        return nseg, seg_len, nseg, seg_len
    seg_len_out = chunk * settings.out_chunks
    return nseg, seg_len, cdiv(N, seg_len_out), seg_len_out


def check_eps(eps) -> None:
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps >= 0):
        raise ValueError(f"eps: expected a non-negative float, got {eps!r}")


def check_qkv(q: ArraySpec, k: ArraySpec, v: ArraySpec, dk: str = "Dk", max_dk: int = MAX_HEAD_DIM,
              step: bool = False, layout: str = "bhnd") -> Tuple[int, ...]:
    """q, k [B, H, N, dk] and v [B, H, N, Dv] ([B, N, H, ...] for ``layout`` "bnhd"; without N
    when ``step``): one float dtype and device, sizes in range. Returns (B, H, N, Dk, Dv), or
    (B, H, Dk, Dv) when ``step``."""
    check_layout(layout)
    names = ("B", "H") if step else ("B", "H", "N") if layout == "bhnd" else ("B", "N", "H")
    lead = "[" + ", ".join(names) + ", "
    for name, spec, desc in (("q", q, f"{lead}{dk}]"), ("k", k, f"{lead}{dk}]"), ("v", v, f"{lead}Dv]")):
        checks.check_rank(name, spec, 3 if step else 4, desc)
        checks.check_float(name, spec)
    checks.check_same_dtype(("q", "k", "v"), (q, k, v))
    checks.check_same_device(("q", "k", "v"), (q, k, v))
    *lead_dims, Dk = q.shape
    Dv = v.shape[-1]
    for axis, what in enumerate(names):
        checks.check_dim("k", k, axis, q.shape[axis], f"{what}, as in q")
        checks.check_dim("v", v, axis, q.shape[axis], f"{what}, as in q")
    checks.check_dim("k", k, len(lead_dims), Dk, f"{dk}, the feature size of q")
    checks.check_range(f"q.shape[{len(lead_dims)}] ({dk})", Dk, 1, max_dk)
    checks.check_range(f"v.shape[{len(lead_dims)}] (Dv)", Dv, 1, MAX_HEAD_DIM)
    if not step and layout == "bnhd":
        lead_dims = [lead_dims[0], lead_dims[2], lead_dims[1]]
    return (*lead_dims, Dk, Dv)


def check_linear_attention(
    q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal: bool, feature_map, eps: float,
    initial_state: Optional[Tuple[ArraySpec, ArraySpec]] = None, layout: str = "bhnd",
) -> Tuple[int, int, int, int, int]:
    """Validates the arguments of linear_attention; returns (B, H, N, Dk, Dv)."""
    B, H, N, Dk, Dv = check_qkv(q, k, v, layout=layout)
    feature_map_code(feature_map)
    checks.check_bool("causal", causal)
    check_eps(eps)
    if initial_state is not None:
        if not causal:
            raise ValueError("initial_state: expected None when causal=False (a bidirectional pass has no "
                             "preceding state), got a state")
        check_state("initial_state", initial_state, B, H, Dk, Dv, q.device)
    return B, H, N, Dk, Dv


def check_state(name: str, state, B: int, H: int, Dk: int, Dv: int, device: str, features: str = "Dk") -> None:
    """A state (S [B, H, Dk, Dv], z [B, H, Dk]) fp32 on ``device``; ``features`` names Dk."""
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise TypeError(f"{name}: expected a pair (S, z), got {type(state).__name__}")
    S, z = state
    checks.check_shape(f"{name}[0] (S)", S, (B, H, Dk, Dv), f"[B, H, {features}, Dv]")
    checks.check_shape(f"{name}[1] (z)", z, (B, H, Dk), f"[B, H, {features}]")
    for n, spec in ((f"{name}[0] (S)", S), (f"{name}[1] (z)", z)):
        if spec.dtype != "float32":
            raise TypeError(f"{n}: expected dtype float32, got {spec.dtype}")
        if spec.device != device:
            raise ValueError(f"{n}: expected device {device} (the device of q), got {spec.device}")


def f32(name, *shape):
    return Buffer(name, tuple(shape), "float32")


def scan(B: int, H: int, F: int, Dv: int, nseg: int, partial: str, init: Optional[str],
         out: Tuple[str, str, str, str], reverse: bool, causal: bool, start_dtype: str = "float32",
         row0: Optional[str] = None) -> Launch:
    """Prefix (or suffix) sums of per-segment partial states ([B, H, nseg, F, Dv] and
    [B, H, nseg, F] fp32, named ``partial``_S and ``partial``_z): the start state of each
    segment and the total (causal), or the total alone (bidirectional: la_sum_kernel, which
    neither writes nor allocates the start states). F is the feature size (Dk here).
    ``start_dtype``: the start states' S (a dot operand type: half the bytes for the kernels
    that read them; z and the total stay fp32); ``row0``: also row 0 of each start S, fp32,
    [B, H, nseg, Dv], under this name."""
    # Small tiles: the walk over segments is a chain of dependent loads, so what hides
    # its latency is the number of programs (B*H*tiles), not the size of each.
    bv = min(max(MIN_TILE, next_pow2(Dv)), 64)
    bk = min(max(MIN_TILE, next_pow2(F)), max(SCAN_TILE_ELEMS // bv, 1))
    grid = (B * H, cdiv(F, bk), cdiv(Dv, bv))
    ss, zs, sf, zf = out
    total = (f32(sf, B, H, F, Dv), f32(zf, B, H, F))
    ce = {"REVERSE": reverse, "BK": bk, "BV": bv, "ALIGN": _align(F, Dv)}
    if not causal and init is None:
        return Launch(kern.la_sum_kernel, grid, (f"{partial}_S", f"{partial}_z"), (nseg, F, Dv), total, ce,
                      num_warps=4)
    return Launch(
        kern.la_scan_kernel, grid,
        (f"{partial}_S", f"{partial}_z", f"{init}_S" if init else f"{partial}_S", f"{init}_z" if init else f"{partial}_z"),
        (nseg, F, Dv), (Buffer(ss, (B, H, nseg, F, Dv), start_dtype), f32(zs, B, H, nseg, F), *total,
                        optional_output(row0 or f"{ss}_row0", (B, H, nseg, Dv), "float32", row0 is not None)),
        {"HAS_INIT": init is not None, "ROW0": row0 is not None, **ce},
        num_warps=4,
    )


def _align(Dk: int, Dv: int, *arrays: ArraySpec) -> int:
    return row_alignment((Dk, Dv), arrays)


def state_addressing(cfg: Config, causal: bool) -> Tuple[int, int]:
    """(states per (b, h), multiplier of the segment index) for the output passes."""
    return (cfg.nseg, 1) if causal else (1, 0)


@cached_plan
def forward_plan(
    q: ArraySpec, k: ArraySpec, v: ArraySpec, *, causal: bool, feature_map, eps: float,
    initial_state: Optional[Tuple[ArraySpec, ArraySpec]], target: Target, settings: Optional[Settings] = None,
    exact_state: bool = True, layout: str = "bhnd",
) -> Tuple[Plan, Config]:
    """Inputs: q, k, v (laid out as ``layout``; o too) and, with an initial state, init_S,
    init_z. ``settings``: default SETTINGS. ``exact_state``: the state pass multiplies phi(k)
    unrounded (else rounded like the output pass).

    Results: o [B,H,N,Dv] (q's dtype); S_final [B,H,Dk,Dv], z_final [B,H,Dk] (fp32); and the
    residuals of the backward: rden [B,H,N] (1/den), S_res, z_res (start state of each
    segment when causal, the total state otherwise).
    """
    B, H, N, Dk, Dv = check_linear_attention(q, k, v, causal=causal, feature_map=feature_map, eps=eps,
                                             initial_state=initial_state, layout=layout)
    q, k, v = (as_bhnd(t, layout) for t in (q, k, v))
    cfg = config(B, H, N, Dk, Dv, q.dtype, causal, target, settings)
    BH, fmap = B * H, feature_map_code(feature_map)
    nvt = cdiv(Dv, cfg.bv_tile)
    align = _align(Dk, Dv, q, k, v)
    state = Launch(
        kern.la_fwd_state_kernel, (BH, cfg.nseg, nvt), ("k", "v"),
        (H, N, cfg.seg_len, Dk, Dv, *k.strides, *v.strides),
        (f32("part_S", B, H, cfg.nseg, Dk, Dv), f32("part_z", B, H, cfg.nseg, Dk)),
        {"FEATURE": fmap, "BK": cfg.BK, "BV": cfg.bv_tile, "ALIGN": align, "EXACT": exact_state, **cfg.constexprs},
        num_warps=cfg.num_warps,
    )
    scan_ = scan(B, H, Dk, Dv, cfg.nseg, "part", "init" if initial_state is not None else None,
                 ("S_start", "z_start", "S_final", "z_final"), reverse=False, causal=causal)
    res_S, res_z = ("S_start", "z_start") if causal else ("S_final", "z_final")
    o_shape = (B, H, N, Dv)
    out = Launch(
        kern.la_fwd_kernel, (BH, cfg.nseg_out, nvt), ("q", "k", "v", res_S, res_z),
        (H, N, cfg.seg_len_out, Dk, Dv, *state_addressing(cfg, causal), float(eps),
         *q.strides, *k.strides, *v.strides, *bhnd_strides(o_shape, layout)),
        (Buffer("o", laid_out(o_shape, layout), q.dtype), f32("rden", B, H, N)),
        {"FEATURE": fmap, "CAUSAL": causal, "BK": cfg.BK, "BV": cfg.bv_tile, "ALIGN": align, **cfg.constexprs},
        num_warps=cfg.num_warps,
    )
    plan = Plan((state, scan_, out), ("o", "S_final", "z_final", "rden", res_S, res_z), dense=("init_S", "init_z"))
    return plan, cfg


@cached_plan
def backward_plan(
    q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, causal: bool, feature_map, eps: float,
    has_dfinal: bool, target: Target, settings: Optional[Settings] = None, layout: str = "bhnd",
) -> Plan:
    """Inputs: q, k, v, o, do (laid out as ``layout``), and the forward's rden, S_res, z_res;
    with has_dfinal the cotangents dfinal_S, dfinal_z of the final state. ``settings``:
    default SETTINGS.

    Results: dq, dk, dv (input dtype and layout) and dS0 [B,H,Dk,Dv], dz0 [B,H,Dk] (fp32),
    the gradient of the initial state.
    """
    B, H, N, Dk, Dv = check_linear_attention(q, k, v, causal=causal, feature_map=feature_map, eps=eps, layout=layout)
    checks.check_shape("do", do, laid_out((B, H, N, Dv), layout), "the shape of the output")
    q, k, v, do = (as_bhnd(t, layout) for t in (q, k, v, do))
    cfg = config(B, H, N, Dk, Dv, q.dtype, causal, target, settings)
    BH, fmap = B * H, feature_map_code(feature_map)
    nkt, nvt = cdiv(Dk, cfg.bk_tile), cdiv(Dv, cfg.bv_tile)
    align = _align(Dk, Dv, q, k, v, do)
    o_strides = bhnd_strides((B, H, N, Dv), layout)
    state = Launch(
        kern.la_bwd_state_kernel, (BH, cfg.nseg, nkt), ("q", "do", "o", "rden"),
        (H, N, cfg.seg_len, Dk, Dv, *q.strides, *do.strides, *o_strides),
        (f32("rpart_S", B, H, cfg.nseg, Dk, Dv), f32("rpart_z", B, H, cfg.nseg, Dk), f32("g", B, H, N)),
        {"FEATURE": fmap, "BK": cfg.bk_tile, "BV": cfg.BV, "ALIGN": align, **cfg.constexprs},
        num_warps=cfg.num_warps,
    )
    scan_ = scan(B, H, Dk, Dv, cfg.nseg, "rpart", "dfinal" if has_dfinal else None,
                 ("R_start", "r_start", "dS0", "dz0"), reverse=True, causal=causal)
    R_S, R_z = ("R_start", "r_start") if causal else ("dS0", "dz0")
    addressing = state_addressing(cfg, causal)
    common = (H, N, cfg.seg_len_out, Dk, Dv, *addressing)
    ce = {"FEATURE": fmap, "CAUSAL": causal, "ALIGN": align, **cfg.constexprs}
    dq = Launch(
        kern.la_bwd_dq_kernel, (BH, cfg.nseg_out, nkt), ("q", "k", "v", "do", "rden", "g", "S_res", "z_res"),
        (*common, *q.strides, *k.strides, *v.strides, *do.strides, *bhnd_strides(q.shape, layout)),
        (Buffer("dq", laid_out(q.shape, layout), q.dtype),), {**ce, "BK": cfg.bk_tile, "BV": cfg.BV}, num_warps=cfg.num_warps,
    )
    if cfg.BK * cfg.BV <= STATE_TILE_ELEMS:  # the whole reverse state in one program: one pass
        reverse = (Launch(
            kern.la_bwd_dkdv_kernel, (BH, cfg.nseg_out), ("q", "k", "v", "do", "rden", "g", R_S, R_z),
            (*common, *q.strides, *k.strides, *v.strides, *do.strides, *bhnd_strides(k.shape, layout),
             *bhnd_strides(v.shape, layout)),
            (Buffer("dk", laid_out(k.shape, layout), k.dtype), Buffer("dv", laid_out(v.shape, layout), v.dtype)),
            {**ce, "BK": cfg.BK, "BV": cfg.BV}, num_warps=cfg.num_warps, num_stages=REVERSE_STAGES,
        ),)
    else:
        dk = Launch(
            kern.la_bwd_dk_kernel, (BH, cfg.nseg_out, nkt), ("q", "k", "v", "do", "rden", "g", R_S, R_z),
            (*common, *q.strides, *k.strides, *v.strides, *do.strides, *bhnd_strides(k.shape, layout)),
            (Buffer("dk", laid_out(k.shape, layout), k.dtype),), {**ce, "BK": cfg.bk_tile, "BV": cfg.BV}, num_warps=cfg.num_warps,
            num_stages=REVERSE_STAGES,
        )
        dv = Launch(
            kern.la_bwd_dv_kernel, (BH, cfg.nseg_out, nvt), ("q", "k", "do", "rden", R_S),
            (*common, *q.strides, *k.strides, *do.strides, *bhnd_strides(v.shape, layout)),
            (Buffer("dv", laid_out(v.shape, layout), v.dtype),), {**ce, "BK": cfg.BK, "BV": cfg.bv_tile}, num_warps=cfg.num_warps,
            num_stages=REVERSE_STAGES,
        )
        reverse = (dk, dv)
    return Plan((state, scan_, dq, *reverse), ("dq", "dk", "dv", "dS0", "dz0"),
                dense=("rden", "S_res", "z_res", "dfinal_S", "dfinal_z"))


def check_step(q: ArraySpec, k: ArraySpec, v: ArraySpec, state, feature_map, eps) -> Tuple[int, int, int, int]:
    B, H, Dk, Dv = check_qkv(q, k, v, step=True)
    feature_map_code(feature_map)
    check_eps(eps)
    check_state("state", state, B, H, Dk, Dv, q.device)
    return B, H, Dk, Dv


@cached_plan
def step_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, state, *, feature_map, eps: float, target: Target,
              grad: bool = False) -> Plan:
    """Inputs: q, k, v ([B,H,D]) and state_S, state_z. Results: o [B,H,Dv], S1, z1 (fp32),
    rden [B,H] and, with ``grad``, o32 (o in fp32; else a placeholder): residuals."""
    B, H, Dk, Dv = check_step(q, k, v, state, feature_map, eps)
    cfg = config(B, H, 1, Dk, Dv, q.dtype, True, target)
    launch = Launch(
        kern.la_step_kernel, (B * H, cdiv(Dv, cfg.bv_tile)), ("q", "k", "v", "state_S", "state_z"),
        (H, Dk, Dv, float(eps), *q.strides, *k.strides, *v.strides),
        (Buffer("o", (B, H, Dv), q.dtype), f32("S1", B, H, Dk, Dv), f32("z1", B, H, Dk), f32("rden", B, H),
         optional_output("o32", (B, H, Dv), "float32", grad)),
        {"FEATURE": feature_map_code(feature_map), "BK": cfg.BK, "BV": cfg.bv_tile,
         "ALIGN": _align(Dk, Dv, q, k, v), "STORE_O32": grad}, num_warps=cfg.num_warps,
    )
    return Plan((launch,), ("o", "S1", "z1", "rden", "o32"), dense=("state_S", "state_z"))


def as_one_row(spec: ArraySpec) -> ArraySpec:
    """[B, H, D] seen as [B, H, 1, D] (the same memory)."""
    B, H, D = spec.shape
    sb, sh, sd = spec.strides
    return ArraySpec((B, H, 1, D), spec.dtype, (sb, sh, D * sd, sd), spec.device)


@cached_plan
def step_backward_plan(q: ArraySpec, k: ArraySpec, v: ArraySpec, do: ArraySpec, *, feature_map, eps: float,
                       target: Target) -> Plan:
    """The backward of one step is the causal backward of a one-row sequence whose start
    state is the step's input state. Inputs: q, k, v, o (fp32: the forward's o32), do, rden,
    S_res (the input state S), z_res, dfinal_S, dfinal_z (cotangents of the new state).
    Results: dq, dk, dv ([B,H,D]), dS0, dz0."""
    plan = backward_plan(as_one_row(q), as_one_row(k), as_one_row(v), as_one_row(do), causal=True,
                         feature_map=feature_map, eps=eps, has_dfinal=True, target=target)
    return step_shaped(plan, q, k, v)


def step_shaped(plan: Plan, q: ArraySpec, k: ArraySpec, v: ArraySpec) -> Plan:
    """The backward plan of a one-row sequence (inputs seen through as_one_row) with its dq,
    dk, dv written in the step's shapes ([B, H, D]; the same memory)."""
    shapes = {"dq": tuple(q.shape), "dk": tuple(k.shape), "dv": tuple(v.shape)}
    launches = tuple(
        dataclasses.replace(l, outputs=tuple(dataclasses.replace(b, shape=shapes.get(b.name, b.shape)) for b in l.outputs))
        for l in plan.launches
    )
    return dataclasses.replace(plan, launches=launches)


FEATURE_MAPS = {None: fm_kern.IDENTITY, "elu": fm_kern.ELU_PLUS_ONE}


def feature_map_code(feature_map) -> int:
    checks.check_choice("feature_map", feature_map, tuple(FEATURE_MAPS))
    return FEATURE_MAPS[feature_map]


def _block(target: Target) -> int:
    # The interpreter pays per program, so it gets fewer, larger blocks.
    return 8192 if target.interpret else 1024


@cached_plan
def elu_plus_one_plan(x: ArraySpec, target: Target) -> Plan:
    """y = ELU(x)+1, any shape. Inputs: x. Results: y (x's shape and dtype)."""
    checks.check_float("x", x)
    n, block = numel(x.shape), _block(target)
    launch = Launch(
        fm_kern.elu_plus_one_fwd_kernel, (max(cdiv(n, block), 1),), ("x",), (n,),
        (Buffer("y", tuple(x.shape), x.dtype),), {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=4,
    )
    return Plan((launch,), ("y",), dense=("x",))


@cached_plan
def elu_plus_one_backward_plan(x: ArraySpec, dy: ArraySpec, target: Target) -> Plan:
    """dx = dy * ELU'(x). Inputs: x, dy. Results: dx."""
    checks.check_shape("dy", dy, x.shape, "the shape of x")
    n, block = numel(x.shape), _block(target)
    launch = Launch(
        fm_kern.elu_plus_one_bwd_kernel, (max(cdiv(n, block), 1),), ("x", "dy"), (n,),
        (Buffer("dx", tuple(x.shape), x.dtype),), {"BLOCK": block, "ALIGN": alignment(n)}, num_warps=4,
    )
    return Plan((launch,), ("dx",), dense=("x", "dy"))
