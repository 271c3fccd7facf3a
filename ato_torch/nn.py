"""Drop-in torch modules on ato's ops, with the constructor arguments and state_dict keys of
their torch counterparts: a torch ``nn.LayerNorm`` state_dict loads into ``LayerNorm``.

- ``LayerNorm``, ``RMSNorm``: ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` (normalized_shape
  of one or more trailing axes, eps, elementwise_affine, bias).
- ``CrossEntropyLoss``: ``torch.nn.CrossEntropyLoss`` with class-index targets (ignore_index,
  reduction, label_smoothing; input [C], [N, C] or [N, C, d1, ...]); no class weights.
- ``SwiGLU``: the gated MLP of Llama-style models, down_proj(silu(gate_proj(x)) * up_proj(x)),
  with Hugging Face's LlamaMLP keys (gate_proj, up_proj, down_proj).
- ``MultiheadAttention``: ``torch.nn.MultiheadAttention`` on flash attention (no weights
  returned; the causal mask only).
- ``LinearAttention``, ``BasedAttention``: layers with q_proj, k_proj, v_proj, o_proj around
  ato's linear_attention (ELU+1) and based_attention, with the recurrent state in and out.
- ``CABAttention``: a grouped-query self-attention layer (q_proj, k_proj, v_proj, o_proj) on
  ato's cab_attention (curvature-selected blocks, block-sparse flash attention).
- ``DecodeAttention``: one decoding step of such a layer over a paged KV cache: writes the
  new token's key and value into the cache, then ato's decode_attention. The same keys as
  CABAttention, so a prefill layer's state_dict loads into it.
- ``LinearCrossEntropyLoss``: the language model head's loss on ato's linear_cross_entropy.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
from torch import nn

import ato_torch
from ato_core import checks
from ato_core.ops.decode import plans as decode_plans

from .launcher import spec


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(n) for n in normalized_shape)


def _trailing(x: torch.Tensor, shape: tuple, module: str) -> torch.Tensor:
    """x as [..., prod(shape)], after checking its trailing axes are ``shape``."""
    if tuple(x.shape[x.ndim - len(shape):]) != shape or x.ndim < len(shape):
        raise ValueError(f"{module}: input: expected trailing axes {list(shape)}, got shape {list(x.shape)}")
    return x.reshape(*x.shape[:x.ndim - len(shape)], math.prod(shape))


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm on ato's layer_norm (fp32 statistics, a Triton backward)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kw))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kw)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = _trailing(x, self.normalized_shape, "LayerNorm")
        w = None if self.weight is None else self.weight.reshape(-1)
        b = None if self.bias is None else self.bias.reshape(-1)
        return ato_torch.layer_norm(flat, w, b, eps=self.eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm on ato's rms_norm; eps None means torch.finfo(x.dtype).eps, as torch."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = _trailing(x, self.normalized_shape, "RMSNorm")
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        w = None if self.weight is None else self.weight.reshape(-1)
        return ato_torch.rms_norm(flat, w, eps=eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class CrossEntropyLoss(nn.Module):
    """torch.nn.CrossEntropyLoss on ato's cross_entropy (online log-sum-exp, no fp32 copy of
    the logits): class-index targets, input [C], [N, C] or [N, C, d1, ...] (classes on axis 1,
    as torch), ignore_index, reduction ("mean", "sum", "none"), label_smoothing. The loss has
    the input's dtype, as torch's. Class weights and probability targets: not supported."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if weight is not None:
            raise ValueError("CrossEntropyLoss: weight: class weights are not supported by ato (expected None)")
        if size_average is not None or reduce is not None:
            raise ValueError("CrossEntropyLoss: size_average, reduce: deprecated in torch, not supported (use "
                             "reduction)")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if target.is_floating_point():
            raise TypeError(f"CrossEntropyLoss: target: expected class indices (an integer tensor), got "
                            f"{target.dtype} (probability targets are not supported)")
        if input.ndim == 1:
            logits, flat, shape = input[None], target.reshape(1), ()
        else:
            logits = input.movedim(1, -1).reshape(-1, input.shape[1]) if input.ndim > 2 else input
            flat, shape = target.reshape(-1), tuple(target.shape)
        loss = ato_torch.cross_entropy(logits, flat, ignore_index=self.ignore_index, reduction=self.reduction,
                                       label_smoothing=self.label_smoothing)
        if self.reduction == "none":
            loss = loss.reshape(shape)
        return loss.to(input.dtype)

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"


