"""Flax nnx modules on ato's ops, with the constructor arguments and parameter names of their
flax counterparts (the ``flax`` extra; ``import ato_jax`` does not import flax):

- ``LayerNorm``, ``RMSNorm``: ``flax.nnx.LayerNorm`` / ``flax.nnx.RMSNorm`` (num_features,
  epsilon, dtype, param_dtype, use_bias, use_scale, the initialisers; parameters ``scale``
  and ``bias``), over the last axis.
- ``SwiGLU``: the gated MLP of Llama-style models, down_proj(silu(gate_proj(x)) * up_proj(x)),
  three ``nnx.Linear`` (gate_proj, up_proj, down_proj), ato's swiglu between them.
- ``MultiHeadAttention``: ``flax.nnx.MultiHeadAttention`` (its parameters, grouped kv heads,
  ``is_causal``) whose attention is ato's flash attention: ``dot_product_attention``, the
  ``attention_fn`` it passes, which takes no mask, bias or dropout (a clear error).
- ``CABAttention``, ``DecodeAttention``: grouped-query attention layers (q_proj, k_proj, v_proj,
  o_proj) on ato's cab_attention, and one decoding step over a paged KV cache (the new token's
  key and value written into it, returned) on decode_attention, as ato_torch.nn's.
- ``LinearCrossEntropyLoss``: the language model head's loss on ato's linear_cross_entropy,
  called with the model's lm_head / tied embedding weight, as ato_torch.nn's.
- ``LinearAttention``, ``BasedAttention``: layers with q_proj, k_proj, v_proj, o_proj
  (nnx.Linear) around ato's linear_attention (ELU+1) and based_attention, as ato_torch.nn's.

Dtypes as flax's: the result has ``dtype`` when given, else the promoted dtype of the input and
the parameters; the op runs in that dtype (a bf16 input with float32 parameters is normalised
in float32, as flax does). The modules work under ``nnx.jit``, ``nnx.grad`` and optax updates.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import jax.numpy as jnp
from flax import nnx

import ato_jax
from ato_core import checks
from ato_core.ops.decode import plans as decode_plans

from .launcher import spec
from .ops import _host


def _last_axis_only(module: str, **axes) -> None:
    for name, value in axes.items():
        if value not in (-1, (-1,)):
            raise ValueError(f"{module}: {name}: ato normalises over the last axis only (expected -1), got {value!r}")


def _check_features(module: str, x, num_features: int) -> None:
    if x.ndim < 1 or x.shape[-1] != num_features:
        raise ValueError(f"{module}: input: expected a last axis of {num_features} features, got shape "
                         f"{tuple(x.shape)}")


def _param(use: bool, init, rngs: nnx.Rngs, num_features: int, param_dtype) -> Optional[nnx.Param]:
    return nnx.Param(init(rngs.params(), (num_features,), param_dtype)) if use else None


def _value(p: Optional[nnx.Param]):
    return None if p is None else p[...]


class LayerNorm(nnx.Module):
    """flax.nnx.LayerNorm on ato's layer_norm: (x - mean) / sqrt(var + epsilon) * scale + bias
    over the last axis (``num_features`` of it)."""

    def __init__(self, num_features: int, *, epsilon: float = 1e-6, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, use_bias: bool = True, use_scale: bool = True,
                 bias_init=nnx.initializers.zeros, scale_init=nnx.initializers.ones, reduction_axes=-1,
                 feature_axes=-1, rngs: nnx.Rngs):
        _last_axis_only("LayerNorm", reduction_axes=reduction_axes, feature_axes=feature_axes)
        self.num_features, self.epsilon, self.dtype = num_features, epsilon, dtype
        self.scale = _param(use_scale, scale_init, rngs, num_features, param_dtype)
        self.bias = _param(use_bias, bias_init, rngs, num_features, param_dtype)

    def __call__(self, x):
        _check_features("LayerNorm", x, self.num_features)
        scale, bias = _value(self.scale), _value(self.bias)
        dtype = self.dtype or jnp.result_type(x, *[p for p in (scale, bias) if p is not None])
        return ato_jax.layer_norm(jnp.asarray(x, dtype), scale, bias, eps=self.epsilon)


class RMSNorm(nnx.Module):
    """flax.nnx.RMSNorm on ato's rms_norm: x / sqrt(mean(x^2) + epsilon) * scale over the
    last axis (``num_features`` of it)."""

    def __init__(self, num_features: int, *, epsilon: float = 1e-6, dtype: Optional[Any] = None,
                 param_dtype: Any = jnp.float32, use_scale: bool = True, scale_init=nnx.initializers.ones,
                 reduction_axes=-1, feature_axes=-1, rngs: nnx.Rngs):
        _last_axis_only("RMSNorm", reduction_axes=reduction_axes, feature_axes=feature_axes)
        self.num_features, self.epsilon, self.dtype = num_features, epsilon, dtype
        self.scale = _param(use_scale, scale_init, rngs, num_features, param_dtype)

    def __call__(self, x):
        _check_features("RMSNorm", x, self.num_features)
        scale = _value(self.scale)
        dtype = self.dtype or jnp.result_type(x, *([] if scale is None else [scale]))
        return ato_jax.rms_norm(jnp.asarray(x, dtype), scale, eps=self.epsilon)


class SwiGLU(nnx.Module):
    """The gated MLP down_proj(silu(gate_proj(x)) * up_proj(x)): nnx.Linear layers named as
    Hugging Face's LlamaMLP, ato's swiglu between them."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, use_bias: bool = False,
                 dtype: Optional[Any] = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        kw = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = nnx.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nnx.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nnx.Linear(intermediate_size, hidden_size, **kw)

    def __call__(self, x):
        return self.down_proj(ato_jax.swiglu(self.gate_proj(x), self.up_proj(x)))


