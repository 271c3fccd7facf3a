"""Runs one op case in ato_torch, in ato_jax and in the reference, on the same inputs.

Used by ``ato check`` and by the tests: a Case names an op, its keyword arguments, the
input shapes and dtype; ``run_*`` return the op's outputs and the gradients of
sum(outputs * cotangents) as float64 NumPy arrays, so every comparison is done the same way.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Dict, Tuple

import numpy as np

# Relative Frobenius-norm error allowed against the float64 reference, by input dtype.
# fp32: the kernels use IEEE fp32 dots and fp32 accumulation; errors are a few ulps of
#   the reductions (N <= 4096 terms), far under 1e-4 (a dropped term or a shifted mask
#   costs >= 1e-2 at the tested lengths).
# fp16: dots run in tf32 (10-bit mantissa, unit roundoff 4.9e-4) on fp16-rounded inputs,
#   the output is rounded to fp16 (another 4.9e-4): a few units of 1e-3.
# bf16: operands and the output are bf16 (unit roundoff 3.9e-3): about 1e-2.
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    shapes: Tuple[Tuple[str, Tuple[int, ...]], ...]
    dtype: str = "float32"
    kwargs: Tuple[Tuple[str, object], ...] = ()
    seed: int = 0
    # inputs kept in fp32 whatever the dtype (states, cos/sin tables)
    fp32_inputs: Tuple[str, ...] = ()
    # integer inputs: (name, shape, low, high), drawn uniformly from [low, high); never differentiated
    int_inputs: Tuple[Tuple[str, Tuple[int, ...], int, int], ...] = ()
    # float inputs that are not differentiated (cos/sin of rope)
    nondiff: Tuple[str, ...] = ()

    def differentiated(self, names):
        ints = {n for n, _, _, _ in self.int_inputs}
        return [n for n in names if n not in ints and n not in self.nondiff]

    @property
    def label(self) -> str:
        """Short row label: op(flags) first shape, other inputs by name, dtype; e.g.
        ``linear_attention(causal,elu,final) q[2,4,2048,64] k v S0 z0 bf16``."""
        noncausal = "full" if self.op == "flash_attention" else "bidir"
        kw = ",".join(noncausal if (k, v) == ("causal", False) else k if v is True else str(v)
                      for k, v in self.kwargs if v not in (False, None) or k == "causal")
        (first, shape), rest = self.shapes[0], self.shapes[1:]
        names = " ".join(f"{n}[{','.join(map(str, s))}]" if s != shape else n for n, s in rest)
        dtype = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return f"{self.op}({kw}) {first}[{','.join(map(str, shape))}] {names} {dtype}".replace("  ", " ")


def la_case(B, H, N, Dk, Dv, dtype="float32", causal=False, feature_map="elu", state=False, final=False, seed=0):
    shapes = [("q", (B, H, N, Dk)), ("k", (B, H, N, Dk)), ("v", (B, H, N, Dv))]
    if state:
        shapes += [("S0", (B, H, Dk, Dv)), ("z0", (B, H, Dk))]
    kwargs = (("causal", causal), ("feature_map", feature_map), ("final", final))
    return Case("linear_attention", tuple(shapes), dtype, kwargs, seed, ("S0", "z0"))


def step_case(B, H, Dk, Dv, dtype="float32", feature_map="elu", seed=0):
    shapes = (("q", (B, H, Dk)), ("k", (B, H, Dk)), ("v", (B, H, Dv)), ("S0", (B, H, Dk, Dv)), ("z0", (B, H, Dk)))
    return Case("linear_attention_step", shapes, dtype, (("feature_map", feature_map),), seed, ("S0", "z0"))


def fa_case(B, Hq, Hkv, Nq, Nk, D, dtype="float32", causal=False, lse=True, scale=None, seed=0):
    shapes = (("q", (B, Hq, Nq, D)), ("k", (B, Hkv, Nk, D)), ("v", (B, Hkv, Nk, D)))
    kwargs = (("causal", causal), ("softmax_scale", scale), ("lse", lse))
    return Case("flash_attention", shapes, dtype, kwargs, seed)


def norm_case(op, shape, dtype="float32", weight=True, bias=True, seed=0):
    """layer_norm (weight, bias optional) or rms_norm (weight optional) over shape[-1]."""
    N = shape[-1]
    shapes = [("x", tuple(shape))] + ([("weight", (N,))] if weight else []) + ([("bias", (N,))] if bias else [])
    return Case(op, tuple(shapes), dtype, (), seed)


def drln_case(shape, dtype="float32", p=0.0, dseed=0, seed=0):
    N = shape[-1]
    shapes = (("x", tuple(shape)), ("residual", tuple(shape)), ("weight", (N,)), ("bias", (N,)))
    return Case("dropout_residual_layer_norm", shapes, dtype, (("p", p), ("dseed", dseed)), seed)


def softmax_case(shape, dtype="float32", temperature=1.0, seed=0):
    return Case("softmax", (("x", tuple(shape)),), dtype, (("temperature", temperature),), seed)


def swiglu_case(shape, dtype="float32", seed=0):
    return Case("swiglu", (("gate", tuple(shape)), ("up", tuple(shape))), dtype, (), seed)


def rope_case(B, Hq, Hkv, N, D, dtype="float32", interleaved=False, positions=False, max_pos=None, seed=0):
    max_pos = max_pos or N
    shapes = (("q", (B, Hq, N, D)), ("k", (B, Hkv, N, D)), ("cos", (max_pos, D // 2)), ("sin", (max_pos, D // 2)))
    ints = (("positions", (B, N), 0, max_pos),) if positions else ()
    return Case("rope", shapes, dtype, (("interleaved", interleaved), ("positions", positions)), seed,
                ("cos", "sin"), ints, ("cos", "sin"))


def ce_case(T, V, dtype="float32", reduction="mean", label_smoothing=0.0, ignore_every=5, scale=1.0, seed=0):
    """Every ``ignore_every``-th target is ignore_index (-100); logits are scale * N(0, 1)."""
    kwargs = (("reduction", reduction), ("label_smoothing", label_smoothing), ("ignore_every", ignore_every),
              ("scale", scale))
    return Case("cross_entropy", (("logits", (T, V)),), dtype, kwargs, seed, (), (("targets", (T,), 0, V),))


def elu_case(shape, dtype="float32", seed=0):
    return Case("elu_plus_one", (("x", tuple(shape)),), dtype, (), seed)


def _round(a: np.ndarray, dtype: str) -> np.ndarray:
    import ml_dtypes

    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    return a.astype(np_dtype)


def make_inputs(case: Case) -> Dict[str, np.ndarray]:
    """Random inputs in the case's dtype (states fp32 and non-negative). Without a
    feature map, q and k must already be non-negative features."""
    rng = np.random.default_rng(case.seed)
    kw = dict(case.kwargs)
    out = {}
    for name, shape in case.shapes:
        a = rng.standard_normal(shape).astype(np.float32)
        if name == "logits":
            a = a * np.float32(kw.get("scale", 1.0))
        if name in ("cos", "sin"):  # a real rotary table: angle = position * frequency
            pos = np.arange(shape[0])[:, None]
            angle = pos * (10000.0 ** (-np.arange(shape[1]) / shape[1]))[None, :]
            a = (np.cos(angle) if name == "cos" else np.sin(angle)).astype(np.float32)
        if name in ("q", "k") and kw.get("feature_map", "elu") is None:
            a = np.abs(a)
        if name in ("S0", "z0"):
            a = np.abs(a) * 4.0
        out[name] = a if name in case.fp32_inputs else _round(a, case.dtype)
    for name, shape, low, high in case.int_inputs:
        a = rng.integers(low, high, size=shape).astype(np.int64)
        if name == "targets" and kw.get("ignore_every"):
            a[:: kw["ignore_every"]] = -100
        out[name] = a
    return out


def _call(case: Case, ops, a: Dict[str, object]):
    """Calls the op of ``ops`` (ato_torch, ato_jax or a reference adapter); returns a tuple."""
    kw = dict(case.kwargs)
    if case.op == "elu_plus_one":
        return (ops.elu_plus_one(a["x"]),)
    if case.op == "linear_attention":
        init = (a["S0"], a["z0"]) if "S0" in a else None
        res = ops.linear_attention(a["q"], a["k"], a["v"], causal=kw["causal"], feature_map=kw["feature_map"],
                                   initial_state=init, output_final_state=kw["final"])
        return (res[0], *res[1]) if kw["final"] else (res,)
    if case.op == "flash_attention":
        res = ops.flash_attention(a["q"], a["k"], a["v"], causal=kw["causal"], softmax_scale=kw["softmax_scale"],
                                  return_lse=kw["lse"])
        return tuple(res) if kw["lse"] else (res,)
    if case.op in ("layer_norm", "rms_norm"):
        extra = {"bias": a.get("bias")} if case.op == "layer_norm" else {}
        return (getattr(ops, case.op)(a["x"], a.get("weight"), **extra),)
    if case.op == "dropout_residual_layer_norm":
        if getattr(ops, "IS_REFERENCE", False):
            keep = dropout_keep_mask(case, a["x"])
            return ops.dropout_residual_layer_norm(a["x"], a["residual"], a["weight"], a["bias"], keep=keep, p=kw["p"])
        return tuple(ops.dropout_residual_layer_norm(a["x"], a["residual"], a["weight"], a["bias"], p=kw["p"],
                                                     seed=kw["dseed"]))
    if case.op == "softmax":
        return (ops.softmax(a["x"], temperature=kw["temperature"]),)
    if case.op == "swiglu":
        return (ops.swiglu(a["gate"], a["up"]),)
    if case.op == "rope":
        return tuple(ops.rope(a["q"], a["k"], a["cos"], a["sin"], positions=a.get("positions"),
                              interleaved=kw["interleaved"]))
    if case.op == "cross_entropy":
        return (ops.cross_entropy(a["logits"], a["targets"], reduction=kw["reduction"],
                                  label_smoothing=kw["label_smoothing"]),)
    if case.op == "linear_attention_step":
        o, (S, z) = ops.linear_attention_step(a["q"], a["k"], a["v"], (a["S0"], a["z0"]),
                                              feature_map=kw["feature_map"])
        return (o, S, z)
    raise ValueError(case.op)


def dropout_keep_mask(case: Case, like):
    """The keep-mask that ato's generator draws for this case's seed and shape (from the
    kernel itself: dropout of ones, no residual, p -> kept iff nonzero). The reference
    checks everything else (scaling, residual, LayerNorm, gradients) against it; the mask's
    own statistics are tested separately."""
    import torch

    import ato_torch

    kw = dict(case.kwargs)
    shape = tuple(like.shape)
    device = like.device if isinstance(like, torch.Tensor) else "cpu"
    ones = torch.ones(shape, dtype=torch.float32, device=device)
    _, h = ato_torch.dropout_residual_layer_norm(ones, torch.zeros_like(ones), None, None, p=kw["p"], seed=kw["dseed"])
    keep = h != 0
    return keep if isinstance(like, torch.Tensor) else np.asarray(keep)


def cotangents(case: Case, outputs) -> list:
    rng = np.random.default_rng(case.seed + 1000)
    return [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outputs]


@dataclasses.dataclass
class Result:
    outputs: list
    grads: Dict[str, np.ndarray]
    seconds: float


def _f64(x) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.detach().double().cpu().numpy()
    except ImportError:
        pass
    return np.asarray(x).astype(np.float64)


def run_torch(case: Case, inputs: Dict[str, np.ndarray], device: str = "cpu", reference: bool = False) -> Result:
    """ato_torch (or, with reference=True, the float64 reference under torch autograd)."""
    import torch

    import ato_torch

    def to_t(a):
        a = np.asarray(a)
        t = torch.from_numpy(a.astype(np.float32)) if a.dtype.name == "bfloat16" else torch.from_numpy(a.copy())
        if a.dtype.name == "bfloat16":
            t = t.to(torch.bfloat16)
        if reference:
            t = t.double()
        return t.to(device).requires_grad_(True)

    def to_const(name, a):
        a = np.asarray(a)
        if a.dtype.kind in "iu":
            return torch.from_numpy(a.copy()).to(device)
        t = torch.from_numpy(a.astype(np.float32)).to(device)
        return t.double() if reference else t

    ops = _Reference() if reference else ato_torch
    diff = case.differentiated(list(inputs))
    t_in = {n: to_t(a) if n in diff else to_const(n, a) for n, a in inputs.items()}
    start = time.perf_counter()
    outs = _call(case, ops, t_in)
    cts = cotangents(case, outs)
    loss = sum((o.double() * torch.from_numpy(c).double().to(device)).sum() for o, c in zip(outs, cts))
    loss.backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    return Result([_f64(o) for o in outs], {n: _f64(t_in[n].grad) for n in diff}, secs)


def run_jax(case: Case, inputs: Dict[str, np.ndarray], jit: bool = True) -> Result:
    """ato_jax under jax.jit(jax.value_and_grad)."""
    import jax
    import jax.numpy as jnp

    import ato_jax

    names = list(inputs)
    diff = case.differentiated(names)
    probe = _call(case, _ShapeOnly(), {n: inputs[n] for n in names})
    cts = cotangents(case, probe)
    consts = {n: jnp.asarray(inputs[n]) for n in names if n not in diff}

    def loss(*arrays):
        outs = _call(case, ato_jax, {**consts, **dict(zip(diff, arrays))})
        total = sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(outs, cts))
        return total, outs

    fn = jax.value_and_grad(loss, argnums=tuple(range(len(diff))), has_aux=True)
    fn = jax.jit(fn) if jit else fn
    args = [jnp.asarray(inputs[n]) for n in diff]
    start = time.perf_counter()
    (_, outs), grads = fn(*args)
    jax.block_until_ready((outs, grads))
    secs = time.perf_counter() - start
    return Result([_f64(o) for o in outs], {n: _f64(g) for n, g in zip(diff, grads)}, secs)


class _Reference:
    """The reference module, marked so that _call can hand it what only it needs."""

    IS_REFERENCE = True

    def __getattr__(self, name):
        from ato_core import reference as ref

        return getattr(ref, name)


class _ShapeOnly:
    """Stands in for an op module to learn the output shapes (for the cotangents)."""

    def elu_plus_one(self, x):
        return np.empty(np.shape(x))

    def linear_attention(self, q, k, v, *, causal, feature_map, initial_state, output_final_state):
        B, H, N, Dk = np.shape(q)
        Dv = np.shape(v)[3]
        o = np.empty((B, H, N, Dv))
        return (o, (np.empty((B, H, Dk, Dv)), np.empty((B, H, Dk)))) if output_final_state else o

    def flash_attention(self, q, k, v, *, causal, softmax_scale, return_lse):
        o = np.empty(np.shape(q))
        return (o, np.empty(np.shape(q)[:3])) if return_lse else o

    def layer_norm(self, x, weight=None, bias=None):
        return np.empty(np.shape(x))

    def rms_norm(self, x, weight=None):
        return np.empty(np.shape(x))

    def dropout_residual_layer_norm(self, x, residual, weight, bias, *, p, seed):
        return np.empty(np.shape(x)), np.empty(np.shape(x))

    def softmax(self, x, *, temperature):
        return np.empty(np.shape(x))

    def swiglu(self, gate, up):
        return np.empty(np.shape(gate))

    def rope(self, q, k, cos, sin, *, positions, interleaved):
        return np.empty(np.shape(q)), np.empty(np.shape(k))

    def cross_entropy(self, logits, targets, *, reduction, label_smoothing):
        return np.empty(np.shape(logits)[:1]) if reduction == "none" else np.empty(())

    def linear_attention_step(self, q, k, v, state, *, feature_map):
        B, H, Dk = np.shape(q)
        Dv = np.shape(v)[2]
        return np.empty((B, H, Dv)), (np.empty((B, H, Dk, Dv)), np.empty((B, H, Dk)))


# RMS below which a quantity is compared on an absolute scale. Some true gradients are
# pure cancellation: with one row, o_0 = v_0 whatever q_0 is, so dq is ~1e-8 of rounding
# noise in the reference and the kernel alike, and a relative error there means nothing.
# Below this floor the check becomes ||a - ref|| < tol * FLOOR_RMS * sqrt(n).
FLOOR_RMS = 1e-3


def rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    """||a - ref|| / max(||ref||, FLOOR_RMS * sqrt(n)) over the finite entries of ref; inf if
    a has a NaN, or an infinity where ref has not the same one (an infinite reference entry,
    such as the lse -inf of a query that sees no key, must be matched exactly)."""
    a, ref = np.asarray(a), np.asarray(ref)
    same_inf = np.isinf(ref) & (a == ref)
    if np.isnan(a).any() or np.isinf(a[~same_inf]).any() or np.isinf(ref[~same_inf]).any():
        return float("inf")
    a, ref = a[~same_inf], ref[~same_inf]
    denom = max(float(np.linalg.norm(ref)), FLOOR_RMS * np.sqrt(max(ref.size, 1)))
    return float(np.linalg.norm(a - ref) / denom)


def max_rel_err(res: Result, ref: Result) -> float:
    errs = [rel_err(a, b) for a, b in zip(res.outputs, ref.outputs)]
    errs += [rel_err(res.grads[n], ref.grads[n]) for n in ref.grads]
    return max(errs)


def bitwise_equal(a: Result, b: Result) -> bool:
    same = all(np.array_equal(x, y) for x, y in zip(a.outputs, b.outputs))
    return same and all(np.array_equal(a.grads[n], b.grads[n]) for n in a.grads)


def run_all(case: Case, device: str = "cpu") -> Tuple[Result, Result, Result]:
    inputs = make_inputs(case)
    return run_torch(case, inputs, device), run_jax(case, inputs), run_torch(case, inputs, device, reference=True)


RUNNERS: Dict[str, Callable] = {"torch": run_torch, "jax": run_jax}
