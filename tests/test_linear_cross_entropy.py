"""linear_cross_entropy, CPU tier: both frameworks against the float64 reference (loss and the
gradients of x, weight and bias) and bitwise against each other; vocabulary parallelism
against the unsharded op (JAX shard_map on 4 host devices, torch gloo on 4 processes); bad
input; the modules.

On the CPU the backward runs in vocabulary chunks of two 32-column tiles and the forward in
vocabulary splits of 32-column blocks (plans.INTERPRETER_TILES), so V = 150 takes several of
each and V = 5 less than one. Tolerances: ato_cli.harness.TOLERANCE by dtype (fp32 1e-4
relative: fp32 matmuls over H <= 64 and sums over V <= 150; bf16 2e-2: dlogits rounded to bf16
before its matmuls, as a stored bf16 logits' gradient is)."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
from ato_core.ops.linear_cross_entropy.cases import lce_case
from ato_core.ops.linear_cross_entropy.reference import linear_cross_entropy as reference
from helpers import check, frontend, raises_naming

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_cross_entropy(reduction, bias):
    check(lce_case(7, 40, 150, bias=bias, reduction=reduction, label_smoothing=0.1, seed=1))


@pytest.mark.parametrize("options", [{"z_loss": 1e-2}, {"softcap": 5.0}, {"z_loss": 1e-3, "softcap": 30.0,
                                                                          "label_smoothing": 0.1}])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_z_loss_and_softcap(options, reduction):
    check(lce_case((2, 5), 33, 150, bias=True, reduction=reduction, seed=2, **options))
    check(lce_case(4, 24, 70, dtype="bfloat16", reduction=reduction, seed=3, **options))


@pytest.mark.parametrize("shape", [(1, 17, 5), ((2, 1, 3), 24, 70), ((3, 4), 16, 33), (40, 64, 97)],
                         ids=["T1-V5", "lead3", "lead2", "T40"])
def test_odd_sizes(shape):
    """One row against a vocabulary smaller than one block; 1-3 leading axes; T past one row
    block (16) and H a multiple of the K step."""
    lead, H, V = shape
    check(lce_case(lead, H, V, bias=True, ignore_every=0 if lead == 1 else 3, label_smoothing=0.1, seed=4))


def test_fp16():
    check(lce_case(9, 32, 150, dtype="float16", bias=True, z_loss=1e-3, seed=5))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_every_target_ignored(framework):
    """mean over no token is NaN (as torch's), sum 0 with zero gradients."""
    mod, arr = frontend(framework)
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((5, 16)).astype(np.float32), rng.standard_normal((40, 16)).astype(np.float32)
    t = np.full(5, -100)
    assert np.isnan(float(mod.linear_cross_entropy(arr(x), arr(w), arr(t))))
    if framework == "jax":
        loss, grads = jax.value_and_grad(lambda a, b: mod.linear_cross_entropy(a, b, arr(t), reduction="sum"),
                                         argnums=(0, 1))(arr(x), arr(w))
        grads = [np.asarray(g) for g in grads]
    else:
        xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
        loss = mod.linear_cross_entropy(xt, wt, torch.from_numpy(t), reduction="sum")
        loss.backward()
        grads = [xt.grad.numpy(), wt.grad.numpy()]
    assert float(loss) == 0 and all(np.all(g == 0) for g in grads)


def test_same_as_cross_entropy_of_the_logits():
    """Against ato's own cross_entropy of the stored logits (fp32): the same loss to fp32
    rounding, with every option."""
    rng = np.random.default_rng(7)
    x, w, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((6, 20), (90, 20), (90,)))
    t = torch.from_numpy(rng.integers(0, 90, 6))
    kw = dict(label_smoothing=0.1, z_loss=1e-3, softcap=8.0, reduction="none")
    got = ato_torch.linear_cross_entropy(x, w, t, bias=b, **kw)
    want = ato_torch.cross_entropy(x @ w.T + b, t, **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=2e-6)