def dot_product_attention(query, key, value, bias=None, mask=None, *, dropout_rng=None, dropout_rate: float = 0.0,
                          broadcast_dropout: bool = True, deterministic: bool = True, dtype=None, precision=None,
                          module=None, is_causal: bool = False, **unused):
    """flax's ``attention_fn`` contract on ato's flash_attention: query [..., Nq, H, D], key and
    value [..., Nk, Hkv, D] (Hkv divides H), returns [..., Nq, H, D]. Causal masks align to
    the bottom right (flash_attention's). ``mask`` (bool, True: attend) and ``bias``,
    [..., H, Nq, Nk] or broadcastable, go to flash_attention's mask and bias (a query whose
    mask is all False gets zeros, where flax's softmax gives a uniform row). Dropout
    (dropout_rate > 0, not deterministic) is flash_attention's, keyed by ``dropout_rng``, one
    mask per batch element and head: broadcast_dropout=False (flax's True shares one mask over
    the batch, which ato does not draw: a ValueError). No sown weights: flash attention never
    forms the weights."""
    if module is not None:
        raise ValueError("dot_product_attention: module: ato's flash attention does not take sow_weights "
                         "(expected None)")
    dropout = {}
    if dropout_rate > 0.0 and not deterministic:
        if broadcast_dropout:
            raise ValueError("dot_product_attention: broadcast_dropout: ato draws one dropout mask per batch element "
                             "and head (expected False with dropout), got True")
        if dropout_rng is None:
            raise ValueError("dot_product_attention: dropout_rng: expected a jax.random key with dropout_rate > 0, "
                             "got None")
        dropout = {"dropout_p": float(dropout_rate), "seed": dropout_rng}
    if dtype is not None:
        query, key, value = (jnp.asarray(t, dtype) for t in (query, key, value))
    lead = query.shape[:-3]
    B = math.prod(lead)
    # flax's [..., N, H, D] is flash attention's bnhd layout: no transpose
    o = ato_jax.flash_attention(*(t.reshape(B, *t.shape[-3:]) for t in (query, key, value)), causal=bool(is_causal),
                                layout="bnhd", bias=_batched(bias, lead), mask=_batched(mask, lead), **dropout)
    return o.reshape(query.shape)


def _batched(x, lead):
    """A flax mask or bias [..., H, Nq, Nk] (any axis of size 1: broadcast) with the batch axes
    ``lead`` flattened into one, as flash_attention takes it: [B or 1, H or 1, Nq or 1, Nk or 1]."""
    if x is None or x.ndim <= 3:
        return x
    batch = x.shape[:-3]
    if all(d == 1 for d in batch):
        return x.reshape(x.shape[-3:])
    return jnp.broadcast_to(x, (*lead, *x.shape[-3:])).reshape(math.prod(lead), *x.shape[-3:])


class MultiHeadAttention(nnx.MultiHeadAttention):
    """flax.nnx.MultiHeadAttention with ato's flash attention (``dot_product_attention``) as
    its attention_fn: the same arguments and parameters (query, key, value, out)."""

    def __init__(self, *args, attention_fn=dot_product_attention, **kwargs):
        super().__init__(*args, attention_fn=attention_fn, **kwargs)


