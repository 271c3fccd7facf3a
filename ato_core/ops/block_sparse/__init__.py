"""block_sparse: CAB attention's pipeline (Max-L2 coarsening, the curvature block mask,
block-sparse attention, and cab_attention composing them): the declarations. kernels.py (Triton), plans.py (checks, tiles), reference.py, cases.py."""

from __future__ import annotations

from typing import NamedTuple

from ato_core import checks
from ato_core.layout import LAYOUTS
from ato_core.op import Op, forward_only

from . import plans, reference


def max_l2_coarsen(x, block_size):
    """Max-L2 coarsening (CAB attention): each block of ``block_size`` tokens is represented by
    its token of largest L2 norm (the token itself, not a mean).

    Args:
      x: [B, H, N, D]; fp32, fp16 or bf16; D in 1..256.
      block_size: a power of two from 16 to 256; block m is tokens [m * block_size, (m + 1) *
        block_size), the last one partial when block_size does not divide N.

    Returns: (x_coarse [B, H, M, D] in x's dtype, index [B, H, M] int32), M = ceil(N /
      block_size): x_coarse[b, h, m] = x[b, h, index[b, h, m]]. Ties go to the first token; a
      token with a NaN has a NaN norm, which wins (as argmax does). Norms are compared in
      fp32 without overflow or underflow, whatever the magnitude of x. The choice is not
      differentiable; the gradient of x_coarse flows to the selected tokens (zeros elsewhere).
    """
    return (x,), plans.check_block_size(block_size)


def _backward(s, block_size, target):
    return plans.coarsen_backward_plan(s["x"], block_size=block_size, target=target)


MAX_L2_COARSEN = Op(
    max_l2_coarsen, inputs=("x",), results=("x_coarse", "index"), saved=("index",), differentiable=("x",),
    optional_cotangents=(("dindex",),),
    forward=lambda s, block_size, target: plans.coarsen_plan(s["x"], block_size=block_size, target=target),
    backward=_backward, reference=reference.max_l2_coarsen, family="block_sparse", batch=("x",))



class Sparse(NamedTuple):
    block_size: int
    causal: bool
    softmax_scale: object
    return_lse: bool
    layout: str = "bhnd"


def block_sparse_attention(q, k, v, block_mask, *, block_size=64, causal=False, softmax_scale=None,
                           return_lse=False, layout="bhnd"):
    """Softmax attention restricted to the kept (query block, key block) pairs of a block mask:
    flash attention's kernels (tiles, online softmax, GQA) walking, for each query block, the
    list of its kept key blocks (and, for dk and dv, each key block's list of query blocks),
    built from the mask on the device.

    Args:
      q: [B, Hq, Nq, D]; k, v: [B, Hkv, Nk, D] (Hq a multiple of Hkv), as flash_attention.
      block_mask: bool [B, Hq, ceil(Nq / block_size), ceil(Nk / block_size)]: query block i
        attends key block j iff block_mask[b, h, i, j] (blocks of block_size tokens, the last
        partial).
      block_size: a power of two from 16 to 256.
      causal: also query t sees key u only if u <= t + Nk - Nq (token level, inside the
        diagonal blocks too).
      softmax_scale: default 1 / sqrt(D). return_lse: also return lse [B, Hq, Nq] (natural
        log, fp32).
      layout: "bhnd" (the shapes above) or "bnhd" (q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D], o
        likewise), as flash_attention; block_mask and lse keep their shapes.

    Returns: o [B, Hq, Nq, D] (or [B, Nq, Hq, D]) in q's dtype, or (o, lse). A query that sees no key (every block
      of its row masked) gets zeros and lse -inf. With an all-true mask it equals
      flash_attention. Differentiable in q, k and v (through lse too). A NaN among the values
      of keys a tile's queries do not see: as flash_attention.
    """
    checks.check_bool("return_lse", return_lse)
    checks.check_choice("layout", layout, LAYOUTS)
    return (q, k, v, block_mask), Sparse(plans.check_block_size(block_size), causal, softmax_scale, return_lse,
                                         layout)


def _sparse_forward(s, st: Sparse, target):
    return plans.block_sparse_forward_plan(s["q"], s["k"], s["v"], s["block_mask"], block_size=st.block_size,
                                           causal=st.causal, softmax_scale=st.softmax_scale, target=target,
                                           layout=st.layout)


def _sparse_backward(s, st: Sparse, target):
    return plans.block_sparse_backward_plan(s["q"], s["k"], s["v"], s["block_mask"], s["do"],
                                            block_size=st.block_size, causal=st.causal,
                                            softmax_scale=st.softmax_scale, has_dlse=s.get("dlse") is not None,
                                            target=target, layout=st.layout)


BLOCK_SPARSE_ATTENTION = Op(
    block_sparse_attention, inputs=("q", "k", "v", "block_mask"), results=("o", "lse", "rows", "rows_count"),
    returns=lambda st: ("o", "lse") if st.return_lse else ("o",), optional_cotangents=(("dlse",),),
    saved=("q", "k", "v", "block_mask", "o", "lse", "rows", "rows_count"), differentiable=("q", "k", "v"),
    forward=_sparse_forward, backward=_sparse_backward, reference=reference.block_sparse_attention,
    family="block_sparse", batch=("q", "k", "v", "block_mask"))



class Curvature(NamedTuple):
    block_size: int
    keep: float
    lam: float
    causal: bool
    local_blocks: int
    layout: str = "bhnd"