def test_return_z_loss():
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((6, 16)).astype(np.float32), rng.standard_normal((50, 16)).astype(np.float32)
    t = rng.integers(0, 50, 6)
    for mod, arr in (frontend("torch"), frontend("jax")):
        loss, z = mod.linear_cross_entropy(arr(x), arr(w), arr(t), z_loss=1e-2, return_z_loss=True)
        want_loss, want_z = reference(x.astype(np.float64), w.astype(np.float64), t, z_loss=1e-2, return_z_loss=True)
        assert abs(float(loss) - want_loss) < 1e-5 * abs(want_loss) and abs(float(z) - want_z) < 1e-5 * abs(want_z)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bad_input(framework):
    mod, arr = frontend(framework)
    x, w, t = arr(np.zeros((4, 8), np.float32)), arr(np.zeros((10, 8), np.float32)), arr(np.zeros(4, np.int64))
    raises_naming(ValueError, "weight", mod.linear_cross_entropy, x, arr(np.zeros((10, 6), np.float32)), t)
    raises_naming(ValueError, "weight", mod.linear_cross_entropy, x, arr(np.zeros((10, 8, 1), np.float32)), t)
    raises_naming(ValueError, "targets", mod.linear_cross_entropy, x, w, arr(np.zeros(5, np.int64)))
    raises_naming(TypeError, "targets", mod.linear_cross_entropy, x, w, arr(np.zeros(4, np.float32)))
    raises_naming(TypeError, "weight", mod.linear_cross_entropy, x, arr(np.zeros((10, 8), np.float16)), t)
    raises_naming(ValueError, "bias", mod.linear_cross_entropy, x, w, t, bias=arr(np.zeros(9, np.float32)))
    raises_naming(ValueError, "targets", mod.linear_cross_entropy, x, w, arr(np.array([0, 1, 10, 2])))
    raises_naming(ValueError, "reduction", mod.linear_cross_entropy, x, w, t, reduction="avg")
    raises_naming(ValueError, "softcap", mod.linear_cross_entropy, x, w, t, softcap=0.0)


def test_out_of_range_target_under_jit_gives_nan_row():
    rng = np.random.default_rng(9)
    x, w = jnp.asarray(rng.standard_normal((3, 8)), jnp.float32), jnp.asarray(rng.standard_normal((10, 8)), jnp.float32)
    loss = jax.jit(lambda a, b, t: ato_jax.linear_cross_entropy(a, b, t, reduction="none"))(x, w, jnp.array([1, 10, 2]))
    assert np.isnan(loss[1]) and np.isfinite(loss[0]) and np.isfinite(loss[2])


def test_modules():
    """ato_torch.nn.LinearCrossEntropyLoss and ato_jax.nn's give the op's loss and gradients,
    the flax one under nnx.jit with the weight an nnx.Param."""
    from flax import nnx

    import ato_jax.nn
    import ato_torch.nn

    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((2, 3, 16)).astype(np.float32), rng.standard_normal((40, 16)).astype(np.float32)
    t = rng.integers(0, 40, (2, 3))
    opts = dict(label_smoothing=0.1, z_loss=1e-3)
    wt = torch.from_numpy(w).requires_grad_()
    loss_t = ato_torch.nn.LinearCrossEntropyLoss(**opts)(torch.from_numpy(x), wt, torch.from_numpy(t))
    loss_t.backward()
    head = nnx.Param(jnp.asarray(w))
    loss_fn = ato_jax.nn.LinearCrossEntropyLoss(**opts)
    loss_j = nnx.jit(lambda p: loss_fn(jnp.asarray(x), p, jnp.asarray(t)))(head)
    g = jax.grad(lambda a: ato_jax.linear_cross_entropy(jnp.asarray(x), a, jnp.asarray(t), **opts))(jnp.asarray(w))
    assert float(loss_t) == float(loss_j) == float(ato_torch.linear_cross_entropy(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(t), **opts))
    np.testing.assert_array_equal(wt.grad.numpy(), np.asarray(g))


