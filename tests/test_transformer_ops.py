"""layer_norm, rms_norm, dropout_residual_layer_norm, softmax, rope, swiglu, cross_entropy:
CPU tier (Triton's interpreter).

Each case runs in ato_torch and ato_jax (jax.jit(jax.value_and_grad)) and is compared with
the float64 reference (outputs and every gradient, per-dtype tolerances of
ato_cli.harness.TOLERANCE); the two frameworks must agree bit for bit. On the interpreter a
program holds at most 64 columns in one piece, so widths past 64 (1000, 4097) run the
looped multi-pass kernels and narrow ones (1, 3) the single-piece ones (4097 in the slow tier,
helpers.SLOW).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_cli import harness as h
from ato_core.ops.cross_entropy.cases import ce_case
from ato_core.ops.cross_entropy.reference import cross_entropy as ce_reference
from ato_core.ops.norms.cases import drln_case, norm_case
from ato_core.ops.rope.cases import rope_case
from ato_core.ops.rope.reference import rope as rope_reference
from ato_core.ops.softmax.cases import softmax_case
from ato_core.ops.swiglu.cases import swiglu_case
from helpers import check, frontend, slow_variants

WIDTHS = slow_variants([1, 3, 1000, 4097], {4097})  # 4097: more loop passes than 1000 (the slow tier)


@pytest.mark.parametrize("N", WIDTHS)
def test_layer_norm(N):
    check(norm_case("layer_norm", (2, 3, N), seed=N))
    if N == 1000:
        check(norm_case("layer_norm", (5, N), weight=False, bias=False, seed=1))
        check(norm_case("layer_norm", (5, N), bias=False, seed=2))


@pytest.mark.parametrize("N", WIDTHS[1:])
def test_rms_norm(N):
    check(norm_case("rms_norm", (3, 2, N), bias=False, seed=N))
    if N == 3:
        check(norm_case("rms_norm", (4, N), weight=False, bias=False, seed=1))


def test_rms_norm_width_one():
    """N = 1: y = x / sqrt(x^2 + eps) * w is +-w up to eps, and dx = w * eps / (x^2 + eps)^1.5
    is ~1e-6, the difference of two numbers near 1: fp32 gets it to a few ulps of 1 (1e-7),
    not relatively. So: y and dw against the reference as usual, dx to 4 ulps absolute."""
    case = norm_case("rms_norm", (6, 1), bias=False, seed=1)
    x = h.make_inputs(case)
    r = h.run_torch(case, x, reference=True)
    for res in (h.run_torch(case, x), h.run_jax(case, x)):
        assert h.rel_err(res.outputs[0], r.outputs[0]) < 1e-6
        assert h.rel_err(res.grads["weight"], r.grads["weight"]) < 1e-6
        np.testing.assert_allclose(res.grads["x"], r.grads["x"], rtol=0, atol=4 * 2.0 ** -23)


@pytest.mark.parametrize("N", [3, 1000])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_dropout_residual_layer_norm(N, p):
    check(drln_case((4, N), p=p, dseed=7, seed=N))
    check(drln_case((4, N), p=p, dseed=8, seed=N + 1, seed_array=True))


def test_dropout_seed_the_frameworks_way():
    """A seed as an int, a 0-d int32 / int64 array, a raw or typed jax.random key: seed s draws
    one mask in both frameworks (key(s)'s data is [0, s]); under jax.jit, new keys (split
    every step) reuse one compiled kernel (trace count 1) and draw new masks; the backward
    redraws the forward's mask. A torch.Generator advances: two calls draw two masks, and a
    generator seeded again draws them again."""
    p, shape = 0.4, (32, 100)
    want = _dropout_h("torch", shape, p, 5) != 0
    for seed in (torch.tensor(5), torch.tensor(5, dtype=torch.int32)):
        np.testing.assert_array_equal(_dropout_h("torch", shape, p, seed) != 0, want)
    x, r = jnp.ones(shape), jnp.zeros(shape)
    f = jax.jit(lambda s: ato_jax.dropout_residual_layer_norm(x, r, None, None, p=p, seed=s)[1])
    for seed in (jnp.int32(5), jax.random.PRNGKey(5), jax.random.key(5)):
        np.testing.assert_array_equal(np.asarray(f(seed)) != 0, want)
    key, masks = jax.random.key(0), []
    for _ in range(3):
        key, sub = jax.random.split(key)
        masks.append(np.asarray(f(sub)) != 0)
    assert f._cache_size() == 3  # int32, raw key, typed key: one trace each
    assert (masks[0] != masks[1]).mean() > 0.3 and (masks[1] != masks[2]).mean() > 0.3
    dx = jax.grad(lambda a: ato_jax.dropout_residual_layer_norm(a, r, None, None, p=p, seed=jax.random.key(5))[1]
                  .sum())(x)
    np.testing.assert_array_equal(np.asarray(dx) != 0, want)
    g = torch.Generator().manual_seed(3)
    a, b = _dropout_h("torch", shape, p, g) != 0, _dropout_h("torch", shape, p, g) != 0
    assert (a != b).mean() > 0.3
    g.manual_seed(3)
    np.testing.assert_array_equal(_dropout_h("torch", shape, p, g) != 0, a)


@pytest.mark.parametrize("N", WIDTHS)
def test_softmax(N):
    check(softmax_case((2, 2, N), seed=N))
    check(softmax_case((3, N), temperature=0.5, seed=N + 1))
    check(softmax_case((3, N), temperature="traced", seed=N + 2))


def test_softmax_traced_temperature_one_trace():
    """A 0-d temperature is read by the kernel: under jax.jit, three values compile once and
    give what three fixed temperatures give (to an ulp: 1/t is taken in the kernel, not on
    the host); in torch a temperature tensor gives the same bits as in JAX."""
    x = np.random.default_rng(3).standard_normal((4, 100)).astype(np.float32)
    f = jax.jit(lambda a, t: ato_jax.softmax(a, temperature=t))
    for t in (0.6, 1.3, 2.5):
        y = np.asarray(f(jnp.asarray(x), jnp.float32(t)))
        np.testing.assert_allclose(y, np.asarray(ato_jax.softmax(jnp.asarray(x), temperature=t)), rtol=1e-6,
                                   atol=0)
        np.testing.assert_array_equal(y, ato_torch.softmax(torch.from_numpy(x), temperature=torch.tensor(t)).numpy())
    assert f._cache_size() == 1


@pytest.mark.parametrize("N", [1, 300, 8200])
def test_softmax_nan_reaches_the_temperature_gradient(N):
    """A NaN in x makes its row of y NaN and so dL/dtemperature NaN, in the one-pass and the
    online kernels (their y log y term dropped a NaN y as if it were 0: found by the fuzzing tier)."""
    from helpers import check_special

    case = softmax_case((2, N), temperature="traced", seed=N)
    inputs = h.make_inputs(case)
    inputs["x"] = inputs["x"].copy()
    inputs["x"][1, N // 2] = np.nan
    check_special(case, inputs)


@pytest.mark.parametrize("N", [300, 8200])
@pytest.mark.parametrize("dtype,magnitude", [("bfloat16", 0.1), ("float32", 1e-3)])
def test_softmax_temperature_gradient_at_small_logits(dtype, magnitude, N):
    """dL/dtemperature within the dtype's tolerance where x / t is small (|x| <= magnitude), in
    the one-pass and the online kernels. From log y (y rounds away the differences of x it is
    made of) both cases failed here; on an H100 it was 3.0e-2 off in bf16 at 0.1, 2.2e-3 in fp32
    at 0.01."""
    from helpers import check_special

    case = softmax_case((3, N), dtype=dtype, temperature="traced", seed=N, magnitude=magnitude)
    check_special(case, h.make_inputs(case))


@pytest.mark.parametrize("traced", [False, True])
def test_softmax_keeps_x_only_for_a_traced_temperature(traced):
    """The backward reads x only for dL/dtemperature (Op.unsaved): a fixed temperature's torch
    autograd graph and JAX vjp residuals hold y alone, a traced one's y, the temperature and x."""
    x = torch.randn(4, 100, requires_grad=True)
    t = torch.tensor(1.5, requires_grad=True) if traced else 1.5
    held = []
    with torch.autograd.graph.saved_tensors_hooks(lambda a: held.append(a) or a, lambda a: a):
        y = ato_torch.softmax(x, temperature=t)
    assert len(held) == (3 if traced else 1)
    assert any(a is x for a in held) == traced
    assert any(a.data_ptr() == y.data_ptr() for a in held)
    xj = jnp.asarray(x.detach().numpy())
    args = (xj, jnp.float32(1.5)) if traced else (xj,)
    yj, vjp = jax.vjp(lambda a, *tt: ato_jax.softmax(a, temperature=tt[0] if traced else 1.5), *args)
    residuals = jax.tree_util.tree_leaves(vjp)  # (a vjp function is a pytree of its residuals)
    assert len(residuals) == (3 if traced else 1)
    assert any(r.shape == xj.shape and bool(jnp.array_equal(r, xj)) for r in residuals) == traced
    assert any(r.shape == yj.shape and bool(jnp.array_equal(r, yj)) for r in residuals)


