"""ato_jax.nn, CPU tier: flax nnx modules on ato's ops against flax's own modules.

Same constructor arguments and parameter names (a state taken from flax's module updates
ato's and back); outputs and gradients of input and parameters within fp32 tolerance of
flax's (rows of 48: 1e-5); flax's dtype promotion; and a small model trained a few steps
with optax gives flax's losses step by step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

flax = pytest.importorskip("flax")
optax = pytest.importorskip("optax")
from flax import nnx  # noqa: E402

import ato_jax  # noqa: E402
from ato_jax import nn as ann  # noqa: E402

F = 48


def _x(*shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def _randomised(module, seed=1):
    """The module with its parameters set to random values (not the ones / zeros of init)."""
    state = nnx.state(module, nnx.Param)
    leaves, tree = jax.tree_util.tree_flatten(state)
    rng = np.random.default_rng(seed)
    nnx.update(module, jax.tree_util.tree_unflatten(
        tree, [jnp.asarray(rng.standard_normal(l.shape), l.dtype) for l in leaves]))
    return module


def _param_names(module):
    return sorted("/".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(module, nnx.Param)))


def _grads(module, x):
    return nnx.grad(lambda m, a: jnp.sum(m(a) * jnp.arange(a.shape[-1], dtype=jnp.float32)), argnums=(0, 1))(module, x)


def _assert_close(a, b, tol=1e-5, atol=None):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u, np.float32), np.asarray(v, np.float32), rtol=tol,
                                   atol=tol if atol is None else atol)


CASES = [
    ("LayerNorm", lambda mod, **kw: mod.LayerNorm(F, rngs=nnx.Rngs(0), **kw), {}),
    ("LayerNorm no bias, eps", lambda mod, **kw: mod.LayerNorm(F, use_bias=False, epsilon=1e-3, rngs=nnx.Rngs(0)), {}),
    ("RMSNorm", lambda mod, **kw: mod.RMSNorm(F, rngs=nnx.Rngs(0), **kw), {}),
    ("RMSNorm no scale", lambda mod, **kw: mod.RMSNorm(F, use_scale=False, rngs=nnx.Rngs(0)), {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_norm_modules_match_flax(case):
    _, make, _ = case
    ours, theirs = make(ann), _randomised(make(nnx))
    assert _param_names(ours) == _param_names(theirs)
    nnx.update(ours, nnx.state(theirs, nnx.Param))  # flax's state loads into ato's module
    x = _x(3, 5, F)
    _assert_close(ours(x), theirs(x))
    _assert_close(_grads(ours, x), _grads(theirs, x))
    y = nnx.jit(lambda m, a: m(a))(ours, x)
    _assert_close(y, theirs(x))


@pytest.mark.parametrize("name", ["LayerNorm", "RMSNorm"])
def test_norm_dtype_promotion_as_flax(name):
    """bf16 input, float32 parameters: a float32 result, normalised in float32, as flax's;
    dtype=bfloat16: a bf16 result."""
    x = _x(4, F, dtype=jnp.bfloat16)
    for kw in ({}, {"dtype": jnp.bfloat16}):
        ours, theirs = getattr(ann, name)(F, rngs=nnx.Rngs(0), **kw), getattr(nnx, name)(F, rngs=nnx.Rngs(0), **kw)
        a, b = ours(x), theirs(x)
        assert a.dtype == b.dtype, (kw, a.dtype, b.dtype)
        _assert_close(a, b, 1e-5 if a.dtype == jnp.float32 else 2e-2)


def test_swiglu_module():
    """ato_jax.nn.SwiGLU is down_proj(silu(gate_proj(x)) * up_proj(x)) with its own nnx.Linear
    layers, gradients included."""
    m = _randomised(ann.SwiGLU(F, 64, rngs=nnx.Rngs(0)))
    assert _param_names(m) == ["down_proj/kernel", "gate_proj/kernel", "up_proj/kernel"]

    def reference(mod, a):
        return mod.down_proj(jax.nn.silu(mod.gate_proj(a)) * mod.up_proj(a))
    x = _x(6, F)
    _assert_close(m(x), reference(m, x))
    g = nnx.grad(lambda mod, a: jnp.sum(mod(a) ** 2))(m, x)
    g_ref = nnx.grad(lambda mod, a: jnp.sum(reference(mod, a) ** 2))(m, x)
    _assert_close(g, g_ref, 1e-4)


def test_trains_with_optax_as_flax():
    """Linear -> LayerNorm -> Linear -> RMSNorm, the same initial weights and data, four Adam
    steps under nnx.jit: the losses of the ato model follow the flax model's step by step."""
    class Block(nnx.Module):
        def __init__(self, mod, rngs):
            self.inp, self.ln = nnx.Linear(16, F, rngs=rngs), mod.LayerNorm(F, rngs=rngs)
            self.out, self.rms = nnx.Linear(F, 8, rngs=rngs), mod.RMSNorm(8, rngs=rngs)

        def __call__(self, x):
            return self.rms(self.out(jax.nn.gelu(self.ln(self.inp(x)))))

    x, y = _x(32, 16, seed=2), _x(32, 8, seed=3)
    losses = []
    for mod in (ann, nnx):
        model = Block(mod, nnx.Rngs(7))
        opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

        @nnx.jit
        def step(model, opt):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            opt.update(model, grads)
            return loss
        losses.append([float(step(model, opt)) for _ in range(4)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    assert losses[0][-1] < losses[0][0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="reduction_axes: ato normalises over the last axis only"):
        ann.LayerNorm(F, reduction_axes=0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="LayerNorm: input: expected a last axis of 48 features, got shape"):
        ann.LayerNorm(F, rngs=nnx.Rngs(0))(_x(2, 7))


@pytest.mark.parametrize("num_kv_heads", [None, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_matches_flax(num_kv_heads, causal):
    """flax's MultiHeadAttention with ato's flash attention as attention_fn: the same
    parameters (a flax module's state loads), output and gradients (input and parameters)
    within fp32 tolerance at their scale; cross-attention with another key length."""
    kw = dict(num_kv_heads=num_kv_heads, decode=False)
    theirs = _randomised(nnx.MultiHeadAttention(4, 32, rngs=nnx.Rngs(0), **kw))
    ours = ann.MultiHeadAttention(4, 32, rngs=nnx.Rngs(1), **kw)
    assert _param_names(ours) == _param_names(theirs)
    nnx.update(ours, nnx.state(theirs, nnx.Param))
    x = _x(2, 10, 32, seed=4)

    def loss(m, a):
        return jnp.sum(m(a, is_causal=causal) ** 2)
    scale = float(jnp.abs(theirs(x, is_causal=causal)).max())
    _assert_close(ours(x, is_causal=causal), theirs(x, is_causal=causal), atol=1e-5 * max(1.0, scale))
    ga, gb = (jax.tree_util.tree_leaves(nnx.grad(loss, argnums=(0, 1))(m, x)) for m in (ours, theirs))
    # at the scale of the largest gradient: the key bias's is 0 in exact arithmetic (softmax
    # ignores a per-query constant), both frameworks' rounding noise of the others' size
    g_scale = max(float(jnp.abs(b).max()) for b in gb)
    for a, b in zip(ga, gb):
        _assert_close(a, b, atol=1e-5 * max(1.0, g_scale))
    if not causal:
        kv = _x(2, 7, 32, seed=5)
        _assert_close(ours(x, kv), theirs(x, kv), atol=1e-5 * max(1.0, scale))


def test_dot_product_attention_mask_and_bias_match_flax():
    """flax's mask (True: attend; [batch..., H, Nq, Nk] and broadcast forms) and bias, against
    flax's own dot_product_attention, every query keeping a key."""
    rng = np.random.default_rng(6)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 3, 7, 4, 16)).astype(np.float32)) for _ in range(3))
    mask = rng.random((2, 3, 4, 7, 7)) < 0.6
    mask[..., 0] = True
    bias = jnp.asarray(rng.standard_normal((2, 3, 1, 7, 7)).astype(np.float32))
    for m in (jnp.asarray(mask), jnp.asarray(mask[:, :, :1])):
        got = ann.dot_product_attention(q, k, v, bias=bias, mask=m)
        want = nnx.dot_product_attention(q, k, v, bias=bias, mask=m)
        _assert_close(got, want, atol=1e-5)
    # batch axes broadcast too (flax's own function takes them only whole)
    part = jnp.asarray(mask[:1, :, :1])
    np.testing.assert_array_equal(ann.dot_product_attention(q, k, v, bias=bias[:1], mask=part),
                                  ann.dot_product_attention(q, k, v, bias=jnp.broadcast_to(bias[:1], bias.shape),
                                                            mask=jnp.broadcast_to(part, (2, 3, 4, 7, 7))))


