"""flash_attention: CPU tier (Triton's interpreter).

Every case runs in ato_torch and ato_jax (jax.jit(jax.value_and_grad)) on the same inputs
and is compared with the float64 plain-softmax reference: o, lse and the gradients of q, k
and v (through o and lse both), with the per-dtype tolerances of ato_cli.harness.TOLERANCE;
the two frameworks must agree bit for bit. The interpreter plan uses 32x16 / 16x32 blocks,
so these lengths cross several blocks and every masked and unmasked range runs.
"""

import dataclasses

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
from ato_core.ops.flash_attention import kernels as fa_kernels
from ato_core.target import GLUON_TRITON, INTERPRETER, has_gluon
from helpers import (assert_bnhd_is_bhnd, bad_input_arrays, check, check_special, frontend, plan_settings,
                     raises_naming)

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


def _gluon_triton() -> str:
    import triton

    return f"the Gluon kernels need a Triton of {GLUON_TRITON}, installed: {triton.__version__}"


needs_gluon = pytest.mark.skipif(not has_gluon(), reason=_gluon_triton())


def test_gluon_only_with_the_triton_it_was_written_for(monkeypatch):
    """Target.gluon needs a Triton release of GLUON_TRITON (Gluon's API changes between releases:
    3.9 has no thread_barrier): another one gets the portable kernels on an H100 too. With it, every
    family's Gluon module is imported (an error in one raises at import, never turns it off)."""
    import triton

    from ato_core import target
    from ato_core.ops.block_sparse import plans as bs_plans
    from ato_core.ops.decode import plans as decode_plans

    try:
        target.has_gluon.cache_clear()
        loaded = [m.hopper is not None for m in (fa_kernels, bs_plans, decode_plans)]
        assert loaded == [target.has_gluon()] * 3  # as the installed Triton decided at import
        monkeypatch.setattr(triton, "__version__", "3.9.0")
        target.has_gluon.cache_clear()
        assert not target.has_gluon()
    finally:
        target.has_gluon.cache_clear()


@pytest.mark.parametrize("Nq,Nk,causal,window", [
    (1000, 1000, True, None), (4096, 4096, True, (1024, None)), (777, 300, False, None), (300, 700, False, (64, 32)),
    (129, 4097, True, (300, 0)), (4097, 129, True, None), (1000, 1500, False, (0, 0)), (1, 1, True, None),
    (700, 700, False, (100, 50)), (300, 4500, True, (700, None))])