@pytest.mark.parametrize("shape", [(1,), (3, 1000), (4097,), (2, 3, 7)])
def test_swiglu(shape):
    check(swiglu_case(shape, seed=len(shape)))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("positions", [False, True])
def test_rope(interleaved, positions):
    check(rope_case(2, 4, 2, 11, 24, interleaved=interleaved, positions=positions, max_pos=40, seed=3))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy(reduction, label_smoothing):
    check(ce_case(9, 1000, reduction=reduction, label_smoothing=label_smoothing, seed=4))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_leading_shapes(reduction):
    """logits [..., V] against targets [...] (class axis last, as optax): [B, T, V] and [A, B,
    T, V] against the reference, "none" in the targets' shape."""
    check(ce_case((2, 5), 300, reduction=reduction, label_smoothing=0.1, seed=8))
    check(ce_case((2, 1, 3), 40, reduction=reduction, seed=9))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_cross_entropy_of_one_row_of_logits(framework):
    """logits [V] and a 0-d target (optax takes them): the loss and gradient of one row."""
    mod, arr = frontend(framework)
    x = np.random.default_rng(3).standard_normal(50).astype(np.float32)
    for reduction in ("none", "mean"):
        got = np.asarray(mod.cross_entropy(arr(x), arr(np.array(7)), reduction=reduction))
        want = ce_reference(x[None].astype(np.float64), np.array([7]), reduction="none")[0]
        assert got.shape == () and abs(float(got) - want) < 1e-5 * abs(want)
    if framework == "jax":
        g = np.asarray(jax.grad(lambda a: mod.cross_entropy(a, jnp.asarray(7)))(arr(x)))
    else:
        xt = torch.from_numpy(x).requires_grad_()
        mod.cross_entropy(xt, torch.tensor(7)).backward()
        g = xt.grad.numpy()
    p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    np.testing.assert_allclose(g, p - (np.arange(50) == 7), atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("options", [{"z_loss": 1e-2}, {"softcap": 5.0}, {"z_loss": 1e-3, "softcap": 30.0}])
def test_cross_entropy_z_loss_and_softcap(reduction, options):
    """z_loss and softcap, alone and together, with label smoothing, leading shapes of 1, 2
    and 3 axes, logits of scale 10 (softcap 5 saturates tanh; lse^2 weighs in the loss)."""
    check(ce_case((2, 5), 300, reduction=reduction, label_smoothing=0.1, scale=10.0, seed=12, **options))
    check(ce_case(4, 3, dtype="bfloat16", reduction=reduction, scale=10.0, seed=13, **options))
    check(ce_case((2, 1, 3), 70, reduction=reduction, scale=10.0, seed=14, **options))


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_returns_z_loss(framework, reduction):
    """return_z_loss: (loss, z), z the z-loss term reduced as the loss (against the float64
    reference), carrying no gradient: the logits' gradient is the loss's alone, bit for bit
    the same as without return_z_loss, in both frameworks."""
    rng = np.random.default_rng(14)
    logits = (rng.standard_normal((6, 70)) * 8).astype(np.float32)
    targets = np.array([3, -100, 69, 0, 7, 12])
    kw = dict(reduction=reduction, z_loss=1e-2, softcap=20.0)
    want_loss, want_z = ce_reference(torch.from_numpy(logits).double(), torch.from_numpy(targets), return_z_loss=True,
                                     **kw)
    assert float(want_z.abs().sum()) > 0
    mod, arr = frontend(framework)
    loss, z = mod.cross_entropy(arr(logits), arr(targets), return_z_loss=True, **kw)
    np.testing.assert_allclose(np.asarray(loss), want_loss.numpy(), rtol=1e-5, atol=0)
    np.testing.assert_allclose(np.asarray(z), want_z.numpy(), rtol=1e-5, atol=0)
    if framework == "jax":
        grad_with = jax.grad(lambda a: sum(jnp.sum(o) for o in mod.cross_entropy(a, arr(targets), return_z_loss=True,
                                                                                  **kw)))(arr(logits))
        grad_without = jax.grad(lambda a: jnp.sum(mod.cross_entropy(a, arr(targets), **kw)))(arr(logits))
    else:
        x = arr(logits).requires_grad_()
        loss, z = mod.cross_entropy(x, arr(targets), return_z_loss=True, **kw)
        assert loss.requires_grad and not z.requires_grad
        loss.sum().backward()
        grad_with, x.grad = x.grad, None
        mod.cross_entropy(x, arr(targets), **kw).sum().backward()
        grad_without = x.grad
    np.testing.assert_array_equal(np.asarray(grad_with), np.asarray(grad_without))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("return_z_loss", [False, True])
def test_cross_entropy_gradient_is_one_result(reduction, return_z_loss):
    """The forward plan's gradient (logits' size) is one of its results once: under
    torch.compile a result listed twice is copied every call (a custom op's results may not
    alias), and the unreturned z-loss once stood in as the gradient (H100 block step: a 0.5-1
    GB copy a step)."""
    from ato_core.ops.cross_entropy import plans
    from ato_core.testing import gpu_spec, h100

    plan = plans.forward_plan(gpu_spec((64, 1000)), gpu_spec((64,), "int32"), ignore_index=-100, reduction=reduction,
                              label_smoothing=0.0, grad=True, target=h100(),
                              return_z_loss=return_z_loss)
    assert list(plan.results).count("dlogits") == 1, plan.results


def test_cross_entropy_odd_vocabularies_and_large_logits():
    """V = 1, 3, 4097, and logits of magnitude 1e4 (exp would overflow without the online
    maximum): finite and right."""
    check(ce_case(4, 1, ignore_every=0, seed=1))
    check(ce_case(5, 3, seed=2))
    check(ce_case(3, 4097, seed=3))
    t, j, r = check(ce_case(6, 300, scale=1e4, seed=5))
    assert np.all(np.isfinite(t.outputs[0])) and np.all(np.isfinite(t.grads["logits"]))


def _ce_against_torch64(logits, targets, reduction="none", **kwargs):
    """The loss (reduction "none": each row's) and its gradient for a cotangent of ones (so
    the backward gets dloss = 1 exactly), ato_torch against torch's cross_entropy in float64
    (fp32 sums of at most a few hundred terms: 1e-5 relative; the gradient to 1e-6), and
    ato_jax's gradient bit for bit. Returns the gradient."""
    x = torch.from_numpy(logits).requires_grad_()
    loss = ato_torch.cross_entropy(x, torch.from_numpy(targets), reduction=reduction, **kwargs)
    loss.backward(torch.ones_like(loss))
    ref = torch.from_numpy(logits).double().requires_grad_()
    want = torch.nn.functional.cross_entropy(ref, torch.from_numpy(targets), reduction=reduction, **kwargs)
    want.backward(torch.ones_like(want))
    torch.testing.assert_close(loss.double(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), ref.grad, rtol=0, atol=1e-6)
    gj = jax.grad(lambda a: ato_jax.cross_entropy(a, jnp.asarray(targets), reduction=reduction, **kwargs).sum())(
        jnp.asarray(logits))
    np.testing.assert_array_equal(np.asarray(gj), x.grad.numpy())
    return x.grad


def test_cross_entropy_target_in_every_column():
    """Each column of V = 130 (on the interpreter: three 64-column pieces, the last of 2
    columns) is the target of one row, with label smoothing."""
    rng = np.random.default_rng(8)
    logits = (rng.standard_normal((130, 130)) * 3).astype(np.float32)
    _ce_against_torch64(logits, rng.permutation(130), label_smoothing=0.2)


def test_cross_entropy_masked_vocabulary():
    """Logits of -inf (a masked vocabulary) count for nothing and get a zero gradient: a
    row whose whole first interpreter piece (64 columns) is -inf, then random masked
    columns, none of them a target."""
    rng = np.random.default_rng(9)
    logits = (rng.standard_normal((7, 200)) * 2).astype(np.float32)
    logits[::2, :64] = -np.inf
    logits[rng.random((7, 200)) < 0.3] = -np.inf
    targets = np.array([int(rng.choice(np.flatnonzero(np.isfinite(row)))) for row in logits])
    grad = _ce_against_torch64(logits, targets)
    assert torch.all(grad[torch.from_numpy(np.isinf(logits))] == 0)


def test_cross_entropy_ignores_targets():
    """Ignored rows contribute nothing and get zero gradient; mean divides by the others."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 10)).astype(np.float32)
    targets = np.array([1, -100, 3, -100, 9, 0])
    x = torch.from_numpy(logits).requires_grad_()
    loss = ato_torch.cross_entropy(x, torch.from_numpy(targets))
    loss.backward()
    keep = targets != -100
    want = torch.nn.functional.cross_entropy(torch.from_numpy(logits[keep]), torch.from_numpy(targets[keep]))
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-6)
    assert torch.all(x.grad[~torch.from_numpy(keep)] == 0)
    gj = jax.grad(lambda a: ato_jax.cross_entropy(a, jnp.asarray(targets)))(jnp.asarray(logits))
    np.testing.assert_array_equal(np.asarray(gj), x.grad.numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_every_target_ignored(reduction):
    """Every target ignore_index: the mean is 0 / 0, NaN (as torch's), the sum 0; the gradient
    0 either way. check compares the NaN exactly (the fuzzing tier drew it at T 1, seed 14)."""
    t, _, _ = check(ce_case(3, 10, reduction=reduction, ignore_every=1))
    assert np.isnan(t.outputs[0]).all() == (reduction == "mean")
    assert np.all(t.grads["logits"] == 0)


def test_cross_entropy_gradient_for_unit_dloss():
    """loss.backward() gives dloss = 1 exactly: the backward leaves the forward's gradient as
    it is (no pass over it). That gradient (and the loss) against torch's, for mean and sum
    with ignored targets and label smoothing, and the same in both frameworks."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((7, 50)).astype(np.float32)
    targets = np.array([3, -100, 49, 0, 7, -100, 12])
    for reduction in ("mean", "sum"):
        _ce_against_torch64(logits, targets, reduction=reduction, label_smoothing=0.1)


def test_cross_entropy_out_of_range_target_under_jit_gives_nan_row():
    """Under jax.jit the target values are unknown to the adapter: a target outside [0, V)
    (not ignored) makes that row's loss and gradient NaN, and nothing else."""
    rng = np.random.default_rng(5)
    logits = jnp.asarray(rng.standard_normal((4, 6)).astype(np.float32))
    bad = jnp.asarray(np.array([1, 6, 2, -100]))
    good = jnp.asarray(np.array([1, 0, 2, -100]))
    f = jax.jit(lambda a, t: ato_jax.cross_entropy(a, t, reduction="none"))
    loss_bad, loss_good = np.asarray(f(logits, bad)), np.asarray(f(logits, good))
    assert np.isnan(loss_bad[1]) and not np.isnan(loss_bad[[0, 2, 3]]).any()
    np.testing.assert_array_equal(loss_bad[[0, 2, 3]], loss_good[[0, 2, 3]])
    g = np.asarray(jax.jit(jax.grad(lambda a, t: ato_jax.cross_entropy(a, t, reduction="sum")))(logits, bad))
    assert np.isnan(g[1]).all() and np.isfinite(g[[0, 2, 3]]).all() and not g[3].any()


def test_cross_entropy_second_backward_is_refused():
    """The forward's gradient is handed to the first backward (and scaled in place there): a
    second backward over a retained graph raises instead of returning it scaled twice."""
    x = torch.randn(4, 9, requires_grad=True)
    loss = ato_torch.cross_entropy(x, torch.tensor([0, 1, 2, 3]))
    (2.0 * loss).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward called a second time"):
        loss.backward()


def test_cross_entropy_computes_the_gradient_only_when_wanted(monkeypatch):
    """The forward writes the [T, V] gradient only when logits require grad and grad mode is
    on; the loss is the same either way."""
    import ato_torch.ops

    asked = []
    run = ato_torch.ops.run_plan

    def spy(plan, arrays, target):
        asked.extend(launch.constexprs["GRAD"] for launch in plan.launches if launch.name == "ce_fwd_kernel")
        return run(plan, arrays, target)

    monkeypatch.setattr(ato_torch.ops, "run_plan", spy)
    x, t = torch.randn(4, 9), torch.tensor([0, 1, 2, 3])
    losses = [ato_torch.cross_entropy(x, t), ato_torch.cross_entropy(x.requires_grad_(), t)]
    with torch.no_grad():
        losses.append(ato_torch.cross_entropy(x, t))
    assert asked == [False, True, False]
    assert all(torch.equal(loss.detach(), losses[0]) for loss in losses)


def _torch_op_calls():
    """(name, a call of each torch op on small CPU inputs, its differentiable inputs)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    x, res, w, b = r(3, 40), r(3, 40), r(40), r(40)
    q, k, cos, sin = r(1, 2, 5, 8), r(1, 1, 5, 8), r(5, 4), r(5, 4)
    t = torch.tensor([0, 39, 5])
    return [
        ("layer_norm", lambda x, w, b: ato_torch.layer_norm(x, w, b), (x, w, b)),
        ("layer_norm plain", lambda x: ato_torch.layer_norm(x), (x,)),
        ("rms_norm", lambda x, w: ato_torch.rms_norm(x, w), (x, w)),
        ("dropout_residual_layer_norm", lambda x, res, w, b: ato_torch.dropout_residual_layer_norm(
            x, res, w, b, p=0.2, seed=3), (x, res, w, b)),
        ("softmax", lambda x: ato_torch.softmax(x, temperature=0.7), (x,)),
        ("swiglu", lambda x, res: ato_torch.swiglu(x, res), (x, res)),
        ("rope", lambda q, k: ato_torch.rope(q, k, cos, sin), (q, k)),
        ("cross_entropy", lambda x: ato_torch.cross_entropy(x, t, label_smoothing=0.1), (x,)),
    ]


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def test_torch_ops_without_autograd_match_and_never_touch_placeholders():
    """Without anything to differentiate (no_grad, or no input requiring grad) the torch ops
    run their plan outside a torch.autograd.Function: the same bits as with autograd, and no
    graph. Placeholder outputs (an absent h, RMSNorm's mean, absent dw/db, the gradient of a
    loss alone) point at one shared scratch tensor per device, dtype and shape that no kernel
    may write: filled with a sentinel, it must come out of forwards and backwards unchanged."""
    from ato_core import interpreter as launcher

    calls = _torch_op_calls()

    def run_all():
        for name, fn, inputs in calls:
            plain = _flat(fn(*inputs))
            with torch.no_grad():
                no_grad = _flat(fn(*[t.detach().requires_grad_() for t in inputs]))
            leaves = [t.detach().requires_grad_() for t in inputs]
            tracked = _flat(fn(*leaves))
            sum(o.float().sum() for o in tracked).backward()
            for a, c, d in zip(plain, no_grad, tracked):
                assert a.grad_fn is None and c.grad_fn is None and d.grad_fn is not None, name
                assert torch.equal(a, d.detach()) and torch.equal(c, d.detach()), name
            assert all(t.grad is not None for t in leaves), name

    run_all()  # creates every scratch tensor the forwards and backwards use
    keys = set(launcher._SCRATCH)
    assert keys, "no placeholder was used"
    for t in launcher._SCRATCH.values():
        t.fill_(-12345.0)
    run_all()
    assert set(launcher._SCRATCH) == keys  # (so every one used was filled)
    for key, t in launcher._SCRATCH.items():
        assert bool((t == -12345.0).all()), f"a kernel wrote the placeholder {key}"


def test_torch_ops_refuse_forward_mode_ad():
    """A dual tensor's tangent must not be dropped silently: the ops have no jvp rule, and
    say so (torch's NotImplementedError), also where nothing requires grad."""
    import torch.autograd.forward_ad as fwad

    for name, fn, inputs in _torch_op_calls():
        with fwad.dual_level():
            duals = [fwad.make_dual(t, torch.ones_like(t)) for t in inputs]
            with pytest.raises(NotImplementedError, match="jvp"):
                fn(*duals)


@pytest.mark.parametrize("loss", ["square", "sum"])
def test_torch_backward_with_create_graph_refuses_a_second_order(loss):
    """ato's backwards are first order. With create_graph=True the first-order gradients are
    still right (the same bits), and differentiating them raises naming the op, whether the
    cotangent requires grad (square) or not (sum: torch's once_differentiable would hand back
    gradients that silently do not require grad)."""
    x, w = torch.randn(3, 40), torch.randn(40)
    grads = []
    for create_graph in (False, True):
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = ato_torch.rms_norm(xl, wl)
        gx, gw = torch.autograd.grad(y.square().sum() if loss == "square" else y.sum(), (xl, wl),
                                     create_graph=create_graph)
        grads.append((gx, gw))
    assert torch.equal(grads[0][0], grads[1][0].detach()) and torch.equal(grads[0][1], grads[1][1].detach())
    with pytest.raises(RuntimeError, match="ato_torch.rms_norm: its backward is not differentiable"):
        grads[1][0].sum().backward()


@pytest.mark.parametrize("transform", ["vmap", "grad", "jvp"])
def test_torch_func_transforms_name_the_op(transform):
    """torch.func's transforms raise NotImplementedError naming the op (not torch's message
    about setup_context, nor a storage access error under vmap)."""
    x, w = torch.randn(2, 3, 40), torch.randn(40)
    f = lambda a: ato_torch.rms_norm(a, w).sum()  # noqa: E731
    run = {"vmap": lambda: torch.func.vmap(f)(x), "grad": lambda: torch.func.grad(f)(x),
           "jvp": lambda: torch.func.jvp(f, (x,), (x,))}[transform]
    with pytest.raises(NotImplementedError, match="ato_torch.rms_norm: torch.func transforms"):
        run()


def test_half_dtypes():
    for dtype in ("bfloat16", "float16"):
        check(norm_case("layer_norm", (3, 200), dtype=dtype, seed=1))
        check(norm_case("rms_norm", (3, 40), dtype=dtype, bias=False, seed=2))
        check(drln_case((2, 100), dtype=dtype, p=0.1, dseed=1, seed=3))
        check(softmax_case((3, 200), dtype=dtype, seed=4))
        check(swiglu_case((5, 33), dtype=dtype, seed=5))
        check(rope_case(1, 2, 1, 5, 16, dtype=dtype, seed=6))
        check(ce_case(5, 500, dtype=dtype, label_smoothing=0.1, seed=7))


def _dropout_h(framework, shape, p, seed):
    ones = np.ones(shape, np.float32)
    if framework == "torch":
        t = torch.from_numpy(ones)
        return ato_torch.dropout_residual_layer_norm(t, torch.zeros_like(t), None, None, p=p, seed=seed)[1].numpy()
    a = jnp.asarray(ones)
    return np.asarray(ato_jax.dropout_residual_layer_norm(a, jnp.zeros_like(a), None, None, p=p, seed=seed)[1])


def test_dropout_mask():
    """The kept fraction is within a binomial bound of 1-p; kept values are 1/(1-p); the mask
    depends only on (seed, flat index): the same in both frameworks, for any row split of the
    same elements, and another seed gives another mask; training=False or p=0 drops nothing."""
    p, n = 0.3, 250 * 64
    a = _dropout_h("torch", (250, 64), p, 11)
    kept = a != 0
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(kept.mean() - (1 - p)) < 5 * sigma, kept.mean()
    np.testing.assert_allclose(a[kept], 1 / (1 - p), rtol=1e-6)
    np.testing.assert_array_equal(_dropout_h("jax", (250, 64), p, 11), a)
    np.testing.assert_array_equal(_dropout_h("torch", (500, 32), p, 11).reshape(250, 64), a)
    other = _dropout_h("torch", (250, 64), p, 12) != 0
    assert (other != kept).mean() > 0.3
    t = torch.ones(4, 8)
    y, hh = ato_torch.dropout_residual_layer_norm(t, t, None, None, p=0.5, seed=1, training=False)
    assert torch.equal(hh, t + t)


BAD = [
    ("weight shape", lambda m, a: m.layer_norm(a["x"], a["w5"]), ValueError, "weight: expected shape (4,)"),
    ("bias shape", lambda m, a: m.layer_norm(a["x"], a["w4"], a["w5"]), ValueError, "bias: expected shape (4,)"),
    ("integer x", lambda m, a: m.rms_norm(a["xi"]), TypeError, "x: expected a floating dtype"),
    ("eps", lambda m, a: m.layer_norm(a["x"], eps=0.0), ValueError, "eps: expected a positive float"),
    ("p = 1", lambda m, a: m.dropout_residual_layer_norm(a["x"], a["x"], None, None, p=1.0), ValueError,
     "p: expected a float in [0, 1)"),
    ("p < 0", lambda m, a: m.dropout_residual_layer_norm(a["x"], a["x"], None, None, p=-0.1), ValueError,
     "p: expected a float in [0, 1)"),
    ("float seed", lambda m, a: m.dropout_residual_layer_norm(a["x"], a["x"], None, None, p=0.1, seed=a["x"][0, 0]),
     TypeError, "seed: expected an int, or an array of dtype int32, int64 or uint32, got float32"),
    ("seed shape", lambda m, a: m.dropout_residual_layer_norm(a["x"], a["x"], None, None, p=0.1, seed=a["xi"][0]),
     ValueError, "seed: expected a 0-d integer array or a random key's data (uint32 [2]), got shape (4,)"),
    ("residual shape", lambda m, a: m.dropout_residual_layer_norm(a["x"], a["x"][:1], None, None), ValueError,
     "residual: expected shape (3, 4)"),
    ("temperature", lambda m, a: m.softmax(a["x"], temperature=0), ValueError, "temperature: expected a positive"),
    ("temperature array", lambda m, a: m.softmax(a["x"], temperature=a["x"][0]), ValueError,
     "temperature: expected a float or a 0-d array, got an array of shape (4,)"),
    ("temperature int array", lambda m, a: m.softmax(a["x"], temperature=a["xi"][0, 0]), TypeError,
     "temperature: expected a floating dtype"),
    ("swiglu shapes", lambda m, a: m.swiglu(a["x"], a["x"][:1]), ValueError, "up: expected shape (3, 4)"),
    ("rope odd D", lambda m, a: m.rope(a["q5"], a["q5"], a["cs"], a["cs"]), ValueError, "q: expected an even head"),
    ("rope cos shape", lambda m, a: m.rope(a["q4"], a["q4"], a["cs"], a["cs"]), ValueError,
     "cos: expected [max_positions, D/2] or [max_positions, D] with D=8, got shape (3, 2)"),
    ("rope positions dtype", lambda m, a: m.rope(a["q4"], a["q4"], a["cs4"], a["cs4"], positions=a["posf"]),
     TypeError, "positions: expected an integer dtype"),
    ("non-float logits", lambda m, a: m.cross_entropy(a["xi"], a["t"]), TypeError, "logits: expected a floating"),
    ("target out of range", lambda m, a: m.cross_entropy(a["x"], a["t_bad"]), ValueError,
     "targets: expected values in [0, 4) or ignore_index=-100, got 7"),
    ("float targets", lambda m, a: m.cross_entropy(a["x"], a["x"][:, 0]), TypeError, "targets: expected an integer"),
    ("reduction", lambda m, a: m.cross_entropy(a["x"], a["t"], reduction="avg"), ValueError,
     "reduction: expected one of"),
    ("z_loss < 0", lambda m, a: m.cross_entropy(a["x"], a["t"], z_loss=-1e-4), ValueError,
     "z_loss: expected a finite float >= 0, got -0.0001"),
    ("softcap 0", lambda m, a: m.cross_entropy(a["x"], a["t"], softcap=0.0), ValueError,
     "softcap: expected None or a finite float > 0, got 0.0"),
    ("return_z_loss", lambda m, a: m.cross_entropy(a["x"], a["t"], return_z_loss=1), TypeError,
     "return_z_loss: expected a bool"),
]


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,call,exc,fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs(framework, desc, call, exc, fragment):
    mod, arr = frontend(framework)
    a = {"x": np.ones((3, 4), np.float32), "w5": np.ones(5, np.float32), "w4": np.ones(4, np.float32),
         "xi": np.ones((3, 4), np.int32), "q5": np.ones((1, 2, 3, 5), np.float32),
         "q4": np.ones((1, 2, 3, 8), np.float32), "cs": np.ones((3, 2), np.float32),
         "cs4": np.ones((3, 4), np.float32), "posf": np.zeros((1, 3), np.float32),
         "t": np.array([0, 1, 3]), "t_bad": np.array([0, 7, -100])}
    with pytest.raises(exc) as info:
        call(mod, {k: arr(v) for k, v in a.items()})
    assert fragment in str(info.value)


def test_rope_positions_on_another_device():
    """positions elsewhere than q is refused by name (a kernel handed another device's address
    would fault or read garbage)."""
    q, cs = torch.ones(1, 2, 3, 8), torch.ones(3, 4)
    pos = torch.zeros(1, 3, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="positions: expected device cpu"):
        ato_torch.rope(q, q, cs, cs, positions=pos)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_rope_full_width_tables(framework, interleaved):
    """[P, D] tables as Hugging Face builds them (cat(c, c); interleaved: c repeated element-wise)
    give, bit for bit, what the [P, D/2] table gives, and so do their gradients; the other
    copy is not read (NaN there changes nothing)."""
    rng = np.random.default_rng(5)
    B, H, N, D, P = 2, 3, 7, 12, 9
    q, k = (rng.standard_normal((B, H, N, D)).astype(np.float32) for _ in range(2))
    angles = rng.uniform(-3, 3, (P, D // 2))
    half = [np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]
    if interleaved:
        full = [np.repeat(t, 2, axis=1) for t in half]
        for t in full:
            t[:, 1::2] = np.nan
    else:
        full = [np.concatenate([t, np.full_like(t, np.nan)], axis=1) for t in half]
    pos = rng.integers(0, P, (B, N))
    mod, arr = frontend(framework)
    outs = []
    for cos, sin in (half, full):
        if framework == "torch":
            qt, kt = (torch.from_numpy(x).requires_grad_() for x in (q, k))
            qr, kr = mod.rope(qt, kt, torch.from_numpy(cos), torch.from_numpy(sin), positions=torch.from_numpy(pos),
                              interleaved=interleaved)
            (qr.square().sum() + kr.sum()).backward()
            outs.append([t.detach().numpy() for t in (qr, kr, qt.grad, kt.grad)])
        else:
            f = lambda a, b: mod.rope(a, b, arr(cos), arr(sin), positions=arr(pos), interleaved=interleaved)  # noqa: E731
            (qr, kr), back = jax.vjp(f, arr(q), arr(k))
            outs.append([np.asarray(t) for t in (qr, kr, *back((2 * qr, np.ones_like(kr))))])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    ref_q, _ = rope_reference(q.astype(np.float64), k.astype(np.float64), np.asarray(full[0], np.float64),
                        np.asarray(full[1], np.float64), positions=pos, interleaved=interleaved)
    assert h.rel_err(outs[1][0], ref_q) < 1e-6


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_rope_positions_out_of_range_give_zeros(framework):
    """A position outside [0, max_positions) reads nothing out of bounds: its rows are 0."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 2, 4, 8)).astype(np.float32), rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    cos, sin = np.ones((6, 4), np.float32), np.zeros((6, 4), np.float32)
    pos = np.array([[0, 6, -1, 5]])
    mod, arr = frontend(framework)
    qr, kr = (np.asarray(t) for t in mod.rope(arr(q), arr(k), arr(cos), arr(sin), positions=arr(pos)))
    for got, x in ((qr, q), (kr, k)):
        np.testing.assert_array_equal(got[:, :, [0, 3]], x[:, :, [0, 3]])  # angle 0: unchanged
        assert not got[:, :, [1, 2]].any()


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("shape", [(0, 2, 4, 8), (1, 2, 0, 8)], ids=["B0", "N0"])
def test_rope_of_empty_inputs_is_empty(framework, shape):
    """No batch row or no position: empty results of the inputs' shapes (no program runs),
    not a grid error."""
    q, cs = np.zeros(shape, np.float32), np.ones((4, 4), np.float32)
    mod, arr = frontend(framework)
    qr, kr = mod.rope(arr(q), arr(q[:, :1]), arr(cs), arr(cs))
    assert tuple(qr.shape) == shape and tuple(kr.shape) == (shape[0], 1) + shape[2:]
