"""CABAttention and DecodeAttention, CPU tier, in ato_torch.nn and ato_jax.nn: the same weights
give the same layer in both frameworks (fp32, 1e-5 relative: the projections are each
framework's own matmuls); CABAttention with keep=1 is causal attention; decoding token by
token through DecodeAttention over a paged cache gives causal attention's rows of the whole
sequence."""

import numpy as np
import pytest
import torch

flax = pytest.importorskip("flax")
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import ato_jax.nn as jnn  # noqa: E402
import ato_torch  # noqa: E402
import ato_torch.nn as tnn  # noqa: E402

HIDDEN, HEADS, KV_HEADS = 64, 4, 2
NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")


def _pair(kind, **kw):
    """The torch layer and the JAX layer with its weights (nn.Linear's, transposed, as kernels)."""
    torch.manual_seed(3)
    t = getattr(tnn, kind)(HIDDEN, HEADS, KV_HEADS, **kw)
    j = getattr(jnn, kind)(HIDDEN, HEADS, KV_HEADS, rngs=nnx.Rngs(0), **kw)
    for n in NAMES:
        getattr(j, n).kernel[...] = jnp.asarray(getattr(t, n).weight.detach().numpy().T)
    return t, j


def _causal_attention(t_layer, x):
    """The layer's projections around ato_torch.flash_attention (causal), x [B, N, hidden]."""
    D = HIDDEN // HEADS
    q, k, v = (getattr(t_layer, n)(x).unflatten(-1, (-1, D)).transpose(1, 2) for n in NAMES[:3])
    return t_layer.o_proj(ato_torch.flash_attention(q, k, v, causal=True).transpose(1, 2).flatten(-2))


def test_cab_attention_layers():
    x = np.random.default_rng(4).standard_normal((2, 48, HIDDEN)).astype(np.float32)
    t, j = _pair("CABAttention", block_size=16, keep=0.5)
    yt = t(torch.from_numpy(x)).detach().numpy()
    yj = np.asarray(j(jnp.asarray(x)))
    np.testing.assert_allclose(yt, yj, rtol=1e-5, atol=1e-5)
    # every block kept: causal attention
    full, _ = _pair("CABAttention", block_size=16, keep=1.0)
    with torch.no_grad():
        np.testing.assert_allclose(full(torch.from_numpy(x)).numpy(), _causal_attention(full, torch.from_numpy(x)).numpy(),
                                   rtol=1e-5, atol=1e-5)
    # trains: gradients of the weights
    xt = torch.from_numpy(x).requires_grad_()
    t(xt).sum().backward()
    assert all(getattr(t, n).weight.grad is not None and torch.isfinite(getattr(t, n).weight.grad).all() for n in NAMES)