class LinearCrossEntropyLoss(nn.Module):
    """The language model head's loss, ``cross_entropy(x @ weight.T + bias, targets)``, on
    ato's linear_cross_entropy (no logits stored). Called as ``loss_fn(x, weight, targets,
    bias=None)`` with the model's lm_head / tied embedding weight [V, H] (so a weight tied to
    the embedding stays one parameter); x [..., H], targets [...]. The constructor takes the
    op's options: ignore_index, reduction, label_smoothing, z_loss, softcap. The loss is fp32
    (the op's); ``return_z_loss=True`` returns (loss, z)."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 z_loss: float = 0.0, softcap: Optional[float] = None, return_z_loss: bool = False):
        super().__init__()
        self.options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                            z_loss=z_loss, softcap=softcap, return_z_loss=return_z_loss)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                bias: Optional[torch.Tensor] = None):
        return ato_torch.linear_cross_entropy(x, weight, targets, bias=bias, **self.options)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items())


class SwiGLU(nn.Module):
    """The gated MLP down_proj(silu(gate_proj(x)) * up_proj(x)), ato's swiglu between torch's
    matmuls; keys as Hugging Face's LlamaMLP (gate_proj, up_proj, down_proj)."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ato_torch.swiglu(self.gate_proj(x), self.up_proj(x)))