def test_dot_product_attention_refuses_what_it_lacks():
    x = _x(1, 5, 16)
    with pytest.raises(ValueError, match="broadcast_dropout: ato draws one dropout mask per batch element"):
        ann.MultiHeadAttention(2, 16, dropout_rate=0.1, decode=False, rngs=nnx.Rngs(0))(x, deterministic=False)


def test_dot_product_attention_dropout():
    """dropout_rate with dropout_rng (broadcast_dropout=False) is flash_attention's dropout keyed
    by that key; deterministic=True has none; without a key a ValueError names dropout_rng."""
    rng = np.random.default_rng(8)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 7, 4, 16)).astype(np.float32)) for _ in range(3))
    key = jax.random.key(3)
    got = ann.dot_product_attention(q, k, v, dropout_rng=key, dropout_rate=0.2, broadcast_dropout=False,
                                    deterministic=False)
    want = ato_jax.flash_attention(q, k, v, layout="bnhd", dropout_p=0.2, seed=key)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    plain = ann.dot_product_attention(q, k, v, dropout_rng=key, dropout_rate=0.2, deterministic=True)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(ato_jax.flash_attention(q, k, v, layout="bnhd")))
    with pytest.raises(ValueError, match="dropout_rng: expected a jax.random key"):
        ann.dot_product_attention(q, k, v, dropout_rate=0.2, broadcast_dropout=False, deterministic=False)
    # nnx.MultiHeadAttention passes its rngs' dropout stream: a new mask each call
    m = ann.MultiHeadAttention(2, 16, dropout_rate=0.2, broadcast_dropout=False, decode=False,
                               rngs=nnx.Rngs(0, dropout=1))
    x = _x(1, 5, 16)
    a, b, c = m(x, deterministic=False), m(x, deterministic=False), m(x, deterministic=True)
    assert not np.array_equal(np.asarray(a), np.asarray(b)) and not np.array_equal(np.asarray(a), np.asarray(c))