_SHARDED = """
import os, sys
import numpy as np
{setup}
rng = np.random.default_rng(0)
T, H, V = 9, 24, 4 * 37
x = rng.standard_normal((T, H)).astype(np.float32)
w = (rng.standard_normal((V, H)) * 0.5).astype(np.float32)
b = rng.standard_normal(V).astype(np.float32)
t = rng.integers(0, V, T)
t[::4] = -100
for kw in (dict(label_smoothing=0.1, z_loss=1e-2, softcap=5.0), dict(reduction="none"), dict(reduction="sum")):
{body}
print("OK")
"""

_JAX_SETUP = """
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
import ato_jax
mesh = Mesh(np.array(jax.devices()[:4]), ("v",))
"""

_JAX_BODY = """
    tj = jnp.asarray(t)
    def full(x, w, b):
        return jnp.sum(ato_jax.linear_cross_entropy(x, w, tj, bias=b, **kw))
    def sharded(x, w, b):
        return jnp.sum(ato_jax.vocab_parallel_linear_cross_entropy(x, w, tj, axis_name="v", bias=b, **kw))
    f = jax.jit(shard_map(jax.value_and_grad(sharded, argnums=(0, 1, 2)), mesh=mesh, in_specs=(P(), P("v"), P("v")),
                          out_specs=(P(), (P(), P("v"), P("v")))))
    args = [jnp.asarray(a) for a in (x, w, b)]
    want = jax.value_and_grad(full, argnums=(0, 1, 2))(*args)
    got = f(*args)
    for a, c in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, c = np.asarray(a), np.asarray(c)
        assert np.abs(a - c).max() <= 1e-5 * max(np.abs(c).max(), 1), (kw, np.abs(a - c).max())
"""


def _run(code, env=None):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


def test_vocab_parallel_jax_shard_map_on_four_host_devices():
    """weight and bias split over 4 devices along V, x and targets replicated: the loss and
    the three gradients of the unsharded op (1e-5 relative: the splits' partials merge in
    another grouping)."""
    _run(_SHARDED.format(setup=_JAX_SETUP, body=_JAX_BODY),
         {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})


_TORCH = """
import os, sys
import numpy as np
import torch, torch.distributed as dist, torch.multiprocessing as mp


def work(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=4)
    import ato_torch
    rng = np.random.default_rng(0)
    T, H, V = 9, 24, 4 * 37
    x = torch.from_numpy(rng.standard_normal((T, H)).astype(np.float32))
    w = torch.from_numpy((rng.standard_normal((V, H)) * 0.5).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal(V).astype(np.float32))
    t = torch.from_numpy(rng.integers(0, V, T))
    t[::4] = -100
    rows = slice(rank * 37, (rank + 1) * 37)
    for kw in (dict(label_smoothing=0.1, z_loss=1e-2, softcap=5.0), dict(reduction="none"), dict(reduction="sum")):
        xs, ws, bs = x.clone().requires_grad_(), w[rows].clone().requires_grad_(), b[rows].clone().requires_grad_()
        got = ato_torch.vocab_parallel_linear_cross_entropy(xs, ws, t, bias=bs, **kw)
        got.sum().backward()
        xf, wf, bf = (a.clone().requires_grad_() for a in (x, w, b))
        want = ato_torch.linear_cross_entropy(xf, wf, t, bias=bf, **kw)
        want.sum().backward()
        for a, c in ((got, want), (xs.grad, xf.grad), (ws.grad, wf.grad[rows]), (bs.grad, bf.grad[rows])):
            assert (a - c).abs().max() <= 1e-5 * max(c.abs().max(), 1), (rank, kw)
    dist.destroy_process_group()


if __name__ == "__main__":
    port = int(sys.argv[1])
    mp.start_processes(work, args=(port,), nprocs=4, start_method="spawn")
    print("OK")
"""


def test_vocab_parallel_torch_gloo_four_processes(tmp_path):
    """The same with a process group: gloo on 4 CPU processes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "vp.py"
    script.write_text(textwrap.dedent(_TORCH))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(script), str(port)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