def test_mean_key_tiles_counts_the_visited_tiles(Nq, Nk, causal, window):
    """plans.mean_key_tiles (the persistent forward's rule) equals the key tiles of 128 that a
    block of 128 queries has an allowed key in (causal and the window bottom-right aligned),
    counted from the dense mask, on average over the blocks."""
    left, right = window or (None, None)
    i = np.arange(Nq)[:, None] + (Nk - Nq)
    j = np.arange(Nk)[None, :]
    allowed = np.ones((Nq, Nk), bool)
    if causal or right is not None:
        allowed &= j <= i + (0 if causal else right)
    if left is not None:
        allowed &= j >= i - left
    rows = np.zeros((-(-Nq // 128), Nk), bool)
    np.logical_or.at(rows, np.arange(Nq) // 128, allowed)
    tiles = np.zeros((rows.shape[0], -(-Nk // 128)), bool)
    np.logical_or.at(tiles.T, np.arange(Nk) // 128, rows.T)
    assert fa_core.mean_key_tiles(Nq, Nk, causal, window) == pytest.approx(tiles.sum(1).mean(), abs=1e-12)


@needs_gluon
def test_hopper_forward_chosen_where_it_applies():
    """On an H100 (Target.gluon) the forward plan launches the Gluon kernel for fp16 / bf16 at
    D 128 (D 64: its persistent form, where items are long) with causal, GQA, Nq != Nk, a window, softcap, q / kv lengths, ALiBi, segment ids and
    either layout (its persistent form where a query block's key tiles are few on average, not
    for packed sequences; with kv lengths only under PERSISTENT_KV_LENS); the portable kernel for
    anything it does not cover (fp32, another D, another option, no key, tuned settings, rows
    that TMA cannot copy: a storage offset or a stride off 16 bytes); never under the
    interpreter or with gluon off."""
    from ato_core.testing import gpu_spec, h100

    def fwd(q, k, target=h100(), **kw):
        kw.setdefault("causal", True)
        plan = fa_core.forward_plan(q, k, k, softmax_scale=None, target=target, **kw)
        return plan.launches[0]

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    persistent = "fa_fwd_hopper_persistent_kernel"
    launch = fwd(q, k)
    assert launch.name == persistent  # 8 x 16 items of 128 rows over the SMs, B last
    assert launch.grid == (min(8 * 16, h100().num_sms), 1) and launch.scalars[:4] == (8, 4, 1000, 700)
    assert launch.scalars[-2:] == (2, 0)  # B, the dropout seed (none)
    assert fwd(gpu_spec((2, 1000, 8, 128), "float16"), gpu_spec((2, 700, 2, 128), "float16"), layout="bnhd",
               causal=False).name == persistent
    window = fwd(q, k, options=fa_core.Options(window=(64, None)))
    assert window.name == persistent and window.constexprs["WINDOW"]
    assert window.scalars[5:7] == (64, 0) and launch.scalars[5:7] == (1000 + 700 + 1, 0)
    lengths_arrays = (None, None, gpu_spec((2,), "int64")) + (None,) * 5
    lengths = fwd(q, k, arrays=lengths_arrays)
    assert lengths.name == persistent and lengths.grid == launch.grid
    with plan_settings("flash_attention", fa_core, [fa_core.forward_plan], PERSISTENT_KV_LENS=False):
        off = fwd(q, k, arrays=lengths_arrays)
        assert off.name == "fa_fwd_hopper_kernel" and off.grid == (8, 16)  # flag off: one item a program
    assert lengths.inputs == ("q", "k", "v", "q", "kv_lengths", "q", "q", "q", "q")  # (no seed)
    assert lengths.constexprs["KV_LENS"] and not lengths.constexprs["Q_LENS"] and not lengths.constexprs["ALIBI"]
    for slopes, strides in ((gpu_spec((8,), "float32"), (0, 1)), (gpu_spec((2, 8), "float32"), (8, 1))):
        plan = fa_core.forward_plan(q, k, k, causal=True, softmax_scale=None, target=h100(),
                                    arrays=(slopes,) + (None,) * 7)
        alibi, = plan.launches
        assert alibi.name == persistent and alibi.constexprs["ALIBI"]
        assert alibi.inputs[5] == "alibi_slopes" and alibi.scalars[9:11] == strides
        assert plan.buffer("lse_base2").shape == (2, 8, 1000)  # the backward's base-2 lse
    capped = fa_core.forward_plan(q, k, k, causal=True, softmax_scale=0.1, target=h100(),
                                  options=fa_core.Options(window=(64, None), softcap=30.0))
    assert capped.launches[0].name == persistent and capped.launches[0].constexprs["SOFTCAP"]
    assert capped.launches[0].scalars[7:9] == (0.1 / 30.0, 30.0 * fa_core.LOG2E)  # cap_in, cap_out
    assert capped.buffer("lse_base2").shape == (2, 8, 1000) and not launch.constexprs["SOFTCAP"]
    segments = (None,) * 3 + (gpu_spec((2, 1000), "int32"), gpu_spec((2, 700), "int64"), None, None, None)
    seg = fwd(q, k, arrays=segments)
    assert seg.name == persistent and seg.constexprs["SEGMENTS"] and not launch.constexprs["SEGMENTS"]
    # long items (64.5 key tiles a query block on average): one a program; a window shortens them
    long_q, long_k = gpu_spec((1, 4, 16384, 128)), gpu_spec((1, 4, 16384, 128))
    assert fwd(long_q, long_k).name == "fa_fwd_hopper_kernel"
    assert fwd(long_q, long_k, options=fa_core.Options(window=(4096, None))).name == persistent
    # D 64: the persistent form from D64_MIN_TILES key tiles a query block on average (long items too), else
    # the portable kernel (below: 4.5 tiles), also with the persistent form off
    d64, d64_long = gpu_spec((1, 4, 4096, 64)), gpu_spec((1, 4, 16384, 64))
    assert fwd(d64, d64).name == fwd(d64, d64, causal=False).name == fwd(d64_long, d64_long).name == persistent
    assert fwd(d64, d64).constexprs["D"] == 64
    with plan_settings("flash_attention", fa_core, [fa_core.forward_plan], HOPPER_PERSISTENT=False):
        assert fwd(d64, d64).name == "fa_fwd_kernel"
    assert seg.inputs[6:] == ("q_segment_ids", "kv_segment_ids", "q") and seg.scalars[11:15] == (1000, 1, 700, 1)
    portable = [
        fwd(gpu_spec((2, 8, 1000, 128), "float32"), gpu_spec((2, 2, 700, 128), "float32")),
        fwd(gpu_spec((2, 8, 1000, 64)), gpu_spec((2, 2, 700, 64))),
        fwd(q, k, arrays=(None,) * 5 + (gpu_spec((2, 8, 1000, 700), "float32"), None, None)),
        fwd(q, gpu_spec((2, 2, 0, 128))),
        fwd(q, k, settings=fa_core.Settings(*fa_core._GPU_TILES[128])),
        fwd(q._replace(aligned=False), k),
        fwd(q._replace(strides=(1000 * 132, 1000 * 132 // 8, 132, 1)), k),
        fwd(q, k, target=INTERPRETER),
        fwd(q, k, target=dataclasses.replace(h100(), gluon=False)),
    ]
    assert [p.name for p in portable] == ["fa_fwd_kernel"] * len(portable)


@needs_gluon
def test_hopper_backward_chosen_where_it_applies():
    """The backward plan on an H100 launches the Gluon dK / dV and dQ
    kernels after the portable delta kernel where the Gluon forward applies (GQA, Nq != Nk,
    causal or not, either layout, a window, q / kv lengths, ALiBi: reading the forward's base-2
    lse; softcap too), do laid out as TMA needs; the portable kernels otherwise. dQ one item a
    program (its persistent form: test_hopper_persistent_dq_chosen_where_it_applies)."""
    from ato_core.testing import gpu_spec, h100

    def bwd(q, k, do=None, target=h100(), **kw):
        kw.setdefault("causal", True)
        with plan_settings("flash_attention", fa_core, [], HOPPER_BWD_PERSISTENT=False):
            plan = fa_core.backward_plan(q, k, k, q if do is None else do, softmax_scale=None, has_dlse=False,
                                         target=target, **kw)
        return [launch.name for launch in plan.launches], plan

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    names, plan = bwd(q, k)
    assert names == ["fa_bwd_delta_kernel", "fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    _, dkdv, dq = plan.launches
    assert dkdv.grid == (6, 4) and dq.grid == (8, 16) and dkdv.scalars[:4] == dq.scalars[:4] == (8, 4, 1000, 700)
    assert dkdv.inputs == dq.inputs == ("q", "k", "v", "do", "lse2", "delta", "q", "q", "q", "q", "q", "q")
    assert dkdv.scalars[-1] == dq.scalars[-1] == 0 and not dkdv.constexprs.get("DROPOUT")  # no seed
    assert dkdv.scalars[6:8] == dq.scalars[6:8] == (1000 + 700 + 1, 0) and not dkdv.constexprs["WINDOW"]
    assert plan.results == ("dq", "dk", "dv")
    names, plan = bwd(gpu_spec((2, 1000, 8, 128), "float16"), gpu_spec((2, 700, 2, 128), "float16"), layout="bnhd",
                      causal=False)
    assert names[1:] == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    assert plan.buffer("dq").shape == (2, 1000, 8, 128)
    assert plan.launches[2].scalars[-6:] == (1000 * 8 * 128, 128, 8 * 128, 1000, 700, 0)  # dq's strides, Tq, Tk, seed
    names, plan = bwd(q, k, options=fa_core.Options(window=(64, None)))
    assert names[1:] == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    assert all(launch.constexprs["WINDOW"] and launch.scalars[6:8] == (64, 0) for launch in plan.launches[1:])
    names, plan = bwd(q, k, arrays=(None, None, gpu_spec((2,), "int64")) + (None,) * 5)
    assert names[1:] == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    assert all(launch.inputs[6:9] == ("q", "kv_lengths", "q") and launch.constexprs["KV_LENS"]
               and not launch.constexprs["Q_LENS"] for launch in plan.launches[1:])
    names, plan = bwd(q, k, arrays=(gpu_spec((2, 8), "float32"),) + (None,) * 7)
    assert names[1:] == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    assert all(launch.inputs[4] == "lse_base2" and launch.inputs[8] == "alibi_slopes"
               and launch.constexprs["ALIBI"] and launch.scalars[10:12] == (8, 1) for launch in plan.launches[1:])
    names, plan = bwd(q, k, options=fa_core.Options(window=(64, None), softcap=30.0))
    assert names[1:] == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    assert all(launch.inputs[4] == "lse_base2" and launch.constexprs["SOFTCAP"] for launch in plan.launches[1:])
    segments = (None,) * 3 + (gpu_spec((2, 1000), "int32"), gpu_spec((2, 700), "int32"), None, None, None)
    portable = [
        bwd(q, k, arrays=segments),
        bwd(gpu_spec((2, 8, 1000, 64)), gpu_spec((2, 2, 700, 64))),
        bwd(q, k, do=q._replace(aligned=False)),
        bwd(q, k, do=q._replace(strides=(1000 * 132, 1000 * 132 // 8, 132, 1))),
        bwd(q, k, settings=fa_core.Settings(*fa_core._GPU_TILES[128])),
        bwd(q, k, target=dataclasses.replace(h100(), gluon=False)),
        bwd(q, k, target=INTERPRETER),
    ]
    assert [names[1:] for names, _ in portable] == [["fa_bwd_dkdv_kernel", "fa_bwd_dq_kernel"]] * len(portable)


@needs_gluon
def test_hopper_dropout_chosen_where_it_applies():
    """With plans.HOPPER_DROPOUT the dense forward with dropout runs the Gluon kernel, persistent or
    one item a program as without dropout, its mask drawn by the producer: an int seed (the last
    scalar), a 0-d seed array or a JAX key's two words (SEED_WORDS 1, 2), the threshold and scale
    of dropout_threshold, the ring and registers of HOPPER_DROPOUT_CONFIG; GQA, a window, ALiBi, q /
    kv lengths, bnhd alike. The portable kernels elsewhere: D 64, packed sequences, the flag off. A
    launch without dropout passes no seed (q, 0)."""
    from ato_core.testing import gpu_spec, h100

    def fwd(q, k, **kw):
        return fa_core.forward_plan(q, k, k, causal=True, softmax_scale=None, target=h100(), **kw).launches[0]

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    drop = fa_core.Options(dropout_p=0.1, seed=3)
    thr, scale = fa_core.dropout_threshold(0.1)
    words = {(): 1, (2,): 2}
    persistent, item = "fa_fwd_hopper_persistent_kernel", "fa_fwd_hopper_kernel"
    with plan_settings("flash_attention", fa_core, [], HOPPER_DROPOUT=True):
        for name, on in ((persistent, True), (item, False)):
            with plan_settings("flash_attention", fa_core, [], HOPPER_PERSISTENT=on):
                launch, plain = fwd(q, k, options=drop), fwd(q, k)
            assert launch.name == plain.name == name and launch.grid == plain.grid
            assert launch.inputs[-1] == "q" and launch.scalars[-1] == 3 and launch.scalars[:-1] == plain.scalars[:-1]
            assert {n: launch.constexprs[n] for n in ("DROPOUT", "SEED_WORDS", "DROP_THR", "DROP_SCALE")} == \
                {"DROPOUT": True, "SEED_WORDS": 0, "DROP_THR": thr, "DROP_SCALE": scale}
            assert all(launch.constexprs[n] == v for n, v in fa_core.HOPPER_DROPOUT_CONFIG.items())
            assert plain.inputs[-1] == "q" and plain.scalars[-1] == 0 and not plain.constexprs["DROPOUT"]
            assert plain.constexprs["STAGES"] == fa_core.HOPPER["STAGES"]
        for shape, dtype in (((), "int64"), ((2,), "uint32")):
            seeded = fwd(q, k, options=fa_core.Options(dropout_p=0.1), arrays=(None,) * 7 + (gpu_spec(shape, dtype),))
            assert seeded.name == persistent and seeded.inputs[-1] == "seed"
            assert seeded.constexprs["SEED_WORDS"] == words[shape] and seeded.scalars[-1] == 0
        lengths = (gpu_spec((2, 8), "float32"), gpu_spec((2,), "int32"), gpu_spec((2,), "int64")) + (None,) * 5
        other = fwd(gpu_spec((2, 1000, 8, 128)), gpu_spec((2, 700, 2, 128)), layout="bnhd", arrays=lengths,
                    options=fa_core.Options(window=(64, None), dropout_p=0.1, seed=3))
        assert other.name == persistent and other.constexprs["DROPOUT"] and other.constexprs["WINDOW"]
        assert other.inputs[3:] == ("q_lengths", "kv_lengths", "alibi_slopes", "q", "q", "q")
        long_64 = gpu_spec((2, 8, 4096, 64))  # 16.5 key tiles an item: D 64 runs persistent, but not dropout
        assert fwd(long_64, long_64).name == persistent
        assert fwd(long_64, long_64, options=drop).name == "fa_fwd_kernel"
        cu = gpu_spec((3,), "int32")
        packed = fa_core.varlen_forward_plan(gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128)), gpu_spec((900, 2, 128)),
                                             cu, cu, max_seqlen_q=400, max_seqlen_k=500, causal=True,
                                             softmax_scale=None, target=h100(), options=drop)
        assert packed.launches[0].name == "fa_fwd_kernel"
    with plan_settings("flash_attention", fa_core, [], HOPPER_DROPOUT=False):
        assert fwd(q, k, options=drop).name == "fa_fwd_kernel"


@needs_gluon
def test_hopper_dropout_backward_chosen_where_it_applies():
    """With plans.HOPPER_DROPOUT_BACKWARD the dense backward with dropout runs the Gluon dK / dV and dQ
    kernels (either dQ form), their producers drawing the mask: the seed as the forward takes it (an
    int the last scalar, a seed array the last input, SEED_WORDS), the threshold and scale of
    dropout_threshold, the producer registers of HOPPER_BWD_DROPOUT, dQ's rings DQ_DROPOUT_STAGES
    deep and dK / dV's HOPPER_BWD's; GQA, a window, ALiBi, lengths alike. The portable kernels with
    the flag off, at D 64 and for packed sequences."""
    from ato_core.testing import gpu_spec, h100

    def bwd(q, k, **kw):
        plan = fa_core.backward_plan(q, k, k, q, causal=True, softmax_scale=None, has_dlse=False, target=h100(), **kw)
        return [launch.name for launch in plan.launches[1:]], plan.launches[1:]

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    drop = fa_core.Options(dropout_p=0.1, seed=3)
    thr, scale = fa_core.dropout_threshold(0.1)
    with plan_settings("flash_attention", fa_core, [], HOPPER_DROPOUT_BACKWARD=True):
        for persistent in (True, False):
            with plan_settings("flash_attention", fa_core, [], HOPPER_BWD_PERSISTENT=persistent):
                (names, launches), (_, plain) = bwd(q, k, options=drop), bwd(q, k)
            dq_name = "fa_bwd_dq_hopper_persistent_kernel" if persistent else "fa_bwd_dq_hopper_kernel"
            assert names == ["fa_bwd_dkdv_hopper_kernel", dq_name], names
            for launch, ref in zip(launches, plain):
                assert launch.inputs == ref.inputs and launch.inputs[-1] == "q" and launch.grid == ref.grid
                assert launch.scalars[-1] == 3 and launch.scalars[:-1] == ref.scalars[:-1]
                assert {n: launch.constexprs[n] for n in ("DROPOUT", "SEED_WORDS", "DROP_THR", "DROP_SCALE")} == \
                    {"DROPOUT": True, "SEED_WORDS": 0, "DROP_THR": thr, "DROP_SCALE": scale}
                assert launch.constexprs["PRODUCER_REGS"] == fa_core.HOPPER_BWD_DROPOUT["PRODUCER_REGS"]
            assert launches[0].constexprs["STAGES"] == plain[0].constexprs["STAGES"] == fa_core.HOPPER_BWD["STAGES"]
            assert launches[1].constexprs["STAGES"] == fa_core.DQ_DROPOUT_STAGES
        for shape, dtype, words in (((), "int64", 1), ((2,), "uint32", 2)):
            arrays = (gpu_spec((2, 8), "float32"), None, gpu_spec((2,), "int64")) + (None,) * 4 + \
                (gpu_spec(shape, dtype),)
            names, launches = bwd(q, k, options=fa_core.Options(window=(64, None), dropout_p=0.1), arrays=arrays)
            assert names == ["fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"], names  # kv lengths: one item
            assert all(launch.inputs[-1] == "seed" and launch.constexprs["SEED_WORDS"] == words
                       and launch.constexprs["WINDOW"] and launch.constexprs["ALIBI"] for launch in launches)
        portable = [bwd(gpu_spec((2, 8, 1000, 64)), gpu_spec((2, 2, 700, 64)), options=drop)[0]]
    with plan_settings("flash_attention", fa_core, [], HOPPER_DROPOUT_BACKWARD=False):
        portable.append(bwd(q, k, options=drop)[0])
    cu = gpu_spec((3,), "int32")
    packed = fa_core.varlen_backward_plan(gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128)), gpu_spec((900, 2, 128)),
                                          cu, cu, gpu_spec((700, 8, 128)), max_seqlen_q=400, max_seqlen_k=500,
                                          causal=True, softmax_scale=None, has_dlse=False, target=h100(), options=drop)
    portable.append([launch.name for launch in packed.launches[1:]])
    assert portable == [["fa_bwd_dkdv_kernel", "fa_bwd_dq_kernel"]] * 3, portable


@needs_gluon
def test_hopper_split_kv_chosen_where_it_applies():
    """plans.HOPPER_SPLIT_KV gives the dense Gluon forward, either form and with dropout, split K / V
    barriers (SPLIT_KV) and nothing else of its launch changes; packed sequences and the flag off keep
    the joint ones."""
    from ato_core.testing import gpu_spec, h100

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    cu = gpu_spec((3,), "int32")
    for persistent in (True, False):
        for options in (fa_core.Options(), fa_core.Options(window=(64, None), dropout_p=0.1, seed=3)):
            launches = {}
            for split in (True, False):
                with plan_settings("flash_attention", fa_core, [], HOPPER_SPLIT_KV=split,
                                   HOPPER_PERSISTENT=persistent):
                    launches[split] = fa_core.forward_plan(q, k, k, causal=True, softmax_scale=None, target=h100(),
                                                           options=options).launches[0]
                    packed = fa_core.varlen_forward_plan(gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128)),
                                                         gpu_spec((900, 2, 128)), cu, cu, max_seqlen_q=400,
                                                         max_seqlen_k=500, causal=True, softmax_scale=None,
                                                         target=h100()).launches[0]
                    assert packed.kernel.is_gluon() and packed.constexprs["SPLIT_KV"] is False
            on, off = launches[True], launches[False]
            assert on.kernel.is_gluon() and on.constexprs["SPLIT_KV"] is True and off.constexprs["SPLIT_KV"] is False
            assert dataclasses.replace(on, constexprs={**on.constexprs, "SPLIT_KV": False}) == off


def test_dropout_rounds_agree():
    """The Philox rounds of the dropout draw: the reference's (plans), the portable kernels' and
    the Gluon forward's (where the installed Triton has it) are one number."""
    rounds = {fa_core.DROPOUT_ROUNDS, fa_kernels.DROPOUT_ROUNDS.value}
    if fa_kernels.hopper is not None:
        rounds.add(fa_kernels.hopper.DROPOUT_ROUNDS.value)
    assert len(rounds) == 1, rounds


@needs_gluon
def test_hopper_persistent_dq_chosen_where_it_applies():
    """With plans.HOPPER_BWD_PERSISTENT (the default), dQ runs its persistent kernel where the forward's rule
    would (a mean of at most PERSISTENT_MAX_TILES key tiles a query block), dense and without
    lengths: grid (min(items, SMs), 1), the batch as its last scalar; one item a program for long
    items, q or kv lengths and packed sequences."""
    from ato_core.testing import gpu_spec, h100

    def dq(q, k, **kw):
        plan = fa_core.backward_plan(q, k, k, q, causal=True, softmax_scale=None, has_dlse=False, target=h100(), **kw)
        return plan.launches[2]

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    with plan_settings("flash_attention", fa_core, [fa_core.backward_plan, fa_core.varlen_backward_plan],
                       HOPPER_BWD_PERSISTENT=True):
        launch = dq(q, k)
        assert launch.name == "fa_bwd_dq_hopper_persistent_kernel" and launch.grid == (min(8 * 16, h100().num_sms), 1)
        assert launch.scalars[-4:] == (1000, 700, 2, 0) and launch.outputs[-1].name == "tma_scratch_dq"
        assert dq(q, k, options=fa_core.Options(window=(64, None), softcap=30.0)).name == launch.name
        assert dq(q, k, arrays=(gpu_spec((2, 8), "float32"),) + (None,) * 7).name == launch.name
        long_q = gpu_spec((1, 4, 16384, 128))
        lengths = (None, gpu_spec((2,), "int32"), None) + (None,) * 5
        assert dq(long_q, long_q).name == dq(q, k, arrays=lengths).name == "fa_bwd_dq_hopper_kernel"
        assert dq(q, k, arrays=(None, None, gpu_spec((2,), "int32")) + (None,) * 5).name == "fa_bwd_dq_hopper_kernel"
        cu = gpu_spec((3,), "int32")
        packed = fa_core.varlen_backward_plan(gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128)), gpu_spec((900, 2, 128)),
                                              cu, cu, gpu_spec((700, 8, 128)), max_seqlen_q=400, max_seqlen_k=500,
                                              causal=True, softmax_scale=None, has_dlse=False, target=h100())
        assert packed.launches[2].name == "fa_bwd_dq_hopper_kernel"
    with plan_settings("flash_attention", fa_core, [fa_core.backward_plan], HOPPER_BWD_PERSISTENT=False):
        assert dq(q, k).name == "fa_bwd_dq_hopper_kernel"


@needs_gluon
def test_hopper_varlen_chosen_where_it_applies():
    """Packed sequences on an H100: the Gluon forward, dK / dV and dQ kernels with VARLEN (grid over
    the longest sequence and a slot after the last, cu_seqlens in the lengths' places, packed
    strides with batch stride 0, lse [Hq, Tq], Tq and Tk the last scalars) for fp16 / bf16 at D
    128 with causal, GQA, a window, softcap and ALiBi; the portable kernels for dropout, another
    D, no query or key rows, rows TMA cannot copy, or the backward switched off."""
    from ato_core.testing import gpu_spec, h100

    cu = gpu_spec((4,), "int32")

    def plans(q, k, do=None, target=h100(), **kw):
        kw = {"max_seqlen_q": 300, "max_seqlen_k": 500, "causal": True, "softmax_scale": None, "target": target, **kw}
        fwd = fa_core.varlen_forward_plan(q, k, k, cu, cu, **kw)
        bwd = fa_core.varlen_backward_plan(q, k, k, cu, cu, q if do is None else do, has_dlse=False, **kw)
        return fwd, bwd, [launch.name for launch in fwd.launches + bwd.launches[1:]]

    q, k = gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128))
    gluon = ["fa_fwd_hopper_kernel", "fa_bwd_dkdv_hopper_kernel", "fa_bwd_dq_hopper_kernel"]
    fwd, bwd, names = plans(q, k, options=fa_core.Options(window=(64, None)), alibi=gpu_spec((3, 8), "float32"))
    assert names == gluon
    (f,), (_, dkdv, dq) = fwd.launches, bwd.launches
    assert (f.grid, dkdv.grid, dq.grid) == ((3, 32), (4, 8), (3, 32))
    assert f.inputs == ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "q", "q", "q")  # no seed
    assert dkdv.inputs == dq.inputs == ("q", "k", "v", "do", "lse_base2", "delta", "cu_seqlens_q", "cu_seqlens_k",
                                        "alibi_slopes", "q", "q", "q")
    assert all(launch.constexprs["VARLEN"] and launch.constexprs["WINDOW"] and launch.constexprs["ALIBI"]
               and not launch.constexprs["Q_LENS"] and not launch.constexprs["KV_LENS"] for launch in (f, dkdv, dq))
    assert f.scalars[-3:] == (700, 900, 0) and dkdv.scalars[-3:] == dq.scalars[-3:] == (700, 900, 0)  # Tq, Tk, seed
    assert f.scalars[:4] == dkdv.scalars[:4] == (8, 4, 300, 500) and f.scalars[15:18] == (0, 128, 8 * 128)
    assert fwd.buffer("o").shape == (700, 8, 128) and fwd.buffer("lse").shape == (8, 700)
    assert fwd.buffer("lse_base2").shape == (8, 700)
    assert bwd.buffer("dk").shape == (900, 2, 128) and dkdv.scalars[-9:-3] == (0, 128, 256) * 2
    assert plans(gpu_spec((700, 8, 128), "float16"), gpu_spec((900, 8, 128), "float16"), causal=False)[2] == gluon
    assert plans(q, k, options=fa_core.Options(softcap=30.0))[2] == gluon
    portable = [
        plans(q, k, options=fa_core.Options(dropout_p=0.1), seed=gpu_spec((), "int64")),
        plans(gpu_spec((700, 8, 64)), gpu_spec((900, 2, 64))),
        plans(q, gpu_spec((0, 2, 128))),
        plans(q._replace(aligned=False), k),
        plans(q, k, target=dataclasses.replace(h100(), gluon=False)),
    ]
    assert [names for _, _, names in portable] == [["fa_fwd_kernel", "fa_bwd_dkdv_kernel", "fa_bwd_dq_kernel"]] * 5
    assert plans(q, k, do=q._replace(aligned=False))[2] == gluon[:1] + ["fa_bwd_dkdv_kernel", "fa_bwd_dq_kernel"]


def test_hopper_backward_switched_off(portable_backward):
    """plans.HOPPER_BACKWARD = False: an H100's backward plan is the portable one."""
    from ato_core.testing import gpu_spec, h100

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 700, 128))
    plan = fa_core.backward_plan(q, k, k, q, causal=True, softmax_scale=None, has_dlse=False, target=h100())
    assert [launch.name for launch in plan.launches][1:] == ["fa_bwd_dkdv_kernel", "fa_bwd_dq_kernel"]


@needs_gluon
def test_jax_target_without_a_gluon_launcher(monkeypatch):
    """ato_jax plans for a Hopper GPU without Gluon kernels when its jax-triton cannot compile
    them (0.4.x), with them when it can (0.3.x, through launcher._compile_gluon)."""
    from ato_core.testing import h100
    from ato_jax import launcher

    monkeypatch.setattr(launcher, "platform_of", lambda arrays: "gpu")
    monkeypatch.setattr(launcher, "cuda_target", lambda index=0: h100())
    monkeypatch.setattr(launcher, "gluon_launches", lambda: False)
    assert launcher.target_for() == dataclasses.replace(h100(), gluon=False)
    monkeypatch.setattr(launcher, "gluon_launches", lambda: True)
    assert launcher.target_for() == h100()


def test_torch_scratch_is_the_launch_output():
    """A Launch.scratch launch from torch: Triton's launcher gets the launch's last output as its
    global scratch allocation (refused, naming the sizes, when too small or misaligned), and the
    caller's own allocator (triton.set_allocator) is back after the launch."""
    import contextvars

    import triton
    from triton.runtime import _allocation

    def check():
        mine = lambda size, align, stream: None  # noqa: E731
        triton.set_allocator(mine)
        out = torch.empty(64, dtype=torch.int32)
        with ato_torch.launcher._scratch(out):
            allocate = _allocation._allocator.get()
            assert allocate(256, 4, None) is out
            with pytest.raises(RuntimeError, match="257 bytes aligned to 4 asked, the launch's last output has 256"):
                allocate(257, 4, None)
        with ato_torch.launcher._scratch(out[1:]):  # 4 bytes in: never 128-byte aligned
            with pytest.raises(RuntimeError, match="16 bytes aligned to 128 asked"):
                _allocation._allocator.get()(16, 128, None)
        assert _allocation._allocator.get() is mine

    contextvars.copy_context().run(check)


def test_torch_spec_alignment():
    """ato_torch's ArraySpec says whether a tensor's data is 16-byte aligned (from its storage
    offset), which the Hopper forward needs."""
    x = torch.empty(4, 64, dtype=torch.bfloat16)
    assert ato_torch.launcher.spec(x).aligned and ato_torch.launcher.spec(x[1:]).aligned
    assert not ato_torch.launcher.spec(x[:, 1:]).aligned and not ato_torch.launcher.spec(x.view(-1)[4:]).aligned


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


# Issue 25's options. Each against the float64 reference (the dense masked form) and bitwise
# torch == JAX, at sizes that cross several 32x16 / 16x32 interpreter blocks, so that the
# window's masked-unmasked-masked ranges, skipped blocks and partial blocks all run.
OPTION_CASES = {
    # name: (B, Hq, Hkv, Nq, Nk, D, fa_case keywords)
    "window": (1, 2, 1, 70, 70, 16, dict(window=(9, 5))),
    "window_left_causal": (1, 2, 2, 66, 81, 24, dict(window=(20, None), causal=True)),
    "window_right_only": (1, 2, 1, 45, 60, 16, dict(window=(None, 3))),
    "window_left_zero_causal": (1, 2, 1, 40, 40, 16, dict(window=(0, 0), causal=True)),  # the diagonal alone
    "window_wider_than_n": (1, 2, 1, 33, 29, 16, dict(window=(100, 100))),
    "window_nq_gt_nk": (2, 2, 1, 50, 21, 16, dict(window=(6, None), causal=True)),  # rows that see no key
    "softcap": (1, 4, 2, 45, 37, 32, dict(softcap=0.7)),  # scores near and past the cap: tanh's saturation
    "alibi_heads_causal": (1, 4, 2, 45, 60, 16, dict(alibi="h", causal=True)),
    "alibi_batch_heads": (2, 2, 1, 37, 29, 16, dict(alibi="bh")),
    "q_lengths": (3, 2, 1, 37, 45, 16, dict(lengths="q")),
    "kv_lengths_causal": (3, 2, 1, 37, 45, 16, dict(lengths="kv", causal=True)),
    "lengths_both_window": (3, 2, 2, 50, 50, 16, dict(lengths="both", window=(7, 7))),
    "segments": (2, 2, 1, 60, 60, 16, dict(segments=3)),
    "segments_causal_nq_ne_nk": (2, 4, 2, 41, 53, 24, dict(segments=4, causal=True)),
    # segment ids out of order: no run of whole tiles, every tile masked
    "segments_unsorted": (2, 2, 1, 60, 60, 16, dict(segments=3, segments_sorted=False)),
    # runs of whole tiles (unmasked) and a range scan over several steps of 16 tiles
    "segments_long_runs_causal": (1, 2, 1, 300, 290, 16, dict(segments=2, causal=True)),
    # one query segment in two runs of whole key tiles with another between (not one run: all
    # masked); a batch whose queries' segment no key has (o = 0)
    "segments_split_runs": (2, 2, 1, 96, 96, 16, dict(segments=3, segment_values=(
        [0] * 96 + [2] * 96, ([0] * 32 + [1] * 32 + [0] * 32) * 2))),
    "segments_kv_lengths_bias_causal": (2, 2, 1, 45, 50, 16, dict(segments=2, lengths="kv", bias="heads_keys",
                                                                  causal=True)),
    "causal_window_softcap_gqa": (2, 4, 2, 70, 70, 48, dict(window=(15, None), causal=True, softcap=1.5)),
    "all": (2, 4, 2, 50, 61, 16, dict(window=(12, 4), causal=True, softcap=2.0, alibi="bh", lengths="both",
                                      segments=3)),
    "bias": (2, 2, 1, 37, 45, 16, dict(bias="full")),
    "bias_broadcast_causal": (1, 4, 2, 45, 60, 24, dict(bias="heads_keys", causal=True)),
    "bias_per_head_batch3": (3, 4, 2, 40, 45, 16, dict(bias="heads_keys")),  # batches inner on the grid
    "mask_pairs_causal": (2, 2, 2, 41, 41, 16, dict(mask="pairs", causal=True)),
    "mask_full_nq_gt_nk": (2, 4, 2, 50, 21, 16, dict(mask="full")),
    "bias_mask_window_softcap_alibi": (2, 4, 2, 45, 50, 16, dict(bias="full", mask="full", window=(9, 3),
                                                                 softcap=3.0, alibi="h", lengths="kv")),
}


@pytest.mark.parametrize("name", list(OPTION_CASES))
def test_options(name):
    *dims, kw = OPTION_CASES[name]
    check(fa_case(*dims, seed=len(name), **kw))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_options_half(dtype):
    check(fa_case(2, 4, 2, 60, 70, 64, dtype=dtype, seed=3, window=(17, None), causal=True, softcap=5.0, alibi="h",
                  lengths="kv"))


def test_options_bnhd():
    check(fa_case(2, 4, 2, 45, 50, 32, seed=8, layout="bnhd", window=(10, 2), softcap=1.0, alibi="bh", lengths="both",
                  segments=2))


def test_lengths_zero_rows_and_gradients():
    """Queries past q_lengths get o = 0, lse = -inf and zero dq; keys past kv_lengths zero dk,
    dv; a batch of zero queries or keys is all zeros; NaN in the padding reaches nothing."""
    rng = np.random.default_rng(3)
    B, H, N, D = 3, 2, 40, 16
    q, k, v = (rng.standard_normal((B, H, N, D)).astype(np.float32) for _ in range(3))
    q[0, :, 25:] = np.nan
    k[1, :, 10:] = np.nan
    v[1, :, 10:] = np.nan
    ql, kl = np.array([25, 40, 0], np.int32), np.array([40, 10, 40], np.int32)
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    o, lse = ato_torch.flash_attention(tq, tk, tv, causal=True, return_lse=True, q_lengths=torch.from_numpy(ql),
                                       kv_lengths=torch.from_numpy(kl))
    (o.sum() + torch.where(torch.isinf(lse), 0.0, lse).sum()).backward()
    for t in (o, lse, tq.grad, tk.grad, tv.grad):
        assert not torch.isnan(t).any()
    assert (o[0, :, 25:] == 0).all() and torch.isneginf(lse[0, :, 25:]).all() and (tq.grad[0, :, 25:] == 0).all()
    assert (tk.grad[1, :, 10:] == 0).all() and (tv.grad[1, :, 10:] == 0).all()
    assert (o[2] == 0).all() and (tk.grad[2] == 0).all() and (tv.grad[2] == 0).all()
    assert (o[0, :, :25] != 0).any()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bias_with_neg_inf(causal):
    """A bias of -inf is a mask (as torch's and Hugging Face's additive masks write it): rows
    whose bias is -inf everywhere get o = 0, lse = -inf and zero dq; rows -inf over their first
    keys (whole first tiles) or at one key match the float64 reference, forward and backward,
    both frameworks bitwise equal (check_special); the finite entries within 1e-5 (fp32, a
    softmax over at most 50 keys)."""
    case = fa_case(2, 2, 2, 50, 50, 16, causal=causal, bias="full", seed=11)
    inputs = h.make_inputs(case)
    bias = inputs["bias"].copy()
    bias[0, :, 3] = -np.inf              # a row that sees nothing
    bias[1, :, 40:, :20] = -np.inf       # the first tiles of the last rows
    bias[:, 1, :, 7] = -np.inf           # one key for every row of a head
    inputs["bias"] = bias
    t, _, r = check_special(case, inputs)
    o, lse = t.outputs
    assert np.all(o[0, :, 3] == 0) and np.all(np.isneginf(lse[0, :, 3])) and np.all(t.grads["q"][0, :, 3] == 0)
    pairs = list(zip(t.outputs, r.outputs)) + [(t.grads[n], r.grads[n]) for n in r.grads]
    for got, want in pairs:
        fin = np.isfinite(want)
        assert h.rel_err(got[fin], want[fin]) < 1e-5


def test_options_jax_vmap_folds_lengths_and_segments():
    """The lengths and segment ids fold into the batch with q, k, v under jax.vmap."""
    rng = np.random.default_rng(5)
    V, B, H, N, D = 2, 2, 2, 23, 16
    q, k, v = (jnp.asarray(rng.standard_normal((V, B, H, N, D)).astype(np.float32)) for _ in range(3))
    ql = jnp.asarray(rng.integers(0, N + 1, (V, B)), jnp.int32)
    seg = jnp.asarray(np.sort(rng.integers(0, 3, (V, B, N)), axis=-1), jnp.int32)
    f = lambda a, b, c, l, s: ato_jax.flash_attention(a, b, c, causal=True, q_lengths=l, segment_ids=s)  # noqa: E731
    want = jnp.stack([f(q[i], k[i], v[i], ql[i], seg[i]) for i in range(V)])
    chex.assert_trees_all_equal(jax.jit(jax.vmap(f))(q, k, v, ql, seg), want)
    # an unmapped lengths array is broadcast over the mapped batch
    g = lambda a, b, c: f(a, b, c, ql[0], seg[0])  # noqa: E731
    chex.assert_trees_all_equal(jax.vmap(g)(q, k, v), jnp.stack([g(q[i], k[i], v[i]) for i in range(V)]))


def test_window_plan_constexprs():
    """A window bounded only on the causal side is plain causal (no WINDOW); softcap 0 and
    window (-1, -1) are off, as in FlashAttention."""
    spec = lambda *s: ato_torch.launcher.spec(torch.empty(s))  # noqa: E731
    q = spec(1, 2, 64, 16)

    def const(**kw):
        _, st = ato_torch.flash_attention.op.signature(torch.empty(1), torch.empty(1), torch.empty(1), **kw)
        (fwd,) = fa_core.forward_plan(q, q, q, causal=st.causal, softmax_scale=None, target=INTERPRETER,
                                      options=st.options).launches
        return {n: fwd.constexprs[n] for n in ("WINDOW", "SOFTCAP", "ALIBI", "Q_LENS", "KV_LENS", "SEGMENTS")}

    assert not any(const(causal=True, window_size=(None, 8)).values())
    assert not any(const(window_size=(-1, -1), softcap=0.0).values())
    assert const(window_size=(4, None))["WINDOW"] and const(softcap=30.0)["SOFTCAP"]


OPTION_BAD_INPUTS = [
    ("window not a pair", dict(window_size=4), ValueError, "window_size: expected None or (left, right)"),
    ("window negative", dict(window_size=(-2, 0)), ValueError, "window_size: expected its left side"),
    ("softcap negative", dict(softcap=-1.0), ValueError, "softcap: expected None or a finite float > 0"),
    ("alibi shape", dict(alibi_slopes="slopes3"), ValueError, "alibi_slopes: expected shape (4,) or (2, 4)"),
    ("alibi dtype", dict(alibi_slopes="slopes_half"), TypeError, "alibi_slopes: expected float32"),
    ("lengths float", dict(q_lengths="lengths_float"), TypeError, "q_lengths: expected an integer dtype"),
    ("lengths shape", dict(kv_lengths="lengths3"), ValueError, "kv_lengths: expected shape (2,)"),
    ("lengths too long", dict(q_lengths="lengths_long"), ValueError, "q_lengths: expected values in [0, 5]"),
    ("segments shape", dict(segment_ids="lengths3"), ValueError, "q_segment_ids: expected shape (2, 5)"),
    ("segments one of two", dict(segment_ids=("seg_q", None)), ValueError, "segment_ids: expected both"),
    ("bias shape", dict(bias="bias_bad"), ValueError, "bias: expected a shape broadcastable to (2, 4, 5, 6)"),
    ("bias int", dict(bias="lengths3"), TypeError, "bias: expected"),
    ("mask not bool", dict(mask="mask_int"), TypeError, "mask: expected a bool array"),
    ("mask rank 5", dict(mask="mask_5d"), ValueError, "mask: expected a shape broadcastable"),
]


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,kw,exc,fragment", OPTION_BAD_INPUTS, ids=[b[0] for b in OPTION_BAD_INPUTS])
def test_option_bad_inputs(framework, desc, kw, exc, fragment):
    ops, arr = frontend(framework)
    x = _bad_input_args(framework)
    named = {"slopes3": np.ones(3, np.float32), "slopes_half": np.ones(4, np.float16),
             "lengths_float": np.ones(2, np.float32), "lengths3": np.ones(3, np.int32),
             "lengths_long": np.array([2, 6], np.int32), "seg_q": np.zeros((2, 5), np.int32),
             "bias_bad": np.zeros((3, 5, 5), np.float32), "mask_int": np.ones((5, 5), np.int32),
             "mask_5d": np.ones((1, 2, 4, 5, 5), bool)}

    def fill(a):
        if isinstance(a, tuple):
            return tuple(fill(t) for t in a)
        return arr(named[a]) if isinstance(a, str) else a

    kw = {n: fill(a) for n, a in kw.items()}
    raises_naming(exc, fragment, ops.flash_attention, x["q"], x["k"], x["v"], **kw)


@pytest.mark.parametrize("kw", [dict(alibi_slopes=True), dict(softcap=1e5)], ids=["alibi", "softcap"])
def test_backward_at_huge_scores_with_modified_scores(kw):
    """One key: p = 1 for every query, so dv = sum of do exactly, even at scores of 1e6, where
    a softcapped or ALiBi score rounded through lse * log2(e) would move p by up to 4% (the
    forward saves its base-2 lse for the backward)."""
    rng = np.random.default_rng(2)
    q = torch.from_numpy(rng.uniform(-1000, 1000, (1, 2, 75, 1)).astype(np.float32))
    k = torch.from_numpy(rng.uniform(-1000, 1000, (1, 2, 1, 1)).astype(np.float32))
    v = torch.from_numpy(rng.standard_normal((1, 2, 1, 1)).astype(np.float32)).requires_grad_()
    if kw.get("alibi_slopes"):
        kw = dict(alibi_slopes=torch.tensor([0.3, 0.7]))
    o = ato_torch.flash_attention(q, k, v, **kw)
    do = torch.from_numpy(rng.standard_normal(o.shape).astype(np.float32))
    o.backward(do)
    torch.testing.assert_close(v.grad, do.sum(dim=2, keepdim=True), rtol=1e-6, atol=0)


def test_options_under_torch_compile():
    """torch.compile(fullgraph=True) with every option (the arrays as graph inputs): eager's bits,
    forward and gradients."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    ql, sl = torch.tensor([30, 40]), torch.rand(2, generator=g)
    seg = torch.sort(torch.randint(0, 3, (2, 40), generator=g), dim=1).values

    def f(q, k, v, ql, seg):
        return ato_torch.flash_attention(q, k, v, causal=True, window_size=(8, None), softcap=5.0, alibi_slopes=sl,
                                         q_lengths=ql, segment_ids=seg)

    runs = []
    for fn in (f, torch.compile(f, fullgraph=True)):
        o = fn(q, k, v, ql, seg)
        runs.append((o.detach(), *torch.autograd.grad(o.sum(), (q, k, v))))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bias_takes_no_gradient(framework):
    """bias is not differentiated: torch gives it no .grad, JAX a zero cotangent; q, k, v's
    gradients are those with the bias as a constant."""
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((1, 2, 20, 16)).astype(np.float32) for _ in range(3))
    bias = rng.standard_normal((2, 20, 20)).astype(np.float32)
    if framework == "torch":
        leaves = [torch.from_numpy(a).requires_grad_() for a in (q, k, v, bias)]
        ato_torch.flash_attention(*leaves[:3], causal=True, bias=leaves[3]).sum().backward()
        assert leaves[3].grad is None and all(t.grad is not None for t in leaves[:3])
    else:
        g = jax.grad(lambda *a: jnp.sum(ato_jax.flash_attention(*a[:3], causal=True, bias=a[3])), argnums=(0, 3))(
            *map(jnp.asarray, (q, k, v, bias)))
        assert np.all(np.asarray(g[1]) == 0) and np.any(np.asarray(g[0]) != 0)


def test_mask_is_torch_sdpa_attn_mask():
    """A boolean mask means what torch's scaled_dot_product_attention's does (True: take part),
    on rows that keep a key (SDPA gives NaN for a row with none; ato zeros)."""
    rng = np.random.default_rng(14)
    q, k, v = (torch.from_numpy(rng.standard_normal((2, 4, 30, 32)).astype(np.float32)) for _ in range(3))
    mask = torch.from_numpy(rng.random((2, 1, 30, 30)) < 0.6)
    mask[..., 0] = True
    bias = torch.from_numpy(rng.standard_normal((4, 30, 30)).astype(np.float32))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    np.testing.assert_allclose(ato_torch.flash_attention(q, k, v, mask=mask).numpy(), want.numpy(), rtol=1e-5,
                               atol=1e-5)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    np.testing.assert_allclose(ato_torch.flash_attention(q, k, v, bias=bias).numpy(), want.numpy(), rtol=1e-5,
                               atol=1e-5)
