"""max_l2_coarsen, block_sparse_attention, curvature_block_mask and cab_attention on the CPU (the interpreter):
both frameworks against the float64 references, bitwise torch == JAX, bad inputs.

curvature_block_mask: the mask equal to the reference's (a bool mask: any differing block fails
the dtype's tolerance), top-k ties to the lower block, keep 0 and 1, local blocks, GQA.

max_l2_coarsen (argmax of the norms in float64): ties, NaN and infinities, extreme magnitudes,
strided inputs. Exact comparisons: the op copies a row and writes its index, so the outputs
equal the reference's bit for bit (the reference runs on the same rounded inputs); the gradient
is the cotangent scattered to the selected rows, also exact.

block_sparse_attention (dense softmax with -inf outside the kept blocks): GQA, Nq != Nk, partial
blocks, causal, empty rows, an all-true mask against flash_attention. Tolerances:
ato_cli.harness.TOLERANCE (fp32 1e-4: softmax sums over at most a few hundred keys in fp32; bf16
2e-2: bf16 inputs and output, p rounded to bf16 for the p v dot)."""

import math

import numpy as np
import pytest

from ato_cli import harness as h
from ato_core.ops.block_sparse.cases import bs_case, cab_attention_case, cab_case, coarsen_case
from ato_core.target import has_gluon
from ato_core.testing import round_to
from helpers import SLOW, assert_bnhd_is_bhnd, check, check_special, frontend, raises_naming


def _exact(t, r, dtype="float32"):
    """Outputs equal to the reference's; the gradient to the reference's rounded to the dtype
    (the kernel stores the cotangent in x's dtype)."""
    for i, (a, b) in enumerate(zip(t.outputs, r.outputs)):
        assert np.array_equal(a, b, equal_nan=True), f"output {i} differs from the reference"
    for n in r.grads:
        ref = round_to(r.grads[n].astype(np.float32), dtype).astype(np.float64)
        assert np.array_equal(t.grads[n], ref), f"d{n} differs from the reference"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("N,D,block_size", [(37, 48, 16), (64, 72, 32), (300, 128, 64), (129, 5, 128),
                                            (256, 1, 256)])
