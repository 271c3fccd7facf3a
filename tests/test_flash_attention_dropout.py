"""Attention dropout (flash_attention and flash_attention_varlen's dropout_p, seed): CPU tier.

The keep-mask is read off the kernels (q = k = 0 makes every probability 1/Nk; v = the
identity makes o[i, j] = keep[i, j] * scale / Nk) and compared bit for bit with
reference.dropout_keep, Philox written out in NumPy. Outputs and gradients are checked
against the float64 reference that applies that mask (helpers.check: both frameworks,
bitwise torch == JAX).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_core.ops.flash_attention import plans
from ato_core.ops.flash_attention.cases import fa_case, fa_varlen_case
from ato_core.ops.flash_attention.reference import dropout_keep, philox4x32
from helpers import check, frontend, raises_naming


def _heads(B, Hq):
    return np.arange(B * Hq).reshape(B, Hq, 1, 1)


def _mask_inputs(B, Hq, Hkv, Nq, Nk):
    """q = k = 0 and v the identity over keys: o[b, h, i, j] = keep * scale / Nk (full attention)."""
    q = np.zeros((B, Hq, Nq, Nk), np.float32)
    k = np.zeros((B, Hkv, Nk, Nk), np.float32)
    v = np.broadcast_to(np.eye(Nk, dtype=np.float32), (B, Hkv, Nk, Nk)).copy()
    return q, k, v


def _kernel_mask(framework, p, seed, dims=(2, 4, 2, 37, 45)):
    ops, arr = frontend(framework)
    q, k, v = (arr(a) for a in _mask_inputs(*dims))
    o = np.asarray(ops.flash_attention(q, k, v, dropout_p=p, seed=seed))
    thr, scale = plans.dropout_threshold(p)
    kept = o != 0
    np.testing.assert_allclose(o[kept], scale / dims[4], rtol=1e-6)  # kept values scaled by 1 / (1 - p)
    return kept


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_is_the_reference_philox_mask(framework, p):
    B, Hq, Hkv, Nq, Nk = 2, 4, 2, 37, 45
    got = _kernel_mask(framework, p, 1234, (B, Hq, Hkv, Nq, Nk))
    want = dropout_keep(1234, p, _heads(B, Hq), np.arange(Nq)[:, None], np.arange(Nk)[None, :])
    np.testing.assert_array_equal(got, want)
    assert abs(got.mean() - (1 - p)) < 0.05
    assert 0 < got.mean() < 1


def test_philox_matches_the_random123_known_answers():
    """Philox4x32-10's known-answer vectors (Random123's kat_vectors): counter and key all
    zeros, and all ones."""
    zero = philox4x32(0, 0, 0, 0, 0)
    assert [int(w) for w in zero] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    ones = philox4x32(0xFFFFFFFFFFFFFFFF, *(0xFFFFFFFF,) * 4)
    assert [int(w) for w in ones] == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


def test_mask_statistics():
    """The draws behave as independent coins: the kept fraction, and pairs of one Philox word
    (keys j, j + 1), of one call (keys j, j + 8; queries i, i + 8), of neighbouring calls (keys
    j, j + 2 and j + 32; queries i, i + 1 and i + 16), heads and seeds, each within 5 binomial
    standard deviations (about 1e5 draws)."""
    p = plans.dropout_threshold(0.3)[0] / 256
    rows, cols = np.arange(256)[:, None], np.arange(512)[None, :]
    keep = dropout_keep(7, 0.3, _heads(1, 2), rows, cols)[0]
    n = keep.size

    def near(x, want, count):
        assert abs(x - want) < 5 * np.sqrt(want * (1 - want) / count), (x, want)

    near(keep.mean(), 1 - p, n)
    both = (1 - p) ** 2
    for dj in (1, 2, 8, 32):
        near((keep[..., :-dj] & keep[..., dj:]).mean(), both, n)
    for di in (1, 8, 16):
        near((keep[..., :-di, :] & keep[..., di:, :]).mean(), both, n)
    near((keep[0] & keep[1]).mean(), both, n / 2)                   # the next head
    other = dropout_keep(8, 0.3, _heads(1, 2), rows, cols)[0]
    near((keep & other).mean(), both, n)                            # another seed


def test_threshold_rounds_p_and_keeps_the_expectation_exact():
    assert plans.dropout_threshold(0.0) == (0, 1.0)
    thr, scale = plans.dropout_threshold(0.1)
    assert thr == 26 and scale == 256 / (256 - 26)
    assert plans.dropout_threshold(0.9999)[0] == 255  # never drops everything


DROPOUT_CASES = {
    # name: (B, Hq, Hkv, Nq, Nk, D, fa_case keywords)
    "full_gqa": (2, 4, 2, 45, 37, 32, dict(dropout=0.2)),
    "causal_nq_gt_nk": (2, 2, 1, 50, 21, 16, dict(dropout=0.5, causal=True)),  # rows that see no key
    "lengths_bnhd": (3, 2, 1, 33, 50, 16, dict(dropout=0.3, lengths="both", layout="bnhd")),
    "window_softcap_alibi": (1, 4, 2, 60, 60, 24, dict(dropout=0.1, window=(9, 3), softcap=2.0, alibi="h")),
    "bias_mask_segments": (2, 2, 2, 41, 41, 16, dict(dropout=0.25, bias="full", mask="pairs", segments=3)),
    "without_lse": (1, 2, 1, 40, 40, 16, dict(dropout=0.7, causal=True, lse=False)),
}


@pytest.mark.parametrize("name", list(DROPOUT_CASES))
def test_dropout_against_the_reference(name):
    *dims, kw = DROPOUT_CASES[name]
    check(fa_case(*dims, seed=len(name), **kw))


def test_dropout_half():
    """bf16 (p enters the tensor cores rounded; the GPU tier runs fp16 and bf16 at real sizes)."""
    check(fa_case(1, 4, 2, 50, 67, 64, dtype="bfloat16", causal=True, seed=4, dropout=0.1))


def test_dropout_varlen():
    """Packed sequences: sequence b's mask is flash_attention's of batch b at its positions."""
    check(fa_varlen_case((20, 0, 1, 33), (30, 5, 1, 40), 2, 1, 16, causal=True, seed=5, dropout=0.3, pad=(2, 3)))
    rng = np.random.default_rng(0)
    seqs = (19, 26)
    q, k, v = (torch.from_numpy(rng.standard_normal((sum(seqs), 2, 16)).astype(np.float32)) for _ in range(3))
    cu = torch.tensor([0, seqs[0], sum(seqs)], dtype=torch.int32)
    o = ato_torch.flash_attention_varlen(q, k, v, cu, cu, max(seqs), max(seqs), causal=True, dropout_p=0.4, seed=9)
    for b, (lo, hi) in enumerate(((0, seqs[0]), (seqs[0], sum(seqs)))):
        # batch b of a dense call with B = b + 1 (batch b's mask), the sequence in its slot
        dense = [torch.zeros(b + 1, 2, hi - lo, 16) for _ in range(3)]
        for t, x in zip(dense, (q, k, v)):
            t[b] = x[lo:hi].transpose(0, 1)
        ob = ato_torch.flash_attention(*dense, causal=True, dropout_p=0.4, seed=9)[b]
        assert torch.equal(o[lo:hi].transpose(0, 1), ob)


def _seed_forms(framework, s):
    if framework == "torch":
        return [s, torch.tensor(s), torch.tensor(s, dtype=torch.int32)]
    return [s, jnp.int32(s), jnp.asarray(s, jnp.int64) if jax.config.jax_enable_x64 else jnp.uint32(s),
            jax.random.PRNGKey(s), jax.random.key(s)]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_every_seed_form_draws_the_same_mask(framework):
    """An int s, a 0-d integer array s, jax.random.PRNGKey(s) / key(s) (data [0, s]): one mask,
    the same in both frameworks."""
    want = dropout_keep(5, 0.3, _heads(2, 4), np.arange(37)[:, None], np.arange(45)[None, :])
    for seed in _seed_forms(framework, 5):
        np.testing.assert_array_equal(_kernel_mask(framework, 0.3, seed), want)


def test_jax_traced_keys_do_not_retrace_and_take_gradients():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 2, 30, 16)).astype(np.float32)) for _ in range(3))
    f = jax.jit(lambda q, k, v, key: ato_jax.flash_attention(q, k, v, causal=True, dropout_p=0.2, seed=key))
    keys = jax.random.split(jax.random.key(0), 3)
    outs = [np.asarray(f(q, k, v, key)) for key in keys]
    assert f._cache_size() == 1
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])
    np.testing.assert_array_equal(outs[2], np.asarray(ato_jax.flash_attention(q, k, v, causal=True, dropout_p=0.2,
                                                                              seed=keys[2])))
    g = jax.jit(jax.grad(lambda q, key: jnp.sum(ato_jax.flash_attention(q, k, v, dropout_p=0.2, seed=key) ** 2)))
    for key in keys:
        assert np.all(np.isfinite(np.asarray(g(q, key))))
    assert g._cache_size() == 1


def test_torch_generator_draws_a_seed_and_advances():
    """A torch.Generator: each call draws the next seed from it (torch's own dropout's way), so
    two calls differ, and a generator seeded again repeats them; the drawn seed as an int
    gives the same output."""
    rng = np.random.default_rng(2)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 30, 16)).astype(np.float32)) for _ in range(3))
    g = torch.Generator().manual_seed(11)
    first, second = (ato_torch.flash_attention(q, k, v, dropout_p=0.3, seed=g) for _ in range(2))
    assert not torch.equal(first, second)
    g.manual_seed(11)
    drawn = int(torch.empty((), dtype=torch.int64).random_(2 ** 31, generator=g))
    assert torch.equal(first, ato_torch.flash_attention(q, k, v, dropout_p=0.3, seed=drawn))


def test_torch_seed_tensor_gradients_and_compile():
    """A seed tensor: the backward draws the forward's mask (gradients as with the int seed);
    torch.compile(fullgraph=True) gives eager's bits, and a new value in the same tensor a new
    mask without recompiling."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    seed = torch.tensor(77)

    def f(q, k, v, seed):
        return ato_torch.flash_attention(q, k, v, causal=True, dropout_p=0.25, seed=seed)

    runs = []
    for fn, s in ((f, 77), (f, seed), (torch.compile(f, fullgraph=True), seed)):
        o = fn(q, k, v, s)
        runs.append((o.detach(), *torch.autograd.grad((o * o).sum(), (q, k, v))))
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert torch.equal(a, b)
    compiled = torch.compile(f, fullgraph=True)
    seed.fill_(78)
    assert torch.equal(compiled(q, k, v, seed), f(q, k, v, 78))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_zero_dropout_is_plain_attention(framework):
    ops, arr = frontend(framework)
    rng = np.random.default_rng(3)
    q, k, v = (arr(rng.standard_normal((1, 2, 33, 16)).astype(np.float32)) for _ in range(3))
    plain = np.asarray(ops.flash_attention(q, k, v, causal=True))
    np.testing.assert_array_equal(np.asarray(ops.flash_attention(q, k, v, causal=True, dropout_p=0.0, seed=3)), plain)
    np.testing.assert_array_equal(np.asarray(ops.flash_attention(q, k, v, causal=True, dropout_p=0.0)), plain)


