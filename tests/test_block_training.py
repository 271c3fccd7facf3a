"""A small language model block written once with ato_torch.nn and once with ato_jax.nn (CPU,
the interpreter): token embedding, RMSNorm -> CABAttention -> residual, RMSNorm -> SwiGLU ->
residual, RMSNorm, and the tied embedding's LinearCrossEntropyLoss. From the same initial
weights and data, three SGD steps give the same losses in both frameworks step by step
(1e-5 relative: the projections are each framework's own fp32 matmuls, the ato ops the same
kernels), and the loss falls."""

import numpy as np
import pytest
import torch

flax = pytest.importorskip("flax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import ato_jax.nn as jnn  # noqa: E402
import ato_torch.nn as tnn  # noqa: E402

V, H, HEADS, N, B = 96, 32, 2, 32, 2
ATTN = dict(block_size=16, keep=0.5)


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, H)
        self.norm1, self.norm2, self.norm3 = (tnn.RMSNorm(H, eps=1e-6) for _ in range(3))
        self.attn = tnn.CABAttention(H, HEADS, **ATTN)
        self.mlp = tnn.SwiGLU(H, 2 * H)
        self.loss = tnn.LinearCrossEntropyLoss(z_loss=1e-4)

    def forward(self, tokens, targets):
        h = self.embed(tokens)
        h = h + self.attn(self.norm1(h))
        h = h + self.mlp(self.norm2(h))
        return self.loss(self.norm3(h), self.embed.weight, targets)


class JaxBlock(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Param(jnp.zeros((V, H)))
        self.norm1, self.norm2, self.norm3 = (jnn.RMSNorm(H, epsilon=1e-6, rngs=rngs) for _ in range(3))
        self.attn = jnn.CABAttention(H, HEADS, rngs=rngs, **ATTN)
        self.mlp = jnn.SwiGLU(H, 2 * H, rngs=rngs)
        self.loss = jnn.LinearCrossEntropyLoss(z_loss=1e-4)

    def __call__(self, tokens, targets):
        h = jnp.take(self.embed[...], tokens, axis=0)
        h = h + self.attn(self.norm1(h))
        h = h + self.mlp(self.norm2(h))
        return self.loss(self.norm3(h), self.embed, targets)


def _copy(t: TorchBlock, j: JaxBlock):
    """The torch block's weights into the JAX block (Linear weights transposed as kernels)."""
    j.embed[...] = jnp.asarray(t.embed.weight.detach().numpy())
    for n in ("norm1", "norm2", "norm3"):
        getattr(j, n).scale[...] = jnp.asarray(getattr(t, n).weight.detach().numpy())
    for parent, names in ((("attn",), ("q_proj", "k_proj", "v_proj", "o_proj")),
                          (("mlp",), ("gate_proj", "up_proj", "down_proj"))):
        for n in names:
            getattr(getattr(j, parent[0]), n).kernel[...] = jnp.asarray(
                getattr(getattr(t, parent[0]), n).weight.detach().numpy().T)


def test_block_trains_alike_in_both_frameworks():
    torch.manual_seed(0)
    t_block = TorchBlock()
    with torch.no_grad():
        for p in (t_block.norm1.weight, t_block.norm2.weight, t_block.norm3.weight):
            p.uniform_(0.5, 1.5)
    j_block = JaxBlock(nnx.Rngs(0))
    _copy(t_block, j_block)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, V, (B, N))
    targets = np.concatenate([tokens[:, 1:], np.full((B, 1), -100)], 1)  # next-token, last ignored
    lr = 0.5

    t_losses = []
    tt, tg = torch.from_numpy(tokens), torch.from_numpy(targets)
    for _ in range(3):
        loss = t_block(tt, tg)
        t_block.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in t_block.parameters():
                p -= lr * p.grad
        t_losses.append(float(loss))

    @nnx.jit
    def step(model, tok, tgt):
        loss, grads = nnx.value_and_grad(lambda m: m(tok, tgt))(model)
        params = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - lr * g, params, grads))
        return loss

    j_losses = [float(step(j_block, jnp.asarray(tokens), jnp.asarray(targets))) for _ in range(3)]
    np.testing.assert_allclose(t_losses, j_losses, rtol=1e-5)
    assert t_losses[-1] < t_losses[0] - 0.1, t_losses