def test_coarsen(N, D, block_size, dtype):
    """N not a multiple of the block (the last block partial), D not a power of two, every
    block size; the interpreter loads a quarter of a block (at least 4 tokens) a tile, so a block
    spans several tiles."""
    t, _, r = check(coarsen_case(2, 3, N, D, block_size, dtype=dtype, seed=N))
    _exact(t, r, dtype)
    index = t.outputs[1]
    M = -(-N // block_size)
    blocks = np.arange(M) * block_size
    assert ((index >= blocks) & (index < np.minimum(blocks + block_size, N))).all(), "an index outside its block"


def test_coarsen_hopper_applies():
    """The Gluon coarsening on Hopper takes fp16 / bf16, D a power of two from 16 to 256, rows TMA
    can copy (a [B, N, H, D] view too) and MIN_TILES tiles a program (blocks of 64 at D 128: a
    tile each; of 128 at D 128: two); anything else, fewer tiles and an empty x launch the
    portable kernel. curvature_block_mask's q and k: one launch."""
    from ato_core.launch import ArraySpec
    from ato_core.ops.block_sparse import plans as bp
    from ato_core.testing import gpu_spec, h100

    target = h100()
    if not target.gluon:
        pytest.skip("the Gluon kernels need a Triton of target.GLUON_TRITON")

    def name(x):
        return bp.coarsen_plan(x, block_size=64, target=target).launches[0].name

    N = 64 * bp.HOPPER_COARSEN["MIN_TILES"] * bp.HOPPER_COARSEN["PROGRAMS_PER_SM"] * target.num_sms // 4
    view = ArraySpec((1, 4, N, 64), "bfloat16", (N * 256, 64, 256, 1), "cuda:0")  # [B, N, H, D] transposed
    for x in (gpu_spec((1, 4, N, 128)), gpu_spec((1, 4, N, 16), "float16"), view):
        assert name(x) == "max_l2_coarsen_hopper_kernel", x
    for x in (gpu_spec((1, 4, N - 64, 128)), gpu_spec((1, 4, N, 128), "float32"), gpu_spec((1, 4, N, 72)),
              gpu_spec((1, 4, N, 8)), gpu_spec((1, 4, 0, 128)),
              ArraySpec((1, 4, N, 128), "bfloat16", (520 * N, 130 * N, 130, 1), "cuda:0"),
              ArraySpec((1, 4, N, 128), "bfloat16", (512 * N, 128 * N, 128, 1), "cuda:0", aligned=False)):
        assert name(x) == "max_l2_coarsen_kernel", x
    # blocks of 128 at D 128: two tiles each, so half as many blocks suffice (the tokens counted alike)
    assert bp.coarsen_plan(gpu_spec((1, 4, N, 128)), block_size=128, target=target).launches[0].name == \
        "max_l2_coarsen_hopper_kernel"
    assert bp.coarsen_plan(gpu_spec((1, 4, N - 128, 128)), block_size=128, target=target).launches[0].name == \
        "max_l2_coarsen_kernel"
    q, k = gpu_spec((1, 3, N, 128)), gpu_spec((1, 1, N, 128))
    mask = bp.curvature_plan(q, k, block_size=64, keep=0.1, lam=0.5, causal=True, local_blocks=1, target=target)
    assert [launch.name for launch in mask.launches if "coarsen" in launch.name] == ["max_l2_coarsen_hopper_kernel"]


def test_ties_go_to_the_first_token():
    """Tokens of equal norm (sign flips of one row: the same squares, summed in the same
    order): the first is chosen, within a tile and across the interpreter's 4-token tiles."""
    rng = np.random.default_rng(0)
    row = rng.standard_normal(24).astype(np.float32)
    x = rng.standard_normal((1, 2, 40, 24)).astype(np.float32) * 0.1
    for n in (3, 6, 17, 30, 31):  # blocks of 16: 3 and 6 tie (first wins), 17 and 30 and 31
        x[0, 0, n] = row * rng.choice([-1.0, 1.0], 24)
    x[0, 1, 33] = row
    x[0, 1, 34] = row
    case = coarsen_case(1, 2, 40, 24, 16)
    t, _, r = check(case, {"x": x})
    _exact(t, r)
    assert t.outputs[1][0, 0, :2].tolist() == [3, 17] and t.outputs[1][0, 1, 2] == 33


@pytest.mark.parametrize("special", ["nan", "inf", "nan and inf"])
def test_special_values(special):
    """A token holding a NaN has a NaN norm, the largest (the first such token wins); an
    infinity (no NaN) the next largest; the row comes out as it is."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 48, 16)).astype(np.float32)
    if "inf" in special:
        x[0, 0, 5, 2] = -np.inf
        x[0, 0, 40, 1] = np.inf
    if "nan" in special:
        x[0, 0, 9, 0] = np.nan
        x[0, 0, 12, 3] = np.nan
        x[0, 0, 35, 7] = np.nan
    t, _, r = check_special(coarsen_case(1, 1, 48, 16, 16), {"x": x})
    expected = {"nan": [9, 16, 35], "inf": [5, 16, 40], "nan and inf": [9, 16, 35]}[special]
    assert t.outputs[1][0, 0, 0] == expected[0] and t.outputs[1][0, 0, 2] == expected[2]
    assert np.array_equal(t.outputs[1], r.outputs[1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("scale", [1e-30, 1e-42, 1e30, 1e38])
def test_magnitudes(scale, dtype):
    """Squared norms of such tokens underflow or overflow fp32; the choice is still exact
    (1e-42: fp32 subnormals; for bf16 0 or subnormal)."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-1.5, 1.5, (1, 2, 50, 16)) * scale
    case = coarsen_case(1, 2, 50, 16, 16, dtype=dtype)
    t, _, r = check_special(case, {"x": round_to(x.astype(np.float32), dtype)})
    _exact(t, r, dtype)


def test_strided_input():
    """x as a transposed view ([B, N, H, D] memory), as a projection's output is."""
    import torch

    import ato_torch
    from ato_core.ops.block_sparse import reference

    x = torch.randn(2, 70, 3, 40)
    xc, idx = ato_torch.max_l2_coarsen(x.transpose(1, 2), 32)
    rc, ri = reference.max_l2_coarsen(x.transpose(1, 2).double(), 32)
    assert torch.equal(idx, ri) and torch.equal(xc.double(), rc)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bad_inputs(framework):
    ops, arr = frontend(framework)
    x = arr(np.zeros((1, 2, 40, 16), np.float32))
    for bad in (48, 8, 512, True, 64.0, None):
        raises_naming(ValueError, "block_size", ops.max_l2_coarsen, x, bad)
    raises_naming(ValueError, "x", ops.max_l2_coarsen, arr(np.zeros((2, 40, 16), np.float32)), 16)
    raises_naming(TypeError, "x", ops.max_l2_coarsen, arr(np.zeros((1, 2, 40, 16), np.int32)), 16)
    raises_naming(ValueError, "D", ops.max_l2_coarsen, arr(np.zeros((1, 1, 4, 300), np.float32)), 16)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dims", [(1, 4, 2, 70, 70, 48, 16), (2, 2, 1, 37, 100, 72, 32), (1, 2, 2, 90, 40, 16, 16)],
                         ids=["gqa", "mqa-nq<nk", "nq>nk"])
