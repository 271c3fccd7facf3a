"""float64, CPU tier: the row ops compute in float64 for float64 inputs (fp32 accumulation
would put the finite differences of gradcheck at the level of fp32 rounding), so
torch.autograd.gradcheck and jax.test_util.check_grads (reverse mode, under
jax.enable_x64) run on them with their default tolerances; their results agree with torch's
own ops to a few float64 ulps. The attention ops refuse float64 with a TypeError."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads
from torch.autograd import gradcheck

import ato_jax
import ato_torch


def _r(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


_TARGETS = np.array([1, -100, 4, 0])


def _like(a, x):
    """``a`` (NumPy) as an array of x's framework, on x's device."""
    return torch.from_numpy(a).to(x.device) if isinstance(x, torch.Tensor) else jnp.asarray(a)


def _smoothed_z_loss(x, smoothing, z_loss):
    """torch's label-smoothed cross entropy plus z_loss * lse^2 averaged over the rows not
    ignored (-100)."""
    t = _like(_TARGETS, x)
    valid = (t != -100).to(x.dtype)
    lse2 = torch.logsumexp(x, -1).square()
    return torch.nn.functional.cross_entropy(x, t, label_smoothing=smoothing) + z_loss * (lse2 * valid).sum() / valid.sum()


_ANGLES = np.arange(3)[:, None] * 10000.0 ** (-np.arange(2) / 2)[None]

# (id, call(module, *arrays), float64 arrays differentiated, torch's own op or None)
CASES = [
    ("layer_norm", lambda m, x, w, b: m.layer_norm(x, w, b), (_r(2, 5), _r(5), _r(5)),
     lambda x, w, b: torch.nn.functional.layer_norm(x, (5,), w, b)),
    ("layer_norm looped", lambda m, x: m.layer_norm(x), (_r(2, 70),),
     lambda x: torch.nn.functional.layer_norm(x, (70,))),
    ("rms_norm", lambda m, x, w: m.rms_norm(x, w), (_r(3, 4), _r(4)),
     lambda x, w: torch.nn.functional.rms_norm(x, (4,), w, eps=1e-6)),
    ("dropout_residual_layer_norm p=0", lambda m, x, r, w, b: m.dropout_residual_layer_norm(x, r, w, b, p=0.0)[0],
     (_r(2, 5), _r(2, 5, seed=1), _r(5), _r(5)),
     lambda x, r, w, b: torch.nn.functional.layer_norm(x + r, (5,), w, b)),
    ("softmax", lambda m, x: m.softmax(x), (_r(3, 6),), lambda x: torch.softmax(x, -1)),
    ("softmax looped, traced temperature", lambda m, x, t: m.softmax(x, temperature=t),
     (_r(2, 70), np.float64(0.7)), lambda x, t: torch.softmax(x / t, -1)),
    ("swiglu", lambda m, g, u: m.swiglu(g, u), (_r(3, 5), _r(3, 5, seed=1)),
     lambda g, u: torch.nn.functional.silu(g) * u),
    ("rope", lambda m, q, k: m.rope(q, k, _like(np.cos(_ANGLES), q), _like(np.sin(_ANGLES), q)),
     (_r(1, 2, 3, 4), _r(1, 1, 3, 4, seed=1)), None),
    # smoothing and z_loss exact in fp32 (the GPU's float arguments; the interpreter's are fp64)
    ("cross_entropy", lambda m, x: m.cross_entropy(x, _like(_TARGETS, x), label_smoothing=0.125, z_loss=0.0078125),
     (_r(4, 6),), lambda x: _smoothed_z_loss(x, 0.125, 0.0078125)),
    # cap 2: its fp32 scalars (cap, 1 / cap) exact, so float64 all through
    ("cross_entropy softcap", lambda m, x: m.cross_entropy(3.0 * x, _like(_TARGETS, x), softcap=2.0), (_r(4, 6),),
     lambda x: torch.nn.functional.cross_entropy(2.0 * torch.tanh(3.0 * x / 2.0), _like(_TARGETS, x))),
]



def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradcheck_torch(case):
    _, call, arrays, native = case
    xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = call(ato_torch, *xs)
    assert all(o.dtype == torch.float64 for o in _tuple(out))
    if native is not None:
        want = native(*[x.detach() for x in xs])
        torch.testing.assert_close(out.detach(), want, rtol=1e-13, atol=1e-14)
    assert gradcheck(lambda *a: call(ato_torch, *a), xs)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_check_grads_jax(case):
    _, call, arrays, _ = case
    with jax.enable_x64(True):
        xs = [jnp.asarray(a, dtype=jnp.float64) for a in arrays]
        out = _tuple(call(ato_jax, *xs))
        assert all(o.dtype == jnp.float64 for o in out)
        want = _tuple(call(ato_torch, *[torch.tensor(a, dtype=torch.float64) for a in arrays]))
        for o, w in zip(out, want):  # the same kernels: the same bits
            np.testing.assert_array_equal(np.asarray(o), w.numpy())
        check_grads(lambda *a: call(ato_jax, *a), xs, order=1, modes=("rev",))


def test_attention_refuses_float64():
    q = torch.zeros(1, 1, 4, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="q: expected a floating dtype in .*got float64"):
        ato_torch.flash_attention(q, q, q)
