"""Test cases of the ops, framework-free: a :class:`Case` names an op, its input arrays (shape,
dtype, how to draw them) and how to call it; each op family's ``cases.py`` makes them, and
ato_cli.harness runs them in both frameworks and the reference (NumPy here; ml_dtypes for
bf16)."""

from __future__ import annotations

import dataclasses
from typing import Dict, NamedTuple, Tuple

import numpy as np


class In(NamedTuple):
    """An input array of a Case, where it goes in the op's call."""

    name: str


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    shapes: Tuple[Tuple[str, Tuple[int, ...]], ...]
    dtype: str = "float32"
    # the call: positional arguments and keyword arguments, with In(name) for the arrays
    # (also inside tuples, e.g. initial_state=(In("S0"), In("z0")))
    args: Tuple = ()
    kwargs: Tuple[Tuple[str, object], ...] = ()
    seed: int = 0
    # inputs kept in fp32 whatever the dtype (states, cos/sin tables)
    fp32_inputs: Tuple[str, ...] = ()
    # integer inputs: (name, shape, low, high), drawn uniformly from [low, high); never differentiated
    int_inputs: Tuple[Tuple[str, Tuple[int, ...], int, int], ...] = ()
    # float inputs that are not differentiated (cos/sin of rope)
    nondiff: Tuple[str, ...] = ()
    # how inputs are drawn: "scale" (logits = scale * N(0, 1)), "ignore_every" (every n-th
    # target is -100), "nonneg" (|N(0, 1)| for q and k: features without a feature map),
    # "magnitude" (see magnitude_of), "taylor_state" (S0, z0 made by a prefill: _taylor_state),
    # "density" (the fraction of true entries of an int input named block_mask or mask, drawn as bool),
    # "block_masked" (attention restricted to some key blocks: tests/helpers.causal_masked),
    # "sorted" (integer inputs named *segment_ids sorted along their last axis), "values"
    # ((name, values), ...: integer inputs given, e.g. cu_seqlens)
    options: Tuple[Tuple[str, object], ...] = ()

    def differentiated(self, names):
        ints = {n for n, _, _, _ in self.int_inputs}
        return [n for n in names if n not in ints and n not in self.nondiff]

    def call(self, fn, arrays: Dict[str, object]) -> tuple:
        """``fn`` called as the case says, on ``arrays`` (by input name); its outputs, flat."""
        args = [_fill(a, arrays) for a in self.args]
        kwargs = {k: _fill(v, arrays) for k, v in self.kwargs}
        return flatten(fn(*args, **kwargs))

    @property
    def label(self) -> str:
        """Short row label: op(flags) first shape, other inputs by name, dtype; e.g.
        ``linear_attention(causal,elu,initial_state,output_final_state) q[2,4,2048,64] k v S0 z0 bf16``."""
        noncausal = "full" if self.op == "flash_attention" else "bidir"
        flags = []
        for k, v in self.kwargs:
            if (k, v) == ("causal", False):
                flags.append(noncausal)
            elif v is True or isinstance(v, (In, tuple)):
                flags.append(k)
            elif v not in (False, None) and not isinstance(v, In):
                flags.append(str(v))
        (first, shape), rest = self.shapes[0], self.shapes[1:]
        names = " ".join(f"{n}[{','.join(map(str, s))}]" if s != shape else n for n, s in rest)
        dtype = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return f"{self.op}({','.join(flags)}) {first}[{','.join(map(str, shape))}] {names} {dtype}".replace("  ", " ")


def _fill(template, arrays):
    if isinstance(template, In):
        return arrays.get(template.name)
    if isinstance(template, tuple):
        return tuple(_fill(t, arrays) for t in template)
    return template


def flatten(out) -> tuple:
    """An op's result (an array, or nested tuples of them) as a flat tuple."""
    if isinstance(out, (tuple, list)):
        return tuple(x for o in out for x in flatten(o))
    return (out,)


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    import ml_dtypes

    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    return a.astype(np_dtype)


# A magnitude (Case option "magnitude"): half the largest finite value of the case's dtype.
HALF_MAX = "half-max"


_UNSCALED = ("cos", "sin", "weight", "bias", "temperature")


def magnitude_of(case: Case) -> float:
    """The case's "magnitude" option as a number (1 when absent): the inputs it scales (the
    activations: every float input but states, rotary tables and norm parameters) are drawn
    as N(0, 1) clipped to [-4, 4], times magnitude / 4, so that none exceeds it in absolute
    value."""
    m = dict(case.options).get("magnitude", 1.0)
    if m == HALF_MAX:
        import ml_dtypes

        return float(ml_dtypes.finfo(round_to(np.zeros(1), case.dtype).dtype).max) / 2
    return float(m)