def test_block_sparse_attention(dims, causal, dtype):
    """Outputs, lse and dq, dk, dv against the reference; half the blocks kept; the
    interpreter's tiles (16 and 32 rows) split a 32-token block, partial last blocks."""
    check(bs_case(*dims, causal=causal, dtype=dtype, seed=sum(dims)))


@pytest.mark.parametrize("nq,nk,block_size", [(75, 75, 32), (40, 49, 16), (90, 41, 16), (37, 100, 32)])
def test_all_true_mask_is_flash_attention(nq, nk, block_size):
    """Every block kept: flash attention's o, lse and gradients. With nq != nk the causal
    diagonal crosses key blocks anywhere (two masked blocks for one query tile)."""
    import torch

    import ato_torch

    g = torch.Generator().manual_seed(nq + nk)
    q = torch.randn(1, 4, nq, 48, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, nk, 48, generator=g, requires_grad=True) for _ in range(2))
    do = torch.randn(1, 4, nq, 48, generator=g)
    for causal in (False, True):
        mask = torch.ones(1, 4, -(-nq // block_size), -(-nk // block_size), dtype=torch.bool)
        o, lse = ato_torch.block_sparse_attention(q, k, v, mask, block_size=block_size, causal=causal,
                                                  return_lse=True)
        grads = torch.autograd.grad(o, (q, k, v), do)
        fo, flse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        fgrads = torch.autograd.grad(fo, (q, k, v), do)
        # fp32 sums over at most 100 keys in another order: a few ulps of the largest terms
        assert torch.allclose(o, fo, rtol=1e-6, atol=1e-6) and torch.allclose(lse, flse, rtol=1e-6, atol=1e-6)
        for a, b in zip(grads, fgrads):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_masked_rows_give_zeros():
    """A query block whose every key block is masked: o = 0, lse = -inf, no gradient through
    it; a mask with nothing kept: all zeros (both frameworks, through check)."""
    case = bs_case(1, 2, 1, 48, 48, 32, 16)
    inputs = h.make_inputs(case)
    inputs["block_mask"][0, 0, 1, :] = False
    inputs["block_mask"][0, 1] = True
    t, _, _ = check(case, inputs)
    o, lse = t.outputs
    assert np.all(o[0, 0, 16:32] == 0) and np.all(np.isneginf(lse[0, 0, 16:32]))
    assert np.all(t.grads["q"][0, 0, 16:32] == 0)
    inputs["block_mask"][:] = False
    t, _, _ = check(case, inputs)
    assert all(np.all(x[np.isfinite(x)] == 0) for x in (t.outputs[0], *t.grads.values()))


def test_block_sparse_bnhd_layout_is_bhnd():
    """layout="bnhd" ([B, N, H, D] q, k, v, o, read and written through strides): bitwise the
    bhnd call's output and gradients, in both frameworks (GQA, causal, partial blocks)."""
    rng = np.random.default_rng(21)
    q = rng.standard_normal((2, 4, 45, 32)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 50, 32)).astype(np.float32) for _ in range(2))
    mask = rng.random((2, 4, 3, 4)) < 0.6
    assert_bnhd_is_bhnd("block_sparse_attention", q, k, v, rng.standard_normal(q.shape).astype(np.float32),
                        extra=(mask,), block_size=16, causal=True)
    check(bs_case(1, 4, 2, 37, 50, 16, 16, causal=True, seed=3, layout="bnhd"))  # the reference's bnhd too