def test_decode_attention_layers_decode_causal_attention():
    """A paged cache (block size 16, blocks shuffled, 2 sequences of 19 tokens: into a second
    block) filled one token per step: each step's output is causal attention's row for that
    token, in both frameworks, and both frameworks' caches hold the same keys and values."""
    B, N, bs = 2, 19, 16
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, N, HIDDEN)).astype(np.float32)
    t, j = _pair("DecodeAttention")
    per_seq = -(-N // bs)
    table = rng.permutation(B * per_seq + 1)[:B * per_seq].reshape(B, per_seq).astype(np.int32)
    D = HIDDEN // HEADS
    shape = (B * per_seq + 1, bs, KV_HEADS, D)
    kt, vt = torch.zeros(shape), torch.zeros(shape)
    kj, vj = jnp.zeros(shape), jnp.zeros(shape)
    ys_t, ys_j = [], []
    with torch.no_grad():
        want = _causal_attention(t, torch.from_numpy(x)).numpy()
        for i in range(N):
            lens = np.full(B, i, np.int32)
            y, kt, vt = t(torch.from_numpy(x[:, i]), kt, vt, torch.from_numpy(table), torch.from_numpy(lens))
            ys_t.append(y.numpy())
            y, kj, vj = j(jnp.asarray(x[:, i]), kj, vj, jnp.asarray(table), jnp.asarray(lens))
            ys_j.append(np.asarray(y))
    ys_t, ys_j = np.stack(ys_t, 1), np.stack(ys_j, 1)
    np.testing.assert_allclose(ys_t, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ys_j, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kt.numpy(), np.asarray(kj), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vt.numpy(), np.asarray(vj), rtol=1e-5, atol=1e-6)


def test_decode_layer_takes_a_prefill_layers_state_dict():
    """DecodeAttention has CABAttention's keys: a prefill layer's weights load into it."""
    cab = tnn.CABAttention(HIDDEN, HEADS, KV_HEADS)
    dec = tnn.DecodeAttention(HIDDEN, HEADS, KV_HEADS)
    dec.load_state_dict(cab.state_dict())
    assert sorted(dec.state_dict()) == sorted(cab.state_dict())


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_layers_name_bad_arguments(framework):
    if framework == "torch":
        make = lambda kind, *a: getattr(tnn, kind)(*a)  # noqa: E731
        arr = torch.zeros
    else:
        make = lambda kind, *a: getattr(jnn, kind)(*a, rngs=nnx.Rngs(0))  # noqa: E731
        arr = jnp.zeros
    with pytest.raises(ValueError, match="num_kv_heads"):
        make("CABAttention", HIDDEN, HEADS, 3)
    with pytest.raises(ValueError, match="hidden_size"):
        make("DecodeAttention", 30, HEADS)
    with pytest.raises(ValueError, match="x: expected"):
        make("CABAttention", HIDDEN, HEADS)(arr((2, 16, 32)))
    dec = make("DecodeAttention", HIDDEN, HEADS, KV_HEADS)
    xp = torch if framework == "torch" else jnp
    table = xp.asarray([[0, 1], [2, 3]], dtype=xp.int32)
    x, cache = arr((2, HIDDEN)), arr((4, 16, KV_HEADS, 16))

    def lens(*values):
        return xp.asarray(values, dtype=xp.int32)
    with pytest.raises(ValueError, match="k_cache: expected .num_blocks, block_size, 2, 16."):
        dec(x, arr((4, 16, HEADS, 16)), arr((4, 16, HEADS, 16)), table, lens(0, 0))
    with pytest.raises(ValueError, match=r"seq_lens: expected lengths in \[0, 32\) \(room for the new token"):
        dec(x, cache, cache, table, lens(3, 32))
    with pytest.raises(ValueError, match="block_table: expected block ids in"):
        dec(x, cache, cache, table * 3, lens(3, 20))  # the second sequence's next block: id 9 of 4


def test_jax_decode_layer_under_jit_never_overwrites_a_token():
    """Under jax.jit the lengths are not on the host: a sequence without room for the new
    token writes nothing (instead of jax's clamped index writing over its last token)."""
    dec = jnn.DecodeAttention(HIDDEN, HEADS, KV_HEADS, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(7)
    cache = jnp.asarray(rng.standard_normal((4, 16, KV_HEADS, 16)), jnp.float32)
    table = jnp.asarray([[0, 1], [2, 3]], jnp.int32)
    step = nnx.jit(lambda m, x, kc, vc, t, n: m(x, kc, vc, t, n))
    _, k_new, v_new = step(dec, jnp.asarray(rng.standard_normal((2, HIDDEN)), jnp.float32), cache, cache, table,
                           jnp.asarray([5, 32], jnp.int32))
    changed = np.argwhere(np.any(np.asarray(k_new) != np.asarray(cache), axis=(2, 3)))
    assert changed.tolist() == [[0, 5]]  # sequence 0's token 5 in block 0; sequence 1 (full): nothing
    np.testing.assert_array_equal(np.asarray(v_new)[2:], np.asarray(cache)[2:])
