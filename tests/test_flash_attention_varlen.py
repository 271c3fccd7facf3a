"""flash_attention_varlen: CPU tier (Triton's interpreter).

Packed sequences against the float64 reference (one dense masked attention over every
(query row, key row) pair of the same sequence), in both frameworks, bitwise equal (ato_jax
under jit, so cu_seqlens are traced); against flash_attention called on each sequence alone;
rows outside every sequence; bad inputs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_core import reference as ref
from ato_core.ops.flash_attention.cases import fa_varlen_case
from helpers import check, frontend, raises_naming

# (query lengths, key lengths): an empty sequence, one of length 1, Nq != Nk per sequence,
# lengths crossing the interpreter's 32/16-row blocks
SEQS = ((5, 0, 33, 1), (9, 3, 28, 30))

VARLEN_CASES = {
    "full": dict(),
    "causal": dict(causal=True),
    "causal_gqa_window_softcap": dict(causal=True, window=(6, None), softcap=3.0),
    "window_both_sides": dict(window=(4, 7)),
    "alibi_h": dict(causal=True, alibi="h"),
    "alibi_bh": dict(alibi="bh"),
    "padded": dict(causal=True, start=(3, 2), pad=(6, 5)),   # rows before and after every sequence
    "no_lse_scale": dict(causal=True, lse=False, scale=0.3),
}


@pytest.mark.parametrize("name", list(VARLEN_CASES))
def test_varlen(name):
    check(fa_varlen_case(*SEQS, 4, 2, 16, seed=len(name), **VARLEN_CASES[name]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_varlen_half(dtype):
    check(fa_varlen_case((40, 17), (23, 50), 2, 1, 64, dtype=dtype, causal=True, pad=(3, 0), seed=3))


def test_varlen_odd_head_sizes():
    check(fa_varlen_case((7, 20), (20, 7), 3, 3, 80, causal=True, seed=4))     # D padded to 128
    check(fa_varlen_case((1,), (1,), 1, 1, 130, seed=5))                       # D > 128, one token


def test_varlen_one_sequence_and_none():
    check(fa_varlen_case((37,), (45,), 2, 1, 16, causal=True, seed=6))
    check(fa_varlen_case((), (), 2, 1, 16, pad=(4, 3), seed=7))                # B = 0: every row outside


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_is_each_sequence_alone(framework, causal):
    """Each sequence's o and lse are flash_attention's on that sequence alone, bit for bit (the
    same tiles from the sequence's first row, the same order)."""
    ato, arr = frontend(framework)
    lq, lk = (13, 40, 1), (29, 40, 17)
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lq, lk))
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((cu_q[-1], 4, 32), (cu_k[-1], 2, 32),
                                                                   (cu_k[-1], 2, 32)))
    o, lse = ato.flash_attention_varlen(arr(q), arr(k), arr(v), arr(cu_q), arr(cu_k), 40, 40, causal=causal,
                                        return_lse=True)
    for b in range(3):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        one = [arr(np.ascontiguousarray(x[r][None])) for x, r in ((q, rq), (k, rk), (v, rk))]
        ob, lb = ato.flash_attention(*one, causal=causal, return_lse=True, layout="bnhd")
        np.testing.assert_array_equal(np.asarray(o[rq]), np.asarray(ob[0]))
        np.testing.assert_array_equal(np.asarray(lse[:, rq]), np.asarray(lb[0]))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_varlen_rows_outside_every_sequence(framework):
    """A packing padded before and after its sequences: those rows get o = 0, lse = -inf and
    exactly zero gradients (never uninitialised memory)."""
    Tq, Tk, H, D = 30, 26, 2, 16
    cu_q, cu_k = np.array([4, 10, 21], np.int32), np.array([2, 9, 20], np.int32)
    rng = np.random.default_rng(9)
    x = [rng.standard_normal(s).astype(np.float32) for s in ((Tq, H, D), (Tk, H, D), (Tk, H, D))]
    if framework == "torch":
        leaves = [torch.from_numpy(a).requires_grad_() for a in x]
        o, lse = ato_torch.flash_attention_varlen(*leaves, torch.from_numpy(cu_q), torch.from_numpy(cu_k), 11, 11,
                                                  causal=True, return_lse=True)
        (o.sum() + lse[torch.isfinite(lse)].sum()).backward()
        o, lse, grads = o.detach().numpy(), lse.detach().numpy(), [t.grad.numpy() for t in leaves]
    else:
        def f(q, k, v, cq, ck):
            o, lse = ato_jax.flash_attention_varlen(q, k, v, cq, ck, 11, 11, causal=True, return_lse=True)
            return jnp.sum(o) + jnp.sum(jnp.where(jnp.isfinite(lse), lse, 0.0)), (o, lse)
        grads, (o, lse) = jax.jit(jax.grad(f, argnums=(0, 1, 2), has_aux=True))(*map(jnp.asarray, (*x, cu_q, cu_k)))
        o, lse, grads = np.asarray(o), np.asarray(lse), [np.asarray(g) for g in grads]
    outside_q = np.r_[0:4, 21:Tq]
    outside_k = np.r_[0:2, 20:Tk]
    assert np.all(o[outside_q] == 0) and np.all(lse[:, outside_q] == -np.inf)
    assert np.all(grads[0][outside_q] == 0)
    assert np.all(grads[1][outside_k] == 0) and np.all(grads[2][outside_k] == 0)
    inside = np.r_[4:21]
    assert np.all(np.isfinite(lse[:, inside])) and np.all(np.abs(grads[0][inside]).sum(-1) > 0)