@pytest.mark.skipif(not has_gluon(), reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
def test_hopper_kernels_chosen_where_they_apply():
    """On an H100 (Target.gluon) blocks of 128 and 256 at D 128, fp16 / bf16, run the Gluon
    forward, dK / dV and dQ (grids of 128 rows or keys; the backward on the columns); blocks of 64,
    another D, fp32, rows TMA cannot copy (do's alone: the portable backward), the
    interpreter: the portable kernels."""
    import dataclasses

    from ato_core.ops.block_sparse import plans
    from ato_core.target import INTERPRETER
    from ato_core.testing import gpu_spec, h100

    def names(q, k, block_size=128, do=None, target=None, **kw):
        n, h = (1, 2) if kw.get("layout") == "bnhd" else (2, 1)
        M = (-(-q.shape[n] // block_size), -(-k.shape[n] // block_size))
        mask = gpu_spec((q.shape[0], q.shape[h], *M), "bool")
        kw = dict(block_size=block_size, causal=True, softmax_scale=None, target=target or h100(), **kw)
        fwd = plans.block_sparse_forward_plan(q, k, k, mask, **kw)
        bwd = plans.block_sparse_backward_plan(q, k, k, mask, q if do is None else do, has_dlse=False, **kw)
        return fwd, bwd, [launch.name for launch in fwd.launches[1:] + bwd.launches[2:]]

    gluon = ["bs_fwd_hopper_kernel", "bs_bwd_dkdv_hopper_kernel", "bs_bwd_dq_hopper_kernel"]
    portable = ["bs_fwd_kernel", "bs_bwd_dkdv_kernel", "bs_bwd_dq_kernel"]
    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 1100, 128))
    fwd, bwd, got = names(q, k)
    assert got == gluon
    assert fwd.launches[1].grid == (8, 16) and bwd.launches[2].grid == (9, 4) and bwd.launches[3].grid == (8, 16)
    assert bwd.launches[2].inputs[-2:] == ("cols", "cols_count") and bwd.launches[3].inputs[-2:] == ("rows",
                                                                                                      "rows_count")
    assert names(q, k, 256)[2] == gluon
    assert names(gpu_spec((2, 1000, 8, 128), "float16"), gpu_spec((2, 1100, 2, 128), "float16"), layout="bnhd")[2] \
        == gluon
    assert names(q, k, do=q._replace(aligned=False))[2] == gluon[:1] + portable[1:]
    for args, kw in [((q, k, 64), {}), ((gpu_spec((2, 8, 1000, 80)), gpu_spec((2, 2, 1100, 80))), {}),
                     ((gpu_spec((2, 8, 1000, 128), "float32"), gpu_spec((2, 2, 1100, 128), "float32")), {}),
                     ((q._replace(aligned=False), k), {}), ((q, k), {"target": INTERPRETER}),
                     ((q, k), {"target": dataclasses.replace(h100(), gluon=False)})]:
        assert names(*args, **kw)[2] == portable, (args, kw)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_block_sparse_bad_inputs(framework):
    ops, arr = frontend(framework)
    q = arr(np.zeros((1, 2, 40, 16), np.float32))
    mask = arr(np.ones((1, 2, 3, 3), bool))
    raises_naming(ValueError, "block_size", ops.block_sparse_attention, q, q, q, mask, block_size=24)
    raises_naming(ValueError, "block_mask", ops.block_sparse_attention, q, q, q, arr(np.ones((1, 2, 3, 2), bool)),
                  block_size=16)
    raises_naming(ValueError, "block_mask", ops.block_sparse_attention, q, q, q, mask, block_size=32)
    raises_naming(TypeError, "block_mask", ops.block_sparse_attention, q, q, q, arr(np.ones((1, 2, 3, 3), np.int32)),
                  block_size=16)
    raises_naming(TypeError, "causal", ops.block_sparse_attention, q, q, q, mask, block_size=16, causal=1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("opts", [dict(keep=0.1, lam=0.5, causal=True, local_blocks=1),
                                  dict(keep=0.3, lam=0.2, causal=False, local_blocks=2),
                                  dict(keep=0.5, lam=1.0, causal=True, local_blocks=0),
                                  dict(keep=1.0, lam=0.5, causal=True, local_blocks=1),
                                  dict(keep=0.0, lam=0.5, causal=False, local_blocks=0)],
                         ids=["default", "full-local2", "half", "keep-all", "keep-none"])
def test_curvature_block_mask(opts, dtype):
    """N not a multiple of the block (300 tokens: 19 blocks of 16, the last partial), GQA."""
    t, _, r = check(cab_case(1, 4, 2, 300, 32, 16, dtype=dtype, seed=3, **opts))
    mask = t.outputs[0].astype(bool)
    assert np.array_equal(mask, r.outputs[0].astype(bool))
    assert mask[..., 0].all(), "block 0 always kept"
    M = mask.shape[-1]
    if opts["causal"]:
        assert not np.triu(mask, 1).any(), "a block after the diagonal"
    if opts["keep"] == 1.0:
        assert np.array_equal(mask[0, 0], np.tril(np.ones((M, M), bool)))


def _select(f, keep, causal, fill):
    """curvature_block_mask's select launch alone (interpreted), as its plan makes it for two heads
    of 40 blocks of 16 (causal: rows ranked on half-wide tiles, HALF), on scores f [2 * 40, 40]
    (fp32, NumPy), into a mask [1, 2, 40, 40] filled with ``fill`` first."""
    import torch

    from ato_core import interpreter
    from ato_core.ops.block_sparse import plans
    from ato_core.target import INTERPRETER
    from ato_core.testing import gpu_spec

    x = gpu_spec((1, 2, 40 * 16, 16), "float32")
    plan = plans.curvature_plan(x, x, block_size=16, keep=keep, lam=0.5, causal=causal, local_blocks=1,
                                target=INTERPRETER)
    (select,) = [launch for launch in plan.launches if launch.name == "cab_select_kernel"]
    assert select.constexprs["HALF"] is causal
    mask = torch.full((1, 2, 40, 40), fill)
    interpreter.interpreted(select.kernel)[select.grid](torch.from_numpy(f), *select.scalars, mask,
                                                          **select.constexprs)
    return mask


@pytest.mark.parametrize("causal", [True, False])
def test_curvature_select_writes_every_mask_entry(causal):
    """The select alone, on a mask buffer filled with True first (a fresh allocation may hold
    anything): every entry is written, so the result is the same as on a False-filled one and
    causal rows keep nothing past the diagonal, also those ranked on half-wide tiles (M 40:
    blocks below 32)."""
    import torch

    f = np.random.default_rng(4).standard_normal((2 * 40, 40)).astype(np.float32)
    masks = [_select(f, 0.3, causal, fill) for fill in (True, False)]
    assert torch.equal(masks[0], masks[1])
    assert masks[0][..., 0].all() and masks[0].sum() < masks[0].numel() // 2
    if causal:
        assert not torch.triu(masks[0], 1).any()


@pytest.mark.parametrize("causal", [True, False])
def test_curvature_select_ranks_nan_first(causal):
    """The select alone on scores with NaN of both signs (bit patterns 0x7FC00000 and
    0xFFC00000): every allowed NaN kept, past ceil(keep * allowed) too, and a NaN ranks above
    every score, NaN ties to the lower block (the reference's rule, written out here), whatever
    the NaN's sign (the interpreter's inf / inf is negative, the GPU's positive)."""
    import torch

    M, keep = 40, 0.3
    rng = np.random.default_rng(5)
    f = rng.standard_normal((2 * M, M)).astype(np.float32)
    bits = f.view(np.uint32)
    nan = rng.random(f.shape) < 0.15
    bits[nan] = np.where(rng.random(f.shape) < 0.5, 0x7FC00000, 0xFFC00000)[nan]
    mask = _select(f, keep, causal, False)
    for row in range(2 * M):
        i = row % M
        allowed = np.arange(M) <= i if causal else np.ones(M, bool)
        order = sorted(np.flatnonzero(allowed), key=lambda j: (not nan[row, j], 0.0 if nan[row, j] else -f[row, j], j))
        want = set(order[:math.ceil(keep * allowed.sum())]) | set(np.flatnonzero(allowed & nan[row])) | {i, 0}
        assert set(torch.nonzero(mask[0, row // M, i]).flatten().tolist()) == want, row


def test_curvature_infinite_input_kernels_equal_reference():
    """An infinite key (the fuzzing tier's case): its block's coarse scores are infinite, F NaN
    there, and those blocks rank first in the kernels as in the reference; both frameworks the
    same mask."""
    from ato_cli import harness as h

    case = cab_case(2, 6, 2, 182, 4, 16, keep=0.35, lam=0.0, causal=True, local_blocks=1, dtype="bfloat16",
                    seed=7)
    inputs = h.make_inputs(case)
    inputs["k"][0, 1, 15, 1] = np.inf  # block 0 of kv head 1
    t, j, r = (h.run_torch(case, inputs), h.run_jax(case, inputs), h.run_torch(case, inputs, reference=True))
    assert np.array_equal(t.outputs[0], r.outputs[0]) and np.array_equal(j.outputs[0], r.outputs[0])


@pytest.mark.parametrize("value,keep", [(np.nan, 0.1), (np.inf, 0.1), (-np.inf, 0.1), (np.nan, 0.0)], ids=str)
def test_non_finite_key_block_kept_everywhere(value, keep):
    """A NaN or infinite key makes its block's coarse scores NaN or ±inf: every query block
    allowed to see it keeps it (F NaN; keep 0 too), the rest of the mask ranked on the finite
    scores as in the reference, so cab_attention's output is NaN on exactly dense causal
    attention's NaN rows. (A NaN dropped by the relu used to leave the block out of most rows,
    their outputs finite.)"""
    import torch

    import ato_torch
    from ato_core.ops.block_sparse import reference

    rng = np.random.default_rng(11)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 1024, 32)).astype(np.float32)) for _ in range(3))
    clean = ato_torch.curvature_block_mask(q, k, block_size=64, keep=keep)
    k[0, 1, 700, 3] = value  # block 10 of head 1
    mask = ato_torch.curvature_block_mask(q, k, block_size=64, keep=keep)
    assert torch.equal(mask, torch.as_tensor(reference.curvature_block_mask(q.double(), k.double(), block_size=64,
                                                                             keep=keep)))
    assert mask[0, 1, 10:, 10].all() and not clean[0, 1, 10:, 10].all()
    assert torch.equal(mask[0, 0], clean[0, 0])  # head 0's keys finite: its mask as without the value
    if np.isnan(value):
        o = ato_torch.cab_attention(q, k, v, block_size=64, keep=keep)
        dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.equal(torch.isnan(o), torch.isnan(dense)) and torch.isnan(o[0, 1, 700:]).all()


def test_curvature_constant_scores_keep_the_lowest_blocks():
    """q = 0: every score 0, An = 0 (A constant), F = 0: ties everywhere, the lowest blocks win."""
    import torch

    import ato_torch

    z = torch.zeros(1, 1, 160, 16)
    mask = ato_torch.curvature_block_mask(z, z, block_size=16, keep=0.3, local_blocks=1)[0, 0]
    for i in range(10):
        expect = {j for j in range(-(-(i + 1) * 3 // 10))} | {i, 0}
        assert set(torch.nonzero(mask[i]).flatten().tolist()) == expect, i


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_curvature_bad_inputs(framework):
    ops, arr = frontend(framework)
    q = arr(np.zeros((1, 2, 40, 16), np.float32))
    for name, kwargs in (("keep", {"keep": 1.5}), ("keep", {"keep": float("nan")}), ("lam", {"lam": float("inf")}),
                         ("local_blocks", {"local_blocks": -1}), ("block_size", {"block_size": 20})):
        raises_naming(ValueError, name, ops.curvature_block_mask, q, q, **kwargs)
    raises_naming(TypeError, "causal", ops.curvature_block_mask, q, q, causal=None)
    raises_naming(ValueError, "k", ops.curvature_block_mask, q, arr(np.zeros((1, 2, 41, 16), np.float32)))
    raises_naming(ValueError, "Hkv=3", ops.curvature_block_mask, q, arr(np.zeros((1, 3, 40, 16), np.float32)))
    raises_naming(ValueError, "D", ops.curvature_block_mask, q, arr(np.zeros((1, 2, 40, 8), np.float32)))
    raises_naming(TypeError, "k", ops.curvature_block_mask, q, arr(np.zeros((1, 2, 40, 16), np.int32)))


@pytest.mark.parametrize("causal,dtype", [(False, "float32"), (True, "bfloat16"),
                                          pytest.param(False, "bfloat16", marks=SLOW),
                                          pytest.param(True, "float32", marks=SLOW)],
                         ids=["full-float32", "causal-bfloat16", "full-bfloat16", "causal-float32"])
def test_cab_attention(causal, dtype):
    """The whole pipeline against the float64 reference (its mask, then dense masked softmax):
    o, lse, dq, dk, dv; GQA, 150 tokens in blocks of 16 (the last partial), keep 0.3 and
    softmax_scale 0.2. The same mask as curvature_block_mask's (o equal to block_sparse_attention
    on it, bitwise)."""
    import ato_torch
    from ato_core.ops.block_sparse.cases import cab_attention_case

    case = cab_attention_case(1, 4, 2, 150, 40, 16, keep=0.3, causal=causal, dtype=dtype, scale=0.2, seed=5)
    inputs = h.make_inputs(case)
    t, _, _ = check(case, inputs)
    q, k, v = (h.to_torch(inputs[n]) for n in "qkv")
    mask = ato_torch.curvature_block_mask(q, k, block_size=16, keep=0.3, causal=causal)
    o = ato_torch.block_sparse_attention(q, k, v, mask, block_size=16, causal=causal, softmax_scale=0.2)
    assert np.array_equal(t.outputs[0], o.float().numpy()), "cab_attention != block_sparse_attention on its mask"
    assert not mask.all(), "keep 0.3 kept every block: the test would not test sparsity"


def test_cab_attention_bnhd_layout_is_bhnd():
    """cab_attention and curvature_block_mask with layout="bnhd": the bhnd call's mask, output and
    gradients, bitwise, in both frameworks."""
    import ato_torch
    import torch

    rng = np.random.default_rng(22)
    q = rng.standard_normal((1, 4, 70, 32)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 70, 32)).astype(np.float32) for _ in range(2))
    kw = dict(block_size=16, keep=0.5)
    assert_bnhd_is_bhnd("cab_attention", q, k, v, rng.standard_normal(q.shape).astype(np.float32), **kw)
    masks = [ato_torch.curvature_block_mask(*(torch.from_numpy(np.ascontiguousarray(t.transpose(sw))) for t in (q, k)),
                                            layout=layout, **kw)
             for sw, layout in (((0, 1, 2, 3), "bhnd"), ((0, 2, 1, 3), "bnhd"))]
    assert torch.equal(*masks) and 0 < masks[0].float().mean() < 1
    check(cab_attention_case(1, 4, 2, 70, 32, 16, keep=0.5, seed=2, layout="bnhd"))  # the reference's bnhd too


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_cab_attention_bad_inputs(framework):
    ops, arr = frontend(framework)
    q = arr(np.zeros((1, 2, 40, 16), np.float32))
    raises_naming(ValueError, "v", ops.cab_attention, q, q, arr(np.zeros((1, 2, 40, 8), np.float32)))
    raises_naming(ValueError, "keep", ops.cab_attention, q, q, q, keep=2.0)
    raises_naming(ValueError, "block_size", ops.cab_attention, q, q, q, block_size=48)
    raises_naming(TypeError, "return_lse", ops.cab_attention, q, q, q, return_lse=1)
    raises_naming(ValueError, "softmax_scale", ops.cab_attention, q, q, q, softmax_scale=float("nan"))
