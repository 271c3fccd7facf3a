"""A small transformer block written four times, for the block training test and bench:
with ato_torch.nn and with torch.nn's own layers, with ato_jax.nn and with flax nnx's own.

    x [B, N, C] -> x + attn(LayerNorm(x))              (causal multi-head self-attention)
                -> h + SwiGLU(RMSNorm(h))               (gate_proj, up_proj, down_proj)
                -> cross_entropy(RMSNorm'd h @ head, targets [B, N])  (mean over tokens)

The four share parameter names with their framework's layers, so one set of weights (the
torch block's, ``jax_params_from_torch``) starts all four; each framework's two blocks differ
only in the layers' kernels. Imports of torch, jax and flax happen in the functions that need
them (the command runs without either framework installed).
"""

import numpy as np

LN_EPS, RMS_EPS = 1e-5, 1e-6


def torch_block(C: int, H: int, hidden: int, vocab: int, *, ato: bool, device=None, dtype=None,
                upcast: bool = True):
    """The block as a torch.nn.Module, forward(x, targets) -> mean loss (fp32); ``ato``: on
    ato_torch.nn's layers, else on torch.nn's (SwiGLU: the same three Linear layers and
    F.silu(gate) * up). ``upcast``: the logits go to the loss in fp32 (Hugging Face's
    logits.float()), else in their dtype (ato's cross_entropy sums in fp32 either way)."""
    import torch
    from torch import nn

    import ato_torch.nn as ann

    class TorchSwiGLU(nn.Module):
        def __init__(self, hidden_size, intermediate_size, device=None, dtype=None):
            super().__init__()
            kw = {"bias": False, "device": device, "dtype": dtype}
            self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
            self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
            self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

        def forward(self, x):
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    layers = ann if ato else nn
    swiglu = ann.SwiGLU if ato else TorchSwiGLU
    kw = {"device": device, "dtype": dtype}

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = layers.LayerNorm(C, eps=LN_EPS, **kw)
            self.attn = layers.MultiheadAttention(C, H, batch_first=True, **kw)
            self.ln2 = layers.RMSNorm(C, eps=RMS_EPS, **kw)
            self.mlp = swiglu(C, hidden, **kw)
            self.ln3 = layers.RMSNorm(C, eps=RMS_EPS, **kw)
            self.head = nn.Linear(C, vocab, bias=False, **kw)
            self.loss = layers.CrossEntropyLoss()

        def forward(self, x, targets):
            N = x.shape[1]
            a = self.ln1(x)
            causal = torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1)  # (torch asks for it with is_causal)
            h = x + self.attn(a, a, a, need_weights=False, attn_mask=causal, is_causal=True)[0]
            h = h + self.mlp(self.ln2(h))
            logits = self.head(self.ln3(h))
            logits = logits.flatten(0, 1)
            return self.loss(logits.float() if upcast else logits, targets.flatten()).float()

    return Block()