def test_varlen_sequence_longer_than_max_seqlen_under_jit():
    """With traced cu_seqlens no host check can run: a sequence longer than max_seqlen is cut
    there (as the reference cuts it: its later rows get zeros and are not seen), never read or
    written out of bounds. Eagerly, the host check names the argument."""
    cu = np.array([0, 12, 42], np.int32)
    rng = np.random.default_rng(10)
    q, k, v = (rng.standard_normal((42, 2, 16)).astype(np.float32) for _ in range(3))
    w = rng.standard_normal((42, 2, 16)).astype(np.float32)

    def loss(q, k, v, cu):
        o = ato_jax.flash_attention_varlen(q, k, v, cu, cu, 20, 25, causal=True)
        return jnp.sum(o * w), o

    grads, o = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(*map(jnp.asarray, (q, k, v, cu)))
    qt, kt, vt = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    ro = ref.flash_attention_varlen(qt, kt, vt, torch.from_numpy(cu), torch.from_numpy(cu), 20, 25, causal=True)
    rgrads = torch.autograd.grad((ro * torch.from_numpy(w).double()).sum(), (qt, kt, vt))
    np.testing.assert_allclose(np.asarray(o), ro.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(o)[12 + 20:] == 0)
    for g, rg in zip(grads, rgrads):
        np.testing.assert_allclose(np.asarray(g), rg.numpy(), rtol=1e-4, atol=1e-5)
    raises_naming(ValueError, "max_seqlen_q=20", ato_jax.flash_attention_varlen,
                  *map(jnp.asarray, (q, k, v, cu, cu)), 20, 30)


def _varlen_args(framework, Tq=10, Tk=12, Hq=2, Hkv=1, D=16):
    ato, arr = frontend(framework)
    rng = np.random.default_rng(0)
    f = {n: arr(rng.random(s).astype(np.float32)) for n, s in (("q", (Tq, Hq, D)), ("k", (Tk, Hkv, D)),
                                                                ("v", (Tk, Hkv, D)))}
    f["cu_seqlens_q"] = arr(np.array([0, 4, Tq], np.int32))
    f["cu_seqlens_k"] = arr(np.array([0, 5, Tk], np.int32))
    return ato, arr, f