class MultiheadAttention(nn.Module):
    """torch.nn.MultiheadAttention on ato's flash_attention: its constructor arguments and
    state_dict keys (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias), so a torch
    module's state_dict loads into it. forward(query, key, value, ...) returns (output, None):
    flash attention never forms the attention weights, so ``need_weights`` must be False.
    Masks as torch's: ``attn_mask`` [Nq, Nk] or [B * num_heads, Nq, Nk], bool (True: not
    allowed) or float (added); ``key_padding_mask`` [B, Nk], bool (True: ignored) or float;
    ``is_causal=True`` (with or without the causal attn_mask torch asks for beside it) uses
    flash attention's causal mask. A query left with no key gets zeros (torch: NaN).
    Self- or cross-attention with embed_dim-wide keys and values (kdim = vdim = embed_dim);
    ``dropout`` is flash_attention's attention dropout in training mode (its seed drawn from
    the default generator of the inputs' device, as torch's dropout draws; p rounded to a
    multiple of 2^-8); no bias_kv or zero_attn."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        checks.check_dropout_p("MultiheadAttention: dropout", dropout)
        for name, value, default in (("add_bias_kv", add_bias_kv, False), ("add_zero_attn", add_zero_attn, False)):
            if value != default:
                raise ValueError(f"MultiheadAttention: {name}: not supported by ato (expected {default}), got {value!r}")
        for name, value in (("kdim", kdim), ("vdim", vdim)):
            if value not in (None, embed_dim):
                raise ValueError(f"MultiheadAttention: {name}: expected None or embed_dim={embed_dim}, got {value}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim: expected a multiple of num_heads={num_heads}, "
                             f"got {embed_dim}")
        kw = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.batch_first, self.dropout = batch_first, float(dropout)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **kw))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **kw)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        # torch's initialisation
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_padding_mask=None,
                need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False):
        if need_weights:
            raise ValueError("MultiheadAttention: need_weights: ato's flash attention does not form the attention "
                             "weights (expected need_weights=False)")
        if not self.batch_first:  # [N, B, E] -> [B, N, E]
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        H, D = self.num_heads, self.head_dim
        w = self.in_proj_weight.chunk(3)
        b = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
        q, k, v = (nn.functional.linear(t, wi, bi).unflatten(-1, (H, D)).transpose(1, 2)
                   for t, wi, bi in zip((query, key, value), w, b))
        bias, mask = _mha_masks(attn_mask if not is_causal else None, key_padding_mask, q.shape[0], H)
        drop = {}
        if self.training and self.dropout > 0:
            gen = torch.cuda.default_generators[q.device.index or 0] if q.is_cuda else torch.default_generator
            drop = {"dropout_p": self.dropout, "seed": gen}
        o = ato_torch.flash_attention(q, k, v, causal=bool(is_causal), bias=bias, mask=mask, **drop)
        o = self.out_proj(o.transpose(1, 2).flatten(-2))
        return (o if self.batch_first else o.transpose(0, 1)), None


def _mha_masks(attn_mask, key_padding_mask, B: int, H: int):
    """torch.nn.MultiheadAttention's attn_mask ([Nq, Nk] or [B * H, Nq, Nk]) and key_padding_mask
    ([B, Nk]) as flash_attention's (bias, mask) over [B, H, Nq, Nk]: a bool mask's True is
    "not allowed" there, "takes part" here; a float one is a bias."""
    bias = mask = None
    if attn_mask is not None:
        if attn_mask.dim() == 3:
            attn_mask = attn_mask.view(B, H, *attn_mask.shape[1:])
        if attn_mask.dtype == torch.bool:
            mask = ~attn_mask
        else:
            bias = attn_mask
    if key_padding_mask is not None:
        kpm = key_padding_mask[:, None, None, :]
        if kpm.dtype == torch.bool:
            mask = ~kpm if mask is None else mask & ~kpm
        else:
            bias = kpm if bias is None else bias + kpm
    return bias, mask


class _LinearAttentionLayer(nn.Module):
    """q_proj, k_proj (hidden_size -> num_heads * feature size), v_proj (hidden_size ->
    hidden_size), the attention on [B, H, N, D] heads, o_proj; x [B, N, hidden_size]."""

    def __init__(self, hidden_size: int, num_heads: int, qk_dim: int, bias: bool, device, dtype):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"{type(self).__name__}: hidden_size: expected a multiple of num_heads={num_heads}, "
                             f"got {hidden_size}")
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * qk_dim, **kw)
        self.k_proj = nn.Linear(hidden_size, num_heads * qk_dim, **kw)
        self.v_proj = nn.Linear(hidden_size, hidden_size, **kw)
        self.o_proj = nn.Linear(hidden_size, hidden_size, **kw)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:  # [B, N, H * D] -> [B, H, N, D] (a view)
        return t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def _attend(self, q, k, v, initial_state, output_final_state):
        raise NotImplementedError

    def forward(self, x: torch.Tensor, initial_state=None, output_final_state: bool = False):
        """x [B, N, hidden_size] -> y [B, N, hidden_size], or (y, (S, z)) with the final state."""
        if x.ndim != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"{type(self).__name__}: x: expected [B, N, {self.hidden_size}], got shape "
                             f"{list(x.shape)}")
        out = self._attend(self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x)),
                           initial_state, output_final_state)
        o, state = out if output_final_state else (out, None)
        y = self.o_proj(o.transpose(1, 2).flatten(-2))
        return (y, state) if output_final_state else y


class LinearAttention(_LinearAttentionLayer):
    """A multi-head linear attention layer (ELU+1 feature map, ato's linear_attention):
    q_proj, k_proj, v_proj, o_proj (nn.Linear), head size hidden_size / num_heads; causal
    (chunked, with the (S, z) state in and out) or bidirectional."""

    def __init__(self, hidden_size: int, num_heads: int, causal: bool = True, eps: float = 1e-6, bias: bool = False,
                 device=None, dtype=None):
        super().__init__(hidden_size, num_heads, hidden_size // max(num_heads, 1), bias, device, dtype)
        self.causal, self.eps = causal, eps

    def _attend(self, q, k, v, initial_state, output_final_state):
        return ato_torch.linear_attention(q, k, v, causal=self.causal, feature_map="elu", eps=self.eps,
                                          initial_state=initial_state, output_final_state=output_final_state)


class BasedAttention(_LinearAttentionLayer):
    """The Based linear attention layer (Taylor feature map, ato's based_attention): q_proj and
    k_proj to ``feature_dim`` per head (16 in Based), v_proj, o_proj; causal by default."""

    def __init__(self, hidden_size: int, num_heads: int, feature_dim: int = 16, causal: bool = True,
                 eps: float = 1e-6, bias: bool = False, device=None, dtype=None):
        super().__init__(hidden_size, num_heads, feature_dim, bias, device, dtype)
        self.causal, self.eps = causal, eps

    def _attend(self, q, k, v, initial_state, output_final_state):
        return ato_torch.based_attention(q, k, v, causal=self.causal, eps=self.eps, initial_state=initial_state,
                                         output_final_state=output_final_state)




class _GroupedQueryLayer(nn.Module):
    """q_proj (hidden_size -> num_heads * head_dim), k_proj and v_proj (-> num_kv_heads *
    head_dim), o_proj (-> hidden_size), nn.Linear, head_dim = hidden_size / num_heads."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int], bias: bool, device, dtype):
        super().__init__()
        num_kv_heads, self.head_dim = checks.check_heads(type(self).__name__, hidden_size, num_heads, num_kv_heads)
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.hidden_size, self.num_heads, self.num_kv_heads = hidden_size, num_heads, num_kv_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, **kw)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, **kw)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, **kw)
        self.o_proj = nn.Linear(hidden_size, hidden_size, **kw)

    def _check(self, x: torch.Tensor, ndim: int, layout: str) -> None:
        if x.ndim != ndim or x.shape[-1] != self.hidden_size:
            raise ValueError(f"{type(self).__name__}: x: expected {layout.format(self.hidden_size)}, got shape "
                             f"{list(x.shape)}")