class _LinearAttentionLayer(nnx.Module):
    """q_proj, k_proj (hidden_size -> num_heads * feature size), v_proj, o_proj (nnx.Linear,
    as ato_torch.nn's: a torch layer's weights, transposed, are its kernels); x [B, N, hidden]."""

    def __init__(self, hidden_size: int, num_heads: int, qk_dim: int, use_bias: bool, dtype, param_dtype,
                 rngs: nnx.Rngs):
        if hidden_size % num_heads:
            raise ValueError(f"{type(self).__name__}: hidden_size: expected a multiple of num_heads={num_heads}, "
                             f"got {hidden_size}")
        kw = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.q_proj = nnx.Linear(hidden_size, num_heads * qk_dim, **kw)
        self.k_proj = nnx.Linear(hidden_size, num_heads * qk_dim, **kw)
        self.v_proj = nnx.Linear(hidden_size, hidden_size, **kw)
        self.o_proj = nnx.Linear(hidden_size, hidden_size, **kw)

    def _heads(self, t):  # [B, N, H * D] -> [B, N, H, D] (the ops' bnhd layout: no transpose)
        return t.reshape(*t.shape[:-1], self.num_heads, -1)

    def __call__(self, x, initial_state=None, output_final_state: bool = False):
        """x [B, N, hidden_size] -> y [B, N, hidden_size], or (y, (S, z)) with the final state."""
        if x.ndim != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"{type(self).__name__}: x: expected [B, N, {self.hidden_size}], got shape "
                             f"{tuple(x.shape)}")
        out = self._attend(self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x)),
                           initial_state, output_final_state)
        o, state = out if output_final_state else (out, None)
        y = self.o_proj(o.reshape(x.shape))
        return (y, state) if output_final_state else y