VARLEN_BAD = [
    ("q rank", lambda a, f: f.update(q=f["q"][None]), ValueError, "q: expected"),
    ("k head size", lambda a, f: f.update(k=f["k"][..., :8], v=f["v"][..., :8]), ValueError, "k: expected"),
    ("cu float", lambda a, f: f.update(cu_seqlens_q=a(np.array([0.0, 4.0, 10.0], np.float32))), TypeError,
     "cu_seqlens_q"),
    ("cu lengths differ", lambda a, f: f.update(cu_seqlens_k=a(np.array([0, 12], np.int32))), ValueError,
     "cu_seqlens_k: expected shape (3,)"),
    ("cu decreasing", lambda a, f: f.update(cu_seqlens_q=a(np.array([0, 6, 3], np.int32))), ValueError,
     "cu_seqlens_q: expected non-decreasing"),
    ("cu past T", lambda a, f: f.update(cu_seqlens_k=a(np.array([0, 5, 13], np.int32))), ValueError,
     "cu_seqlens_k: expected values in [0, 12]"),
    ("negative start", lambda a, f: f.update(cu_seqlens_q=a(np.array([-1, 4, 10], np.int32))), ValueError,
     "cu_seqlens_q: expected values in [0, 10]"),
]


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,mutate,exc,fragment", VARLEN_BAD, ids=[b[0] for b in VARLEN_BAD])
def test_varlen_bad_inputs(framework, desc, mutate, exc, fragment):
    ato, arr, f = _varlen_args(framework)
    mutate(arr, f)
    raises_naming(exc, fragment, ato.flash_attention_varlen, f["q"], f["k"], f["v"], f["cu_seqlens_q"],
                  f["cu_seqlens_k"], 10, 12)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_varlen_bad_options(framework):
    ato, arr, f = _varlen_args(framework)
    args = (f["q"], f["k"], f["v"], f["cu_seqlens_q"], f["cu_seqlens_k"])
    raises_naming(ValueError, "max_seqlen_q=5", ato.flash_attention_varlen, *args, 5, 12)
    raises_naming(TypeError, "max_seqlen_k: expected a Python int", ato.flash_attention_varlen, *args, 10, 7.0)
    raises_naming(ValueError, "max_seqlen_q: expected >= 0", ato.flash_attention_varlen, *args, -1, 12)
    raises_naming(ValueError, "alibi_slopes: expected shape (2,) or (2, 2)", ato.flash_attention_varlen, *args, 10,
                  12, alibi_slopes=arr(np.ones((3,), np.float32)))
    raises_naming(ValueError, "window_size", ato.flash_attention_varlen, *args, 10, 12, window_size=(-2, 0))


def test_varlen_max_seqlen_must_be_static_in_jax():
    _, _, f = _varlen_args("jax")
    fn = jax.jit(lambda m: ato_jax.flash_attention_varlen(f["q"], f["k"], f["v"], f["cu_seqlens_q"],
                                                          f["cu_seqlens_k"], m, 12))
    raises_naming(TypeError, "max_seqlen_q: expected a Python int", fn, 10)


def test_varlen_reference_is_the_padded_reference():
    """The reference itself: the packed form equals flash_attention's reference on each
    sequence (float64, NumPy)."""
    rng = np.random.default_rng(11)
    lq, lk = (6, 9), (11, 4)
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]) for x in (lq, lk))
    q, k, v = (rng.standard_normal(s) for s in ((15, 2, 8), (15, 1, 8), (15, 1, 8)))
    slopes = rng.random((2, 2))
    o, lse = ref.flash_attention_varlen(q, k, v, cu_q, cu_k, 9, 11, causal=True, window_size=(3, None),
                                        alibi_slopes=slopes, return_lse=True)
    for b in range(2):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ob, lb = ref.flash_attention(q[rq][None], k[rk][None], v[rk][None], causal=True, window_size=(3, None),
                                     alibi_slopes=slopes[b], return_lse=True, layout="bnhd")
        np.testing.assert_allclose(o[rq], ob[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse[:, rq], lb[0], rtol=1e-12, atol=1e-12)


def test_varlen_jax_vmap():
    """vmap over a leading axis of q, k, v and cu_seqlens: each slice's own call."""
    rng = np.random.default_rng(12)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 14, 2, 16)).astype(np.float32)) for _ in range(3))
    cu = jnp.asarray(np.array([[0, 5, 14], [0, 9, 12]], np.int32))
    fn = lambda q, k, v, c: ato_jax.flash_attention_varlen(q, k, v, c, c, 9, 9, causal=True)  # noqa: E731
    out = jax.vmap(fn)(q, k, v, cu)
    for i in range(2):
        np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(fn(q[i], k[i], v[i], cu[i])))
