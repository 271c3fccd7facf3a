"""layer_norm, rms_norm, dropout_residual_layer_norm: the declarations.

kernels.py (Triton), plans.py (checks, grids, settings), reference.py, cases.py (test cases).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ato_core.op import Op

from . import plans, reference


class Norm(NamedTuple):
    rms: bool
    eps: float
    p: float = 0.0
    seed: Optional[int] = 0  # None: the seed is an array (the input "seed")


def _forward(s, st: Norm, target):
    return plans.forward_plan(s["x"], s["residual"], s["weight"], s["bias"], s.get("seed"), rms=st.rms, eps=st.eps,
                              p=st.p, seed=st.seed, target=target)


def _backward(s, st: Norm, target):
    has_res = s["residual"] is not None
    return plans.backward_plan(s["h" if has_res else "x"], s["weight"], s["bias"], rms=st.rms,
                               has_residual=has_res, has_dh=s.get("dh") is not None, p=st.p, seed=st.seed,
                               target=target, seed_array=s.get("seed"))


def layer_norm(x, weight=None, bias=None, *, eps=1e-5):
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

    x: any shape [..., N], N in 0..65536, fp32/fp16/bf16 (fp32 statistics) or fp64 (fp64
    throughout); weight, bias: [N] or None. Returns y (x's shape and dtype); differentiable
    in x, weight and bias (weight and bias gradients reduced in a fixed order:
    deterministic)."""
    return (x, None, weight, bias), Norm(False, eps)


def rms_norm(x, weight=None, *, eps=1e-6):
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. Shapes as layer_norm."""
    return (x, None, weight, None), Norm(True, eps)


def dropout_residual_layer_norm(x, residual, weight, bias, *, p=0.0, seed=0, eps=1e-5, training=True):
    """h = dropout(x) + residual and y = layer_norm(h); returns (y, h).

    x, residual: [..., N] of one dtype; weight, bias: [N] or None. Dropout (training and
    p > 0) keeps an element iff Philox U(0,1) on (seed, its flat index) is >= p and scales
    it by 1/(1-p): the same seed gives the same mask in both frameworks, on CPU and GPU;
    the backward draws it again (no mask is stored). p in [0, 1) (a Python float).

    seed: a Python int in [0, 2**31) (fixed: in JAX it selects the mask at trace time); or,
    read by the kernel (so one compiled kernel serves every seed: traced under jax.jit
    without retrace, updated in place under CUDA graphs), a 0-d int32/int64 array or
    tensor on x's device, in JAX a jax.random key (typed, or raw uint32 [2]), in torch a
    torch.Generator (a seed is drawn from it on x's device, advancing it). Seed s gives the
    same mask as an int, a 0-d array or jax.random.key(s)."""
    if isinstance(seed, int):
        return (x, residual, weight, bias, None), Norm(False, eps, plans.check_dropout(p, seed, training), seed)
    return (x, residual, weight, bias, seed), Norm(False, eps, plans.check_dropout(p, None, training), None)


_INPUTS = ("x", "residual", "weight", "bias")
_RESULTS = ("y", "h", "mean", "rstd")
_common = dict(inputs=_INPUTS, results=_RESULTS, forward=_forward, backward=_backward, family="norms")

_common = dict(_common, differentiable=_INPUTS)

_plain = dict(_common, saved=("x", "weight", "mean", "rstd"), returns=("y",), optional=("residual", "weight", "bias"),
              batch=("x",), batch_min_rank=2)

LAYER_NORM = Op(layer_norm, reference=reference.layer_norm, **_plain)
RMS_NORM = Op(rms_norm, reference=reference.rms_norm, **_plain)
DROPOUT_RESIDUAL_LAYER_NORM = Op(
    dropout_residual_layer_norm, saved=("h", "weight", "mean", "rstd", "seed"), returns=("y", "h"),
    optional=("weight", "bias", "seed"), optional_cotangents=(("dh",),), random=("seed",),
    reference=reference.dropout_residual_layer_norm_seeded, **dict(_common, inputs=(*_INPUTS, "seed")))

OPS = (LAYER_NORM, RMS_NORM, DROPOUT_RESIDUAL_LAYER_NORM)