class LinearAttention(_LinearAttentionLayer):
    """A multi-head linear attention layer (ELU+1 feature map, ato's linear_attention), as
    ato_torch.nn.LinearAttention."""

    def __init__(self, hidden_size: int, num_heads: int, *, causal: bool = True, eps: float = 1e-6,
                 use_bias: bool = False, dtype=None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        super().__init__(hidden_size, num_heads, hidden_size // max(num_heads, 1), use_bias, dtype, param_dtype, rngs)
        self.causal, self.eps = causal, eps

    def _attend(self, q, k, v, initial_state, output_final_state):
        return ato_jax.linear_attention(q, k, v, causal=self.causal, feature_map="elu", eps=self.eps,
                                        initial_state=initial_state, output_final_state=output_final_state,
                                        layout="bnhd")


class BasedAttention(_LinearAttentionLayer):
    """The Based linear attention layer (ato's based_attention), as ato_torch.nn.BasedAttention."""

    def __init__(self, hidden_size: int, num_heads: int, *, feature_dim: int = 16, causal: bool = True,
                 eps: float = 1e-6, use_bias: bool = False, dtype=None, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        super().__init__(hidden_size, num_heads, feature_dim, use_bias, dtype, param_dtype, rngs)
        self.causal, self.eps = causal, eps

    def _attend(self, q, k, v, initial_state, output_final_state):
        return ato_jax.based_attention(q, k, v, causal=self.causal, eps=self.eps, initial_state=initial_state,
                                       output_final_state=output_final_state, layout="bnhd")


class LinearCrossEntropyLoss(nnx.Module):
    """The language model head's loss, ``cross_entropy(x @ weight.T + bias, targets)``, on
    ato's linear_cross_entropy (no logits stored). Called as ``loss_fn(x, weight, targets,
    bias=None)`` with the model's lm_head / tied embedding weight [V, H] (an ``nnx.Param``
    or an array); x [..., H], targets [...]. The constructor takes the op's options, as
    ato_torch.nn.LinearCrossEntropyLoss. The loss is fp32."""

    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 z_loss: float = 0.0, softcap: Optional[float] = None, return_z_loss: bool = False):
        self.options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                            z_loss=z_loss, softcap=softcap, return_z_loss=return_z_loss)

    def __call__(self, x, weight, targets, bias=None):
        weight = weight[...] if isinstance(weight, nnx.Variable) else weight
        bias = bias[...] if isinstance(bias, nnx.Variable) else bias
        return ato_jax.linear_cross_entropy(x, weight, targets, bias=bias, **self.options)


class _GroupedQueryLayer(nnx.Module):
    """q_proj (hidden_size -> num_heads * head_dim), k_proj and v_proj (-> num_kv_heads *
    head_dim), o_proj, nnx.Linear (a torch layer's weights, transposed, are their kernels)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int], use_bias: bool, dtype,
                 param_dtype, rngs: nnx.Rngs):
        num_kv_heads, self.head_dim = checks.check_heads(type(self).__name__, hidden_size, num_heads, num_kv_heads)
        kw = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.hidden_size, self.num_heads, self.num_kv_heads = hidden_size, num_heads, num_kv_heads
        self.q_proj = nnx.Linear(hidden_size, hidden_size, **kw)
        self.k_proj = nnx.Linear(hidden_size, num_kv_heads * self.head_dim, **kw)
        self.v_proj = nnx.Linear(hidden_size, num_kv_heads * self.head_dim, **kw)
        self.o_proj = nnx.Linear(hidden_size, hidden_size, **kw)

    def _check(self, x, ndim: int, layout: str) -> None:
        if x.ndim != ndim or x.shape[-1] != self.hidden_size:
            raise ValueError(f"{type(self).__name__}: x: expected {layout.format(self.hidden_size)}, got shape "
                             f"{tuple(x.shape)}")


class CABAttention(_GroupedQueryLayer):
    """Self-attention on ato's cab_attention, as ato_torch.nn.CABAttention: x [B, N,
    hidden_size] -> [B, N, hidden_size]."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int] = None, *, block_size: int = 64,
                 keep: float = 0.1, lam: float = 0.5, causal: bool = True, local_blocks: int = 1,
                 use_bias: bool = False, dtype=None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        super().__init__(hidden_size, num_heads, num_kv_heads, use_bias, dtype, param_dtype, rngs)
        self.options = dict(block_size=block_size, keep=keep, lam=lam, causal=causal, local_blocks=local_blocks)

    def __call__(self, x):
        self._check(x, 3, "[B, N, {}]")
        q, k, v = (jnp.swapaxes(p(x).reshape(*x.shape[:2], -1, self.head_dim), 1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        o = ato_jax.cab_attention(q, k, v, **self.options)
        return self.o_proj(jnp.swapaxes(o, 1, 2).reshape(x.shape))


class DecodeAttention(_GroupedQueryLayer):
    """One decoding step over a paged KV cache, as ato_torch.nn.DecodeAttention:
    ``layer(x, k_cache, v_cache, block_table, seq_lens, schedule=None) -> (y, k_cache,
    v_cache)`` with the caches returned updated (the new token's key and value at position
    seq_lens[b] of its sequence; donate them under jax.jit to update in place). Lengths
    without room for the token and bad block ids raise ValueError where the values are on the
    host; under jax.jit such a sequence's token is not written (never over another token)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int] = None, *,
                 use_bias: bool = False, dtype=None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
        super().__init__(hidden_size, num_heads, num_kv_heads, use_bias, dtype, param_dtype, rngs)

    def __call__(self, x, k_cache, v_cache, block_table, seq_lens, schedule=None):
        self._check(x, 2, "[B, {}]")
        B = x.shape[0]
        q = self.q_proj(x).reshape(B, self.num_heads, self.head_dim)
        arrays = {"block_table": block_table, "seq_lens": seq_lens}
        decode_plans.check_decode_step(
            "DecodeAttention", *(spec(t) for t in (q, k_cache, v_cache, block_table, seq_lens)), self.num_kv_heads,
            self.head_dim, _host(arrays, "block_table"), _host(arrays, "seq_lens"))
        k, v = (p(x).reshape(B, self.num_kv_heads, self.head_dim) for p in (self.k_proj, self.v_proj))
        bs = k_cache.shape[1]
        # A length without room (only under jit, unchecked) writes nothing: its block index
        # reads as num_blocks (fill), which the scatter drops, instead of jax's clamped index
        # overwriting the sequence's last token.
        block = block_table.at[jnp.arange(B), seq_lens // bs].get(mode="fill", fill_value=k_cache.shape[0])
        k_cache = k_cache.at[block, seq_lens % bs].set(k.astype(k_cache.dtype), mode="drop")
        v_cache = v_cache.at[block, seq_lens % bs].set(v.astype(v_cache.dtype), mode="drop")
        o = ato_jax.decode_attention(q, k_cache, v_cache, block_table, seq_lens + 1, schedule=schedule)
        return self.o_proj(o.reshape(B, -1)), k_cache, v_cache