def make_inputs(case: Case) -> Dict[str, np.ndarray]:
    """Random inputs in the case's dtype (states fp32 and non-negative, cos/sin a real rotary
    table), as the case's options say."""
    rng = np.random.default_rng(case.seed)
    opt = dict(case.options)
    magnitude = magnitude_of(case)
    out = {}
    for name, shape in case.shapes:
        a = rng.standard_normal(shape).astype(np.float32)
        if name == "logits":
            a = a * np.float32(opt.get("scale", 1.0))
        if "magnitude" in opt and name not in case.fp32_inputs and name not in _UNSCALED:
            a = (np.clip(a.astype(np.float64), -4, 4) * (magnitude / 4)).astype(np.float32)
        if name in ("cos", "sin"):  # a real rotary table: angle = position * frequency
            pos = np.arange(shape[0])[:, None]
            angle = pos * (10000.0 ** (-np.arange(shape[1]) / shape[1]))[None, :]
            a = (np.cos(angle) if name == "cos" else np.sin(angle)).astype(np.float32)
        if name == "alibi_slopes":  # positive, at most 0.5 (BLOOM's are 2^-8/H .. 2^-1)
            a = np.float32(0.5) * np.abs(np.tanh(a))
        if name == "temperature":  # a traced softmax temperature: positive, in [0.5, 2]
            a = np.float32(0.5) + np.float32(1.5) * np.abs(np.tanh(a))
        if name in ("q", "k") and opt.get("nonneg"):
            a = np.abs(a)
        if name in ("S0", "z0"):
            a = np.abs(a) * 4.0 if "taylor_state" not in opt else _taylor_state(case, shape)[name]
        out[name] = a if name in case.fp32_inputs else round_to(a, case.dtype)
    fixed = dict(opt.get("values", ()))
    for name, shape, low, high in case.int_inputs:
        a = rng.integers(low, high, size=shape).astype(np.int64)
        if name in fixed:
            a = np.asarray(fixed[name], np.int64).reshape(shape)
        if name == "targets" and opt.get("ignore_every"):
            a.reshape(-1)[:: opt["ignore_every"]] = -100
        if name in ("block_mask", "mask"):  # bool, each entry true with probability "density"
            a = rng.random(shape) < opt.get("density", 0.5)
        if name.endswith("segment_ids") and opt.get("sorted"):  # packed documents
            a = np.sort(a, axis=-1)
        out[name] = a
    return out


def _taylor_state(case: Case, shape) -> Dict[str, np.ndarray]:
    """A Based state as a prefill of 64 random rows leaves it (S0 = sum phi(k) v^T, z0 = sum
    phi(k), fp32): with an arbitrary non-negative state phi(q) . z0 can be near 0 or negative
    (phi has negative entries), which no prefill gives and which makes o ill-conditioned."""
    from .ops.based.reference import taylor_feature_map

    B, H, F = shape[:3]
    d = int(round((-1 + np.sqrt(4 * F - 3)) / 2))
    Dv = dict(case.shapes)["v"][-1]
    rng = np.random.default_rng(case.seed + 7)
    k, v = rng.standard_normal((B, H, 64, d)), rng.standard_normal((B, H, 64, Dv))
    phi = taylor_feature_map(k, scale=dict(case.kwargs).get("scale"))
    return {"S0": (np.swapaxes(phi, -1, -2) @ v).astype(np.float32), "z0": phi.sum(axis=2).astype(np.float32)}


def cotangents(case: Case, outputs) -> list:
    """Random fp32 cotangents for these outputs (arrays, or anything with a shape), seeded by
    the case."""
    rng = np.random.default_rng(case.seed + 1000)
    return [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outputs]


def h100():
    """The launch target of an H100 (132 SMs, compiled kernels, Gluon's Hopper kernels where the
    installed Triton has them: target.has_gluon), for building GPU plans on any machine: the
    compile examples, and tests of the plans' GPU choices."""
    from .target import Target, has_gluon

    return Target(interpret=False, num_sms=132, gluon=has_gluon())


def gpu_spec(shape, dtype: str = "bfloat16"):
    """A row-major CUDA ArraySpec: the inputs of the compile examples (each family's
    ``cases.COMPILE``: (label, op, args, kwargs), args ArraySpecs in place of arrays, since a
    declaration's signature never looks inside its arrays)."""
    from .launch import ArraySpec, row_major_strides

    return ArraySpec(tuple(shape), dtype, row_major_strides(shape), "cuda:0")


def compile_plans(op, args, kwargs, target, grad: bool = True):
    """(forward plan, its input specs by name) and, when ``grad``, (backward plan, its input
    specs) of ``op`` called with ArraySpecs ``args``: every cotangent present, row-major."""
    arrays, static = op.signature(*args, **kwargs)
    fwd = op.forward_plan(arrays, static, target, grad)
    out = [(fwd, {n: s for n, s in zip(op.inputs, arrays) if s is not None})]
    if grad:
        device = next(s.device for s in arrays if s is not None)
        cots = tuple(op.result_spec(fwd, n, device) for n in op.returned(static))
        bwd = op.backward_plan(fwd, arrays, static, cots, target)
        named = op.backward_specs(fwd, arrays, static, cots)
        out.append((bwd, {n: s for n, s in named.items() if s is not None}))
    return out


class Pick:
    """What a family's ``cases.fuzz`` draws its cases with: ``pick.int(lo, hi)`` (inclusive)
    and ``pick.choice(seq)``. The fuzzing tier (tests/test_fuzz.py) backs it with hypothesis;
    anything with these two methods will do (ato_core does not import hypothesis)."""

    def int(self, lo: int, hi: int) -> int:  # pragma: no cover - an interface
        raise NotImplementedError

    def choice(self, seq):  # pragma: no cover - an interface
        raise NotImplementedError


def fuzz_shape(pick: Pick, rank_max: int = 3, last_max: int = 300, other_max: int = 5) -> tuple:
    """A shape of rank 1..rank_max: the last axis 1..last_max, the others 1..other_max."""
    rank = pick.int(1, rank_max)
    return tuple(pick.int(1, other_max) for _ in range(rank - 1)) + (pick.int(1, last_max),)
