"""flash_attention: CPU tier (Triton's interpreter).

Every case runs in ato_torch and ato_jax (jax.jit(jax.value_and_grad)) on the same inputs
and is compared with the float64 plain-softmax reference: o, lse and the gradients of q, k
and v (through o and lse both), with the per-dtype tolerances of ato_cli.harness.TOLERANCE;
the two frameworks must agree bit for bit. The interpreter plan uses 32x16 / 16x32 blocks,
so these lengths cross several blocks and every masked and unmasked range runs.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_cli import harness as h
from ato_core.ops.flash_attention.cases import fa_case
from ato_core.ops.flash_attention import plans as fa_core
from ato_core import reference as ref
from ato_core.target import INTERPRETER
from helpers import assert_bnhd_is_bhnd, bad_input_arrays, check, frontend, raises_naming

FA_CASES = [
    # (B, Hq, Hkv, Nq, Nk, D)
    (1, 1, 1, 1, 1, 16),        # one query, one key
    (1, 2, 1, 37, 37, 16),      # multi-query; lengths no multiple of any block
    (2, 4, 2, 45, 29, 48),      # GQA, Nq > Nk: causal rows that see no key; D padded to 64
    (1, 4, 2, 29, 70, 80),      # Nq < Nk; D = 80
    (1, 3, 3, 64, 64, 24),      # lengths a multiple of the blocks
    (1, 2, 1, 20, 33, 130),     # D > 128 (padded to 256)
]


@pytest.mark.parametrize("dims", FA_CASES, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_fp32(dims, causal):
    check(fa_case(*dims, causal=causal, seed=sum(dims)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_half(dtype, causal):
    check(fa_case(2, 4, 2, 50, 67, 64, dtype=dtype, causal=causal, seed=4))


def test_without_lse_and_with_a_scale():
    check(fa_case(1, 2, 2, 40, 40, 32, causal=True, lse=False, seed=5))
    check(fa_case(1, 2, 1, 33, 21, 16, causal=False, scale=0.3, seed=6))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_queries_that_see_no_key(framework):
    """Causal with Nq > Nk: the first Nq - Nk queries see no key. Their output is 0 and
    their lse -inf, never NaN, and gradients stay finite."""
    B, H, Nq, Nk, D = 1, 2, 40, 9, 16
    rng = np.random.default_rng(7)
    x = [rng.standard_normal(s).astype(np.float32) for s in ((B, H, Nq, D), (B, H, Nk, D), (B, H, Nk, D))]
    if framework == "torch":
        leaves = [torch.from_numpy(a).requires_grad_() for a in x]
        o, lse = ato_torch.flash_attention(*leaves, causal=True, return_lse=True)
        o.sum().backward()
        o, lse, grads = o.detach().numpy(), lse.detach().numpy(), [t.grad.numpy() for t in leaves]
    else:
        arrays = [jnp.asarray(a) for a in x]
        o, lse = ato_jax.flash_attention(*arrays, causal=True, return_lse=True)
        grads = jax.grad(lambda *a: jnp.sum(ato_jax.flash_attention(*a, causal=True)), argnums=(0, 1, 2))(*arrays)
        o, lse, grads = np.asarray(o), np.asarray(lse), [np.asarray(g) for g in grads]
    empty = Nq - Nk
    assert np.all(o[:, :, :empty] == 0) and np.all(lse[:, :, :empty] == -np.inf)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse[:, :, empty:]))
    assert all(np.all(np.isfinite(g)) for g in grads)
    assert np.all(grads[0][:, :, :empty] == 0)
    # the last query sees every key: a plain softmax row
    s = x[0][:, :, -1:] @ x[1].transpose(0, 1, 3, 2) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o[:, :, -1:], (p / p.sum(-1, keepdims=True)) @ x[2], rtol=1e-5, atol=1e-6)


def test_non_contiguous_torch_inputs():
    """[B, N, H, D] tensors transposed to [B, H, N, D] are read in place: the same bits as
    contiguous copies, gradients included (a strided cotangent too)."""
    g = torch.Generator().manual_seed(0)
    bases = [torch.randn(2, n, h, 24, generator=g) for n, h in ((37, 4), (29, 2), (29, 2))]
    leaves_a = [b.clone().requires_grad_() for b in bases]
    views = [b.transpose(1, 2) for b in leaves_a]
    leaves_b = [t.detach().contiguous().requires_grad_() for t in views]
    oa = ato_torch.flash_attention(*views, causal=True)
    ob = ato_torch.flash_attention(*leaves_b, causal=True)
    do = torch.randn(2, 4, 24, 37, generator=g).transpose(2, 3)
    oa.backward(do)
    ob.backward(do)
    assert torch.equal(oa, ob)
    for a, b in zip(leaves_a, leaves_b):
        assert torch.equal(a.grad.transpose(1, 2), b.grad)


def test_reference_matches_torch_sdpa():
    """The reference against torch's own attention, with the bottom-right causal mask
    written out and GQA heads repeated."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 11, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 17, 8, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(11, 17, dtype=torch.bool).tril(17 - 11)
    want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                            attn_mask=mask)
    o, lse = ref.flash_attention(q, k, v, causal=True, return_lse=True)
    torch.testing.assert_close(o, want, rtol=1e-12, atol=1e-12)
    s = (q @ k.repeat_interleave(2, 1).transpose(2, 3) / np.sqrt(8)).masked_fill(~mask, -np.inf)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)