def curvature_block_mask(q, k, *, block_size=64, keep=0.1, lam=0.5, causal=True, local_blocks=1, layout="bhnd"):
    """CAB attention's block mask for self-attention: which key blocks each query block keeps,
    chosen on the coarse graph of Max-L2 representatives (max_l2_coarsen of q and k).

    With qc, kc [B, H, M, D] the coarse q and k (kv head h // (Hq / Hkv) for query head h),
    M = ceil(N / block_size):
      A = relu(qc kc^T / sqrt(D)), normalised per (b, h) to [0, 1] over all M x M pairs:
        An = (A - min A) / (max A - min A) (zeros where A is constant);
      R = (An @ An) / M (redundancy: two-hop paths), F = An - lam * R (the curvature score).
    Query block i keeps the ceil(keep * allowed_i) key blocks with the highest F among the
    allowed ones (causal: j <= i, allowed_i = i + 1; else all M), ties to the lower index, plus
    the local_blocks blocks ending at the diagonal (i, i - 1, ...; allowed ones) and block 0.
    Where a coarse score qc kc^T / sqrt(D) is not finite (NaN, ±inf: a NaN or infinite input, or
    a product past fp32), F is NaN and the block is kept, past the ceil(keep * allowed_i) too, so
    that its NaN or infinity shows in the attention; min A, max A and An @ An are taken over the
    finite scores (An 0 elsewhere).

    Args:
      q: [B, Hq, N, D]; k: [B, Hkv, N, D] (Hq a multiple of Hkv); one float dtype; D 1..256.
      block_size: a power of two from 16 to 256. keep: a fraction in [0, 1]. lam: a finite
        float. causal: bool. local_blocks: an integer >= 0.
      layout: "bhnd" or "bnhd" (q [B, N, Hq, D], k [B, N, Hkv, D]), as flash_attention.

    Returns: block_mask [B, Hq, M, M] bool, as block_sparse_attention takes it. Scores in fp32
      (the coarse products and An @ An as exact fp32 dots): key blocks whose F differ by less
      than its rounding may be ranked either way, and products that underflow fp32 (inputs
      below about 1e-19) score 0. Forward only: no gradient.
    """
    checks.check_choice("layout", layout, LAYOUTS)
    return (q, k), Curvature(plans.check_block_size(block_size), keep, lam, causal, local_blocks, layout)


CURVATURE_BLOCK_MASK = Op(
    curvature_block_mask, inputs=("q", "k"), results=("mask",), saved=(), differentiable=("q", "k"),
    forward=lambda s, st, target: plans.curvature_plan(s["q"], s["k"], block_size=st.block_size, keep=st.keep,
                                                       lam=st.lam, causal=st.causal, local_blocks=st.local_blocks,
                                                       target=target, layout=st.layout),
    backward=forward_only("curvature_block_mask"), reference=reference.curvature_block_mask, family="block_sparse",
    batch=("q", "k"))



class Cab(NamedTuple):
    mask: Curvature
    sparse: Sparse


def cab_attention(q, k, v, *, block_size=64, keep=0.1, lam=0.5, causal=True, local_blocks=1, softmax_scale=None,
                  return_lse=False, layout="bhnd"):
    """CAB attention (curvature-aware block-sparse attention) for self-attention, as one call:
    ``block_sparse_attention(q, k, v, curvature_block_mask(q, k, ...), causal=causal, ...)``.

    Args:
      q: [B, Hq, N, D]; k, v: [B, Hkv, N, D] (Hq a multiple of Hkv); one float dtype; D 1..256.
      block_size, keep, lam, causal, local_blocks: curvature_block_mask's (causal also applies
        token by token inside the kept blocks, as in block_sparse_attention).
      softmax_scale: default 1 / sqrt(D). return_lse: also return lse [B, Hq, N] (fp32).
      layout: "bhnd" or "bnhd" ([B, N, H, D] q, k, v and o), as flash_attention.

    Returns: o [B, Hq, N, D] (or [B, N, Hq, D]) in q's dtype, or (o, lse). Differentiable in q, k and v through
      the attention; the choice of blocks is not differentiated.
    """
    checks.check_bool("return_lse", return_lse)
    checks.check_choice("layout", layout, LAYOUTS)
    bs = plans.check_block_size(block_size)
    return (q, k, v), Cab(Curvature(bs, keep, lam, causal, local_blocks, layout),
                          Sparse(bs, causal, softmax_scale, return_lse, layout))


def _cab_forward(s, st: Cab, target):
    c = st.mask
    return plans.cab_forward_plan(s["q"], s["k"], s["v"], block_size=c.block_size, keep=c.keep, lam=c.lam,
                                  causal=c.causal, local_blocks=c.local_blocks,
                                  softmax_scale=st.sparse.softmax_scale, target=target, layout=c.layout)


def _cab_backward(s, st: Cab, target):
    return plans.cab_backward_plan(s["q"], s["k"], s["v"], s["do"], block_size=st.sparse.block_size,
                                   causal=st.sparse.causal, softmax_scale=st.sparse.softmax_scale,
                                   has_dlse=s.get("dlse") is not None, target=target, layout=st.sparse.layout)


CAB_ATTENTION = Op(
    cab_attention, inputs=("q", "k", "v"), results=("o", "lse", "mask", "rows", "rows_count"),
    returns=lambda st: ("o", "lse") if st.sparse.return_lse else ("o",), optional_cotangents=(("dlse",),),
    saved=("q", "k", "v", "mask", "o", "lse", "rows", "rows_count"), differentiable=("q", "k", "v"),
    forward=_cab_forward, backward=_cab_backward, reference=reference.cab_attention, family="block_sparse",
    batch=("q", "k", "v"))

OPS = (MAX_L2_COARSEN, BLOCK_SPARSE_ATTENTION, CURVATURE_BLOCK_MASK, CAB_ATTENTION)