def jax_block(C: int, H: int, hidden: int, vocab: int, *, ato: bool, seed: int = 0, dtype=None,
              upcast: bool = True):
    """The block as a flax nnx Module, __call__(x, targets) -> mean loss (fp32); ``ato``: on
    ato_jax.nn's layers and cross_entropy, else on nnx's and optax's (SwiGLU: three nnx.Linear
    and jax.nn.silu(gate) * up). ``dtype``: of the parameters and the computation (default
    fp32) and ``upcast``, as torch_block's."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import ato_jax
    import ato_jax.nn as ann

    class FlaxSwiGLU(nnx.Module):
        def __init__(self, hidden_size, intermediate_size, *, dtype=None, param_dtype=jnp.float32, rngs):
            kw = dict(use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
            self.gate_proj = nnx.Linear(hidden_size, intermediate_size, **kw)
            self.up_proj = nnx.Linear(hidden_size, intermediate_size, **kw)
            self.down_proj = nnx.Linear(intermediate_size, hidden_size, **kw)

        def __call__(self, x):
            return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))

    layers = ann if ato else nnx
    swiglu = ann.SwiGLU if ato else FlaxSwiGLU
    kw = dict(dtype=dtype, param_dtype=dtype or jnp.float32)

    def ce(logits, targets):
        if ato:
            return ato_jax.cross_entropy(logits, targets)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, targets))

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.ln1 = layers.LayerNorm(C, epsilon=LN_EPS, **kw, rngs=rngs)
            self.attn = layers.MultiHeadAttention(H, C, decode=False, **kw, rngs=rngs)
            self.ln2 = layers.RMSNorm(C, epsilon=RMS_EPS, **kw, rngs=rngs)
            self.mlp = swiglu(C, hidden, **kw, rngs=rngs)
            self.ln3 = layers.RMSNorm(C, epsilon=RMS_EPS, **kw, rngs=rngs)
            self.head = nnx.Linear(C, vocab, use_bias=False, **kw, rngs=rngs)

        def __call__(self, x, targets):
            h = x + self.attn(self.ln1(x), is_causal=True)
            h = h + self.mlp(self.ln2(h))
            logits = self.head(self.ln3(h))
            logits = logits.reshape(-1, vocab)
            return ce(logits.astype(jnp.float32) if upcast else logits, targets.reshape(-1)).astype(jnp.float32)

    return Block(nnx.Rngs(seed))


def jax_params_from_torch(torch_module, jax_module) -> None:
    """Sets the nnx block's parameters to the torch block's (fp32 numpy copies, cast to each
    parameter's dtype): Linear weights transposed into kernels; MultiheadAttention's packed
    in_proj split into query, key, value kernels [C, H, D] and biases [H, D], out_proj into
    out [H, D, C]; norm weights into scales."""
    import jax.numpy as jnp

    t = {k: v.detach().float().cpu().numpy() for k, v in torch_module.state_dict().items()}
    C = t["ln1.weight"].shape[0]
    H = jax_module.attn.num_heads
    D = C // H

    def put(param, value):
        param[...] = jnp.asarray(value, param[...].dtype)

    put(jax_module.ln1.scale, t["ln1.weight"])
    put(jax_module.ln1.bias, t["ln1.bias"])
    for name, w, b in zip(("query", "key", "value"), np.split(t["attn.in_proj_weight"], 3),
                          np.split(t["attn.in_proj_bias"], 3)):
        put(getattr(jax_module.attn, name).kernel, w.T.reshape(C, H, D))
        put(getattr(jax_module.attn, name).bias, b.reshape(H, D))
    put(jax_module.attn.out.kernel, t["attn.out_proj.weight"].T.reshape(H, D, C))
    put(jax_module.attn.out.bias, t["attn.out_proj.bias"])
    put(jax_module.ln2.scale, t["ln2.weight"])
    put(jax_module.ln3.scale, t["ln3.weight"])
    for name in ("gate_proj", "up_proj", "down_proj"):
        put(getattr(jax_module.mlp, name).kernel, t[f"mlp.{name}.weight"].T)
    put(jax_module.head.kernel, t["head.weight"].T)


def torch_step(fwd, opt, x, targets):
    """One training step of a torch block (``fwd``: the module or its compiled form; ``opt``
    over its parameters): the loss before the step."""
    opt.zero_grad(set_to_none=True)
    loss = fwd(x, targets)
    loss.backward()
    opt.step()
    return loss


def torch_sgd_losses(module, x, targets, steps: int, lr: float) -> list:
    """The loss before each of ``steps`` SGD steps of the torch block."""
    import torch

    opt = torch.optim.SGD(module.parameters(), lr=lr)
    return [torch_step(module, opt, x, targets).item() for _ in range(steps)]


def jax_sgd_losses(module, x, targets, steps: int, lr: float) -> list:
    """The loss before each of ``steps`` optax SGD steps of the nnx block, the step under nnx.jit."""
    import optax
    from flax import nnx

    opt = nnx.Optimizer(module, optax.sgd(lr), wrt=nnx.Param)

    @nnx.jit
    def step(m, o):
        loss, grads = nnx.value_and_grad(lambda mm: mm(x, targets))(m)
        o.update(m, grads)
        return loss

    return [float(step(module, opt)) for _ in range(steps)]