BAD_INPUTS = [
    ("q rank 3", lambda x: dict(x, q=x["q"][0]), ValueError, "q: expected rank 4"),
    ("Hq not a multiple of Hkv", lambda x: dict(x, k=x["k3"], v=x["k3"]), ValueError,
     "k: expected a number of kv heads that divides Hq=4"),
    ("D mismatch", lambda x: dict(x, k=x["k"][..., :4], v=x["v"][..., :4]), ValueError, "k: expected size 8 on axis 3"),
    ("v shape", lambda x: dict(x, v=x["v"][:, :, :3]), ValueError, "v: expected shape (2, 2, 6, 8)"),
    ("B mismatch", lambda x: dict(x, k=x["k"][:1], v=x["v"][:1]), ValueError, "k: expected size 2 on axis 0"),
    ("integer q", lambda x: dict(x, q=x["q_int"]), TypeError, "q: expected a floating dtype"),
    ("mixed dtypes", lambda x: dict(x, v=x["v_half"]), TypeError, "v: expected dtype float32"),
    ("head dim too large", lambda x: dict(x, q=x["q_wide"], k=x["k_wide"], v=x["k_wide"]), ValueError,
     "(D): expected in [1, 256]"),
    ("causal not a bool", lambda x: dict(x, causal="yes"), TypeError, "causal: expected a bool"),
    ("scale not a number", lambda x: dict(x, softmax_scale="0.1"), ValueError, "softmax_scale: expected None or"),
    ("scale not finite", lambda x: dict(x, softmax_scale=float("nan")), ValueError, "softmax_scale: expected"),
]


def _bad_input_args(framework):
    shapes = {"q": (2, 4, 5, 8), "k": (2, 2, 6, 8), "v": (2, 2, 6, 8), "k3": (2, 3, 6, 8), "q_wide": (2, 4, 5, 257),
              "k_wide": (2, 2, 6, 257)}
    x = bad_input_arrays(framework, shapes)
    x["v_half"] = frontend(framework)[1](np.asarray(x["v"]).astype(np.float16))
    x["causal"], x["softmax_scale"] = True, None
    return x


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,mutate,exc,fragment", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs(framework, desc, mutate, exc, fragment):
    ops = frontend(framework)[0]
    kw = mutate(_bad_input_args(framework))
    raises_naming(exc, fragment, ops.flash_attention, kw["q"], kw["k"], kw["v"], causal=kw["causal"],
                  softmax_scale=kw["softmax_scale"])


def test_plan_shapes_and_ranges():
    """The plan's grids cover every query and key block, GQA groups read their kv head,
    and D pads to a power of two >= 16 without EVEN_D."""
    spec = lambda *s: ato_torch.launcher.spec(torch.empty(s))  # noqa: E731
    q, k = spec(2, 8, 100, 80), spec(2, 2, 70, 80)
    (fwd,) = fa_core.forward_plan(q, k, k, causal=True, softmax_scale=None, target=INTERPRETER).launches
    cfg = fa_core.config(80, "float32", INTERPRETER)
    assert fwd.grid == (-(-100 // cfg.fwd.m), 16)
    assert fwd.constexprs["BD"] == 128 and fwd.constexprs["EVEN_D"] is False
    assert fwd.scalars[:5] == (8, 4, 100, 70, 80)
    delta, dkdv, dq = fa_core.backward_plan(q, k, k, q, causal=True, softmax_scale=None, has_dlse=False,
                                            target=INTERPRETER).launches
    assert dkdv.grid == (-(-70 // cfg.dkdv.n), 4) and dq.grid == (-(-100 // cfg.dq.m), 16)


def test_jax_vmap():
    V = 2
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    q = jax.random.normal(keys[0], (V, 1, 4, 21, 16))
    k, v = (jax.random.normal(key, (V, 1, 2, 19, 16)) for key in keys[1:])
    f = lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=True)  # noqa: E731
    chex.assert_trees_all_equal(jax.jit(jax.vmap(f))(q, k, v), jnp.stack([f(q[i], k[i], v[i]) for i in range(V)]))


@pytest.mark.parametrize("causal", [False, True])
def test_bnhd_layout(causal):
    """layout="bnhd" ([B, N, H, D] through strides): bitwise the bhnd results, GQA, Nq != Nk;
    lse (its own [B, Hq, Nq] layout) too; and the reference, which takes the layout."""
    rng = np.random.default_rng(11)
    B, Hq, Hkv, Nq, Nk, D = 2, 4, 2, 37, 45, 24
    q = rng.standard_normal((B, Hq, Nq, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, Hkv, Nk, D)).astype(np.float32) for _ in range(2))
    assert_bnhd_is_bhnd("flash_attention", q, k, v, rng.standard_normal(q.shape).astype(np.float32), causal=causal)
    sw = (0, 2, 1, 3)
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(a.transpose(sw))) for a in (q, k, v))
    o, lse = ato_torch.flash_attention(tq, tk, tv, causal=causal, return_lse=True, layout="bnhd")
    want_o, want_lse = ref.flash_attention(*(a.transpose(sw).astype(np.float64) for a in (q, k, v)), causal=causal,
                                           return_lse=True, layout="bnhd")
    np.testing.assert_allclose(o.numpy(), want_o, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bnhd_layout_names_its_shapes(framework):
    mod, arr = frontend(framework)
    q, k = arr(np.zeros((2, 8, 4, 16), np.float32)), arr(np.zeros((2, 8, 3, 16), np.float32))
    raises_naming(ValueError, "Hq=4", mod.flash_attention, q, k, k, layout="bnhd")
    raises_naming(ValueError, "[B, Nk, Hkv, D], the shape of k", mod.flash_attention, q, k,
                  arr(np.zeros((2, 8, 3, 8), np.float32)), layout="bnhd")
    raises_naming(ValueError, "layout", mod.flash_attention, q, q, q, layout="nhd")