class CABAttention(_GroupedQueryLayer):
    """Self-attention on ato's cab_attention: per head, the key blocks that the curvature of the
    coarsened scores selects (``keep`` of them, plus ``local_blocks`` on the diagonal), then
    block-sparse flash attention. x [B, N, hidden_size] -> [B, N, hidden_size]."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int] = None, block_size: int = 64,
                 keep: float = 0.1, lam: float = 0.5, causal: bool = True, local_blocks: int = 1, bias: bool = False,
                 device=None, dtype=None):
        super().__init__(hidden_size, num_heads, num_kv_heads, bias, device, dtype)
        self.options = dict(block_size=block_size, keep=keep, lam=lam, causal=causal, local_blocks=local_blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x, 3, "[B, N, {}]")
        q, k, v = (p(x).unflatten(-1, (-1, self.head_dim)).transpose(1, 2) for p in (self.q_proj, self.k_proj,
                                                                                    self.v_proj))
        o = ato_torch.cab_attention(q, k, v, **self.options)
        return self.o_proj(o.transpose(1, 2).flatten(-2))


class DecodeAttention(_GroupedQueryLayer):
    """One decoding step of a grouped-query self-attention layer over a paged KV cache.

    forward(x, k_cache, v_cache, block_table, seq_lens, schedule=None) -> (y, k_cache,
    v_cache): x [B, hidden_size] is each sequence's new token; its key and value are written
    at position seq_lens[b] of its sequence (k_cache[block_table[b, seq_lens[b] //
    block_size], seq_lens[b] % block_size], in place), then the token attends to its
    seq_lens[b] + 1 tokens (decode_attention; ``schedule``: its shared-prefix schedule for
    the lengths after the write). Caches [num_blocks, block_size, num_kv_heads, head_dim];
    the block written must belong to this sequence alone. The caller advances seq_lens.
    Lengths without room for the token and bad block ids raise ValueError where block_table
    and seq_lens are on the CPU (on a GPU the index raises a device-side error). Inference:
    no gradient."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int] = None, bias: bool = False,
                 device=None, dtype=None):
        super().__init__(hidden_size, num_heads, num_kv_heads, bias, device, dtype)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor, schedule=None):
        self._check(x, 2, "[B, {}]")
        B = x.shape[0]
        q = self.q_proj(x).unflatten(-1, (self.num_heads, self.head_dim))
        on_host = seq_lens.device.type == "cpu" and block_table.device.type == "cpu"
        decode_plans.check_decode_step(
            "DecodeAttention", *(spec(t, n) for t, n in ((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache"),
                                                          (block_table, "block_table"), (seq_lens, "seq_lens"))),
            self.num_kv_heads, self.head_dim, block_table.numpy() if on_host else None,
            seq_lens.numpy() if on_host else None)
        k, v = (p(x).unflatten(-1, (self.num_kv_heads, self.head_dim)) for p in (self.k_proj, self.v_proj))
        bs = k_cache.shape[1]
        lens = seq_lens.long()
        block = block_table[torch.arange(B, device=x.device), lens // bs].long()
        k_cache[block, lens % bs] = k.to(k_cache.dtype)
        v_cache[block, lens % bs] = v.to(v_cache.dtype)
        o = ato_torch.decode_attention(q, k_cache, v_cache, block_table, seq_lens + 1, schedule=schedule)
        return self.o_proj(o.flatten(-2)), k_cache, v_cache


__all__ = ["BasedAttention", "CABAttention", "CrossEntropyLoss", "DecodeAttention", "LayerNorm", "LinearAttention",
           "LinearCrossEntropyLoss", "MultiheadAttention", "RMSNorm", "SwiGLU"]