@pytest.mark.parametrize("layer", ["LinearAttention", "BasedAttention"])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_layers_match_across_frameworks(layer, causal):
    """ato_torch.nn's and ato_jax.nn's linear-attention layers with the same weights (torch's
    nn.Linear weights, transposed, as nnx kernels): outputs, final states and input gradients
    agree with each other and with the float64 reference (projections, then
    ato_core's reference math), within fp32 tolerance at their scale."""
    import torch

    import ato_torch.nn as tnn
    from ato_core.ops.based.reference import based_attention
    from ato_core.ops.linear_attention.reference import linear_attention

    kw = {"feature_dim": 4} if layer == "BasedAttention" else {}
    torch.manual_seed(5)
    t_layer = getattr(tnn, layer)(32, 4, causal=causal, **kw)
    j_layer = getattr(ann, layer)(32, 4, causal=causal, rngs=nnx.Rngs(0), **kw)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(j_layer, name).kernel[...] = jnp.asarray(getattr(t_layer, name).weight.detach().numpy().T)
    x = np.random.default_rng(6).standard_normal((2, 9, 32)).astype(np.float32)
    out_state = causal
    xt = torch.from_numpy(x).requires_grad_()
    t_out = t_layer(xt, output_final_state=out_state)
    j_out = j_layer(jnp.asarray(x), output_final_state=out_state)

    # float64 reference: the projections, then the reference attention
    W = {n: getattr(t_layer, n).weight.detach().double().numpy() for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    xd = x.astype(np.float64)

    def heads(t):
        return np.swapaxes(t.reshape(2, 9, 4, -1), 1, 2)
    q, k, v = (heads(xd @ W[n].T) for n in ("q_proj", "k_proj", "v_proj"))
    if layer == "LinearAttention":
        r = linear_attention(q, k, v, causal=causal, feature_map="elu", output_final_state=out_state)
    else:
        r = based_attention(q, k, v, causal=causal, output_final_state=out_state)
    o, state = r if out_state else (r, None)
    want = np.swapaxes(o, 1, 2).reshape(2, 9, 32) @ W["o_proj"].T

    t_y, t_state = t_out if out_state else (t_out, None)
    j_y, j_state = j_out if out_state else (j_out, None)
    scale = float(np.abs(want).max())
    for got in (t_y.detach().numpy(), np.asarray(j_y)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, scale))
    if out_state:
        for got_t, got_j, w in zip(t_state, j_state, state):
            s = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(got_t.detach().numpy(), w, rtol=1e-4, atol=1e-5 * s)
            np.testing.assert_allclose(np.asarray(got_j), w, rtol=1e-4, atol=1e-5 * s)
    g = np.random.default_rng(7).standard_normal((2, 9, 32)).astype(np.float32)
    t_g = torch.autograd.grad(t_y, xt, torch.from_numpy(g))[0].numpy()
    _, back = jax.vjp(lambda a: j_layer(a), jnp.asarray(x))
    j_g = np.asarray(back(jnp.asarray(g))[0])
    np.testing.assert_allclose(j_g, t_g, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(t_g).max())))