DROPOUT_BAD_INPUTS = [
    ("p one", dict(dropout_p=1.0, seed=1), ValueError, "dropout_p: expected a float in [0, 1), got 1.0"),
    ("p negative", dict(dropout_p=-0.1, seed=1), ValueError, "dropout_p: expected a float in [0, 1)"),
    ("p string", dict(dropout_p="0.1", seed=1), ValueError, "dropout_p: expected a float in [0, 1)"),
    ("no seed", dict(dropout_p=0.1), ValueError, "seed: expected an int, a 0-d integer array, a jax.random key"),
    ("seed negative", dict(dropout_p=0.1, seed=-3), ValueError, "seed: expected an int in [0, 2**31)"),
    ("seed float", dict(dropout_p=0.1, seed=1.5), ValueError, "seed: expected an int in [0, 2**31)"),
    ("seed array shape", dict(dropout_p=0.1, seed="seed3"), ValueError, "seed: expected a 0-d integer array"),
    ("seed float array", dict(dropout_p=0.1, seed="seed_float"), TypeError, "seed: expected an int, or an array"),
]


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,kw,exc,fragment", DROPOUT_BAD_INPUTS, ids=[b[0] for b in DROPOUT_BAD_INPUTS])
def test_dropout_bad_inputs(framework, desc, kw, exc, fragment):
    ops, arr = frontend(framework)
    x = [arr(np.ones(s, np.float32)) for s in ((1, 2, 5, 16), (1, 2, 6, 16), (1, 2, 6, 16))]
    named = {"seed3": np.ones(3, np.int32), "seed_float": np.ones((), np.float32)}
    kw = {n: arr(named[a]) if isinstance(a, str) and n == "seed" else a for n, a in kw.items()}
    raises_naming(exc, fragment, ops.flash_attention, *x, **kw)


def test_jax_vmap_over_keys_is_each_slice_alone():
    """jax.vmap over per-example keys (a batched seed) runs each slice with its own key."""
    rng = np.random.default_rng(5)
    q, k, v = (jnp.asarray(rng.standard_normal((3, 2, 20, 16)).astype(np.float32)) for _ in range(3))
    keys = jax.random.split(jax.random.key(0), 3)

    def f(q, k, v, key):
        return ato_jax.flash_attention(q[None], k[None], v[None], causal=True, dropout_p=0.3, seed=key)[0]

    out = jax.jit(jax.vmap(f))(q, k, v, keys)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(f(q[i], k[i], v[i], keys[i])))
