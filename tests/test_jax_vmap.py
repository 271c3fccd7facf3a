"""jax.vmap of ato_jax ops (CPU, the interpreter): the mapped axis folded into the op's batch
(Op.batch; ato_jax.folding), one launch, no loop in the jaxpr; per-slice results where
folding would change them (a mapped weight, a mean loss, weight gradients). Every result
and gradient bitwise the per-slice calls' (the same kernels; rows are independent)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ato_jax

V = 3


def _rand(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _loops(fn, *args) -> int:
    """scan / while loops in fn's jaxpr (the per-slice fallback runs one)."""
    def walk(jaxpr):
        n = 0
        for e in jaxpr.eqns:
            n += e.primitive.name in ("scan", "while")
            for p in e.params.values():
                for sub in (p if isinstance(p, (list, tuple)) else [p]):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        n += walk(inner)
        return n
    return walk(jax.make_jaxpr(fn)(*args).jaxpr)


def _per_slice(fn, args, in_axes):
    outs = [fn(*[a if ax is None else a[i] for a, ax in zip(args, in_axes)]) for i in range(V)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def _same(fn, args, in_axes, loops):
    got = jax.vmap(fn, in_axes=in_axes)(*args)
    want = _per_slice(fn, args, in_axes)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.shape == w.shape and np.array_equal(np.asarray(g), np.asarray(w))
    assert _loops(jax.vmap(fn, in_axes=in_axes), *args) == loops


def test_flash_attention_folds_forward_and_backward():
    q, k, v = _rand(V, 2, 4, 33, 16, seed=1), _rand(V, 2, 2, 40, 16, seed=2), _rand(V, 2, 2, 40, 16, seed=3)
    fa = lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=True)  # noqa: E731
    _same(fa, (q, k, v), (0, 0, 0), loops=0)
    _same(jax.grad(lambda a, b, c: (fa(a, b, c) ** 2).sum(), argnums=(0, 1, 2)), (q, k, v), (0, 0, 0), loops=0)
    _same(fa, (q, k[0], v[0]), (0, None, None), loops=0)  # unmapped k, v: broadcast into the fold


def test_layer_norm_folds_forward_not_weight_gradients():
    """The forward folds; the backward reduces dweight and dbias over the batch, so it runs
    per slice (per-example weight gradients stay per example)."""
    x, w, b = _rand(V, 5, 2, 40, seed=4), _rand(40, seed=5), _rand(40, seed=6)
    _same(lambda a: ato_jax.layer_norm(a, w, b), (x,), (0,), loops=0)
    _same(jax.grad(lambda ww, a: ato_jax.layer_norm(a, ww, b).sum()), (w, x), (None, 0), loops=1)
    _same(lambda a, ww: ato_jax.layer_norm(a, ww, b), (x, _rand(V, 40, seed=7)), (0, 0), loops=1)  # mapped weight


def test_cross_entropy_folds_only_per_row_losses():
    logits = _rand(V, 6, 50, seed=8)
    t = jnp.asarray(np.random.default_rng(9).integers(0, 50, (V, 6)), jnp.int32)
    _same(lambda a, b: ato_jax.cross_entropy(a, b, reduction="none"), (logits, t), (0, 0), loops=0)
    # mean: a scalar loss, the forward per slice; its backward (scaling the forward's dlogits by
    # the unmapped dloss) folds
    _same(jax.grad(lambda a, b: ato_jax.cross_entropy(a, b)), (logits, t), (0, 0), loops=1)


def test_nested_vmap_and_softmax_gradient_fold():
    x = _rand(2, V, 4, 30, seed=10)
    f = jax.vmap(jax.vmap(jax.grad(lambda a: (ato_jax.softmax(a) ** 3).sum())))
    got = f(x)
    want = jnp.stack([jnp.stack([jax.grad(lambda a: (ato_jax.softmax(a) ** 3).sum())(x[i, j]) for j in range(V)])
                      for i in range(2)])
    assert np.array_equal(np.asarray(got), np.asarray(want))
    assert _loops(f, x) == 0


@pytest.mark.parametrize("op", ["block_sparse_attention", "linear_attention"])
def test_attention_families_fold(op):
    q, k, v = (_rand(V, 1, 2, 40, 16, seed=s) for s in (11, 12, 13))
    if op == "block_sparse_attention":
        mask = jnp.asarray(np.random.default_rng(14).random((V, 1, 2, 3, 3)) < 0.6)
        fn = lambda a, b, c, m: ato_jax.block_sparse_attention(a, b, c, m, block_size=16, causal=True)  # noqa: E731
        args = (q, k, v, mask)
    else:
        s0, z0 = _rand(V, 1, 2, 16, 16, seed=15), jnp.abs(_rand(V, 1, 2, 16, seed=16))
        fn = lambda a, b, c, s, z: ato_jax.linear_attention(  # noqa: E731
            a, b, c, causal=True, initial_state=(s, z), output_final_state=True)
        args = (q, k, v, s0, z0)
    _same(fn, args, (0,) * len(args), loops=0)
    diff = jax.grad(lambda *a: sum((o.astype(jnp.float32) ** 2).sum() for o in jax.tree.leaves(fn(*a))),
                    argnums=(0, 1, 2))
    _same(diff, args, (0,) * len(args), loops=0)


def test_vectors_are_not_folded():
    """softmax of a vector: its only axis is the softmax's own, not a batch: per slice."""
    x = _rand(V, 30, seed=17)
    _same(ato_jax.softmax, (x,), (0,), loops=1)
    _same(jax.grad(lambda a: (ato_jax.softmax(a) ** 2).sum()), (x,), (0,), loops=2)


def test_softmax_traced_temperature_gradient():
    """dL/dtemperature sums over the rows, and its backward reads x (kept for it): with the
    temperature unmapped the backward runs per slice (one loop), mapped the forward too (two)."""
    x = _rand(V, 4, 30, seed=20)
    f = jax.grad(lambda t, a: (ato_jax.softmax(a, temperature=t) ** 3).sum(), argnums=(0, 1))
    _same(f, (jnp.float32(1.3), x), (None, 0), loops=1)
    _same(f, (jnp.asarray([0.7, 1.3, 2.0], jnp.float32), x), (0, 0), loops=2)
