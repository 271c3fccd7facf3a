"""Zero-size inputs, CPU tier: every op at shapes with an empty axis, in both frameworks.

Each case calls the op in ato_torch and in ato_jax on the same inputs and takes the gradient
of every float input for all-ones cotangents (torch.autograd.grad; jax.vjp under jit). The
results must have the shapes and dtypes the op gives any input (empty where an axis of the
output is empty), the values that the math gives over nothing (a sum of no terms is 0, a
mean NaN, attention over no key o = 0 and lse = -inf, a state passed on unchanged), and the
two frameworks the same bits. Empty results come from no kernel launch (Launch.empty).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch


def _r(*shape):
    return np.random.default_rng(len(shape) + sum(shape)).standard_normal(shape).astype(np.float32)


def _i(*shape):
    return np.zeros(shape, np.int32)


def _state(B, H, F, Dv):
    return np.abs(_r(B, H, F, Dv)) + 1, np.abs(_r(B, H, F)) + 1


def _zeros(*names):
    """Asserts the named outputs / gradients are all zero."""
    def check(out, grads):
        for n in names:
            a = (out | grads)[n]
            assert a.size and np.all(a == 0), (n, a)
    return check


def _ce_check(reduction):
    def check(out, grads):
        loss = out["out0"]
        if reduction == "mean":  # torch: the mean over zero tokens is NaN
            assert loss.shape == () and np.isnan(loss)
        elif reduction == "sum":
            assert loss.shape == () and loss == 0
        else:
            assert loss.shape == (2, 0)
    return check


def _passes_state(out, grads):
    """N = 0 with an initial state: the final state is the initial one, its gradient the
    cotangent (ones)."""
    np.testing.assert_array_equal(out["out1"], out["S0"])
    np.testing.assert_array_equal(out["out2"], out["z0"])
    assert np.all(grads["S0"] == 1) and np.all(grads["z0"] == 1)


def _no_key(out, grads):
    """Nk = 0: every query sees no key: o = 0, lse = -inf, dq = 0; dk, dv empty."""
    assert np.all(out["out0"] == 0) and np.all(out["out1"] == -np.inf) and np.all(grads["q"] == 0)
    assert grads["k"].size == 0


# (id, op name, array inputs {name: numpy}, call(op, arrays) -> output(s), value check or None)
CASES = [
    ("layer_norm rows0", "layer_norm", {"x": _r(0, 48), "w": _r(48), "b": _r(48)},
     lambda f, a: f(a["x"], a["w"], a["b"]), _zeros("w", "b")),
    ("layer_norm width0", "layer_norm", {"x": _r(3, 0), "w": _r(0), "b": _r(0)},
     lambda f, a: f(a["x"], a["w"], a["b"]), None),
    ("rms_norm rows0 3-D", "rms_norm", {"x": _r(2, 0, 5), "w": _r(5)}, lambda f, a: f(a["x"], a["w"]), _zeros("w")),
    ("dropout_residual_layer_norm rows0", "dropout_residual_layer_norm", {"x": _r(0, 8), "r": _r(0, 8), "w": _r(8)},
     lambda f, a: f(a["x"], a["r"], a["w"], None, p=0.5, seed=3), _zeros("w")),
    ("softmax rows0", "softmax", {"x": _r(0, 7)}, lambda f, a: f(a["x"]), None),
    ("softmax width0 traced", "softmax", {"x": _r(3, 0), "t": np.float32(0.5)},
     lambda f, a: f(a["x"], temperature=a["t"]), _zeros("t")),
    ("swiglu", "swiglu", {"g": _r(0, 4), "u": _r(0, 4)}, lambda f, a: f(a["g"], a["u"]), None),
    ("rope B0", "rope", {"q": _r(0, 2, 5, 8), "k": _r(0, 1, 5, 8), "c": _r(5, 4)},
     lambda f, a: f(a["q"], a["k"], a["c"], a["c"]), None),
    ("rope N0", "rope", {"q": _r(2, 2, 0, 8), "k": _r(2, 1, 0, 8), "c": _r(5, 8)},
     lambda f, a: f(a["q"], a["k"], a["c"], a["c"]), None),
    *[(f"cross_entropy {red}", "cross_entropy", {"x": _r(2, 0, 10), "t": _i(2, 0)},
       lambda f, a, red=red: f(a["x"], a["t"], reduction=red, z_loss=1e-3, softcap=5.0), _ce_check(red))
      for red in ("mean", "sum", "none")],
    *[(f"linear_cross_entropy {red}", "linear_cross_entropy",
       {"x": _r(2, 0, 8), "w": _r(10, 8), "b": _r(10), "t": _i(2, 0)},
       lambda f, a, red=red: f(a["x"], a["w"], a["t"], bias=a["b"], reduction=red, z_loss=1e-3, softcap=5.0),
       lambda out, grads, red=red: (_ce_check(red)(out, grads), _zeros("w", "b")(out, grads)))
      for red in ("mean", "sum", "none")],
    *[(f"flash_attention {what} causal={c}", "flash_attention",
       {"q": _r(B, 2, Nq, 16), "k": _r(B, 1, Nk, 16), "v": _r(B, 1, Nk, 16)},
       lambda f, a, c=c: f(a["q"], a["k"], a["v"], causal=c, return_lse=True), check)
      for what, B, Nq, Nk, check in (("B0", 0, 5, 5, None), ("Nq0", 1, 0, 5, _zeros("k", "v")),
                                     ("Nk0", 1, 5, 0, _no_key))
      for c in (False, True)],
    ("flash_attention B0 dropout", "flash_attention",
     {"q": _r(0, 2, 5, 16), "k": _r(0, 1, 5, 16), "v": _r(0, 1, 5, 16)},
     lambda f, a: f(a["q"], a["k"], a["v"], causal=True, dropout_p=0.1, seed=3), None),
    *[(f"flash_attention_varlen {what} causal={c}", "flash_attention_varlen",
       {"q": _r(Tq, 2, 16), "k": _r(Tk, 1, 16), "v": _r(Tk, 1, 16), "cq": np.array(cq, np.int32),
        "ck": np.array(ck, np.int32)},
       lambda f, a, c=c: f(a["q"], a["k"], a["v"], a["cq"], a["ck"], 5, 5, causal=c, return_lse=True), check)
      for what, Tq, Tk, cq, ck, check in (("Tq0", 0, 5, (0, 0), (0, 5), _zeros("k", "v")),
                                          ("Tk0", 5, 0, (0, 5), (0, 0), _no_key),
                                          ("B0", 3, 4, (0,), (0,), _zeros("out0", "q", "k", "v")))
      for c in (False, True)],
    ("elu_plus_one", "elu_plus_one", {"x": _r(0, 4)}, lambda f, a: f(a["x"]), None),
    ("taylor_feature_map", "taylor_feature_map", {"x": _r(3, 0, 4)}, lambda f, a: f(a["x"]), None),
    *[(f"linear_attention {what} causal={c}", "linear_attention",
       {"q": _r(B, 2, N, 8), "k": _r(B, 2, N, 8), "v": _r(B, 2, N, 8)},
       lambda f, a, c=c: f(a["q"], a["k"], a["v"], causal=c, output_final_state=True), None)
      for what, B, N in (("B0", 0, 8), ("N0", 1, 0)) for c in (False, True)],
    ("linear_attention N0 initial_state", "linear_attention",
     dict(zip(("q", "k", "v", "S0", "z0"), (_r(1, 2, 0, 8), _r(1, 2, 0, 8), _r(1, 2, 0, 4), *_state(1, 2, 8, 4)))),
     lambda f, a: f(a["q"], a["k"], a["v"], causal=True, initial_state=(a["S0"], a["z0"]), output_final_state=True),
     _passes_state),
    *[(f"based_attention {what} causal={c}", "based_attention",
       {"q": _r(B, 2, N, 4), "k": _r(B, 2, N, 4), "v": _r(B, 2, N, 8)},
       lambda f, a, c=c: f(a["q"], a["k"], a["v"], causal=c, output_final_state=True), None)
      for what, B, N in (("B0", 0, 8), ("N0", 1, 0)) for c in (False, True)],
    ("based_attention N0 initial_state", "based_attention",
     dict(zip(("q", "k", "v", "S0", "z0"), (_r(1, 2, 0, 4), _r(1, 2, 0, 4), _r(1, 2, 0, 8), *_state(1, 2, 21, 8)))),
     lambda f, a: f(a["q"], a["k"], a["v"], initial_state=(a["S0"], a["z0"]), output_final_state=True),
     _passes_state),
    ("linear_attention_step B0", "linear_attention_step",
     dict(zip(("q", "k", "v", "S", "z"), (_r(0, 2, 8), _r(0, 2, 8), _r(0, 2, 4), *_state(0, 2, 8, 4)))),
     lambda f, a: f(a["q"], a["k"], a["v"], (a["S"], a["z"])), None),
    ("based_step B0", "based_step",
     dict(zip(("q", "k", "v", "S", "z"), (_r(0, 2, 4), _r(0, 2, 4), _r(0, 2, 8), *_state(0, 2, 21, 8)))),
     lambda f, a: f(a["q"], a["k"], a["v"], (a["S"], a["z"])), None),
    ("decode_attention B0", "decode_attention",
     {"q": _r(0, 4, 8), "kc": _r(4, 16, 2, 8), "vc": _r(4, 16, 2, 8), "table": _i(0, 2), "lens": _i(0)},
     lambda f, a: f(a["q"], a["kc"], a["vc"], a["table"], a["lens"], return_lse=True), None),
    ("merge_attention_states rows0", "merge_attention_states",
     {"oa": _r(0, 3, 8), "la": _r(0, 3), "ob": _r(0, 3, 8), "lb": _r(0, 3)},
     lambda f, a: f(a["oa"], a["la"], a["ob"], a["lb"]), None),
    *[(f"max_l2_coarsen {what}", "max_l2_coarsen", {"x": _r(*shape)}, lambda f, a: f(a["x"], 16), None)
      for what, shape in (("B0", (0, 2, 64, 16)), ("N0", (1, 2, 0, 16)))],
    ("block_sparse_attention B0", "block_sparse_attention",
     {"q": _r(0, 2, 64, 16), "k": _r(0, 2, 64, 16), "v": _r(0, 2, 64, 16), "m": np.ones((0, 2, 4, 4), bool)},
     lambda f, a: f(a["q"], a["k"], a["v"], a["m"], block_size=16), None),
    ("cab_attention B0", "cab_attention", {"q": _r(0, 2, 64, 16), "k": _r(0, 2, 64, 16), "v": _r(0, 2, 64, 16)},
     lambda f, a: f(a["q"], a["k"], a["v"], block_size=16), None),
    ("curvature_block_mask B0", "curvature_block_mask", {"q": _r(0, 2, 64, 16), "k": _r(0, 2, 64, 16)},
     lambda f, a: f(a["q"], a["k"], block_size=16), None),
]

FORWARD_ONLY = ("decode_attention", "merge_attention_states", "curvature_block_mask")
# float inputs the op treats as constants (rope's cos / sin tables): no gradient
CONSTANTS = {("rope", "c")}


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    return [out]


def _torch(op, arrays, call, device):
    t = {n: torch.from_numpy(np.array(a)).to(device) for n, a in arrays.items()}
    diff = [n for n, a in t.items() if a.is_floating_point() and op not in FORWARD_ONLY]
    for n in diff:
        t[n].requires_grad_()
    outs = _flat(call(getattr(ato_torch, op), t))
    grads = {}
    if diff:
        float_outs = [o for o in outs if o.is_floating_point()]
        assert all(o.requires_grad for o in float_outs), op
        got = torch.autograd.grad(float_outs, [t[n] for n in diff], [torch.ones_like(o) for o in float_outs],
                                  allow_unused=True)
        for n, g in zip(diff, got):  # a gradient for every input but the constants
            assert (g is None) == ((op, n) in CONSTANTS), (op, n)
        grads = {n: np.zeros(tuple(t[n].shape), np.float32) if g is None else g.cpu().numpy()
                 for n, g in zip(diff, got)}
    return [o.detach().cpu().numpy() for o in outs], grads


def _jax(op, arrays, call):
    names = list(arrays)
    diff = [n for n in names if np.issubdtype(arrays[n].dtype, np.floating) and op not in FORWARD_ONLY]
    fixed = {n: jnp.asarray(a) for n, a in arrays.items() if n not in diff}

    def f(*xs):
        return _flat(call(getattr(ato_jax, op), {**fixed, **dict(zip(diff, xs))}))

    xs = [jnp.asarray(arrays[n]) for n in diff]
    if not diff:
        return [np.asarray(o) for o in jax.jit(f)()], {}

    def vjp(*xs):
        outs, back = jax.vjp(f, *xs)
        return outs, back([jnp.ones_like(o) if jnp.issubdtype(o.dtype, jnp.floating) else
                           np.zeros(o.shape, jax.dtypes.float0) for o in outs])
    outs, grads = jax.jit(vjp)(*xs)
    return [np.asarray(o) for o in outs], {n: np.asarray(g) for n, g in zip(diff, grads)}


def run_case(case, device="cpu"):
    """Runs one case in both frameworks on ``device`` ("cpu", or "cuda": JAX's default device
    then) and checks it."""
    _, op, arrays, call, check = case
    t_out, t_grads = _torch(op, arrays, call, device)
    j_out, j_grads = _jax(op, arrays, call)
    assert any(o.size == 0 for o in t_out) or check is not None  # the case has an empty result
    assert [(o.shape, o.dtype) for o in t_out] == [(o.shape, o.dtype) for o in j_out]
    for a, b in zip(t_out, j_out):
        np.testing.assert_array_equal(a, b)
    for n, g in t_grads.items():
        assert g.shape == arrays[n].shape, (n, g.shape)
        np.testing.assert_array_equal(g, j_grads[n])
    if check is not None:
        check({**{f"out{i}": o for i, o in enumerate(t_out)}, **arrays}, t_grads)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_empty(case):
    run_case(case)


def test_every_op_has_an_empty_case():
    from ato_core.ops import OPS

    covered = {c[1] for c in CASES}
    assert set(OPS) <= covered, sorted(set(OPS) - covered)
