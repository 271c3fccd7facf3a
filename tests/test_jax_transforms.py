"""ato_jax under jax.checkpoint (remat) and shard_map (CPU, the interpreter): the same bits as
the plain call. shard_map runs in a subprocess with 4 host CPU devices (XLA_FLAGS must be set
before JAX starts; on a GPU machine too, where it is the CPU's)."""

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import ato_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_checkpoint():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 40, 16)), jnp.float32)
    f = lambda a: (ato_jax.flash_attention(a, a * 0.5, a, causal=True) ** 2).sum()  # noqa: E731
    remat = jax.jit(jax.grad(lambda a: jax.checkpoint(f)(a)))
    assert np.array_equal(np.asarray(remat(x)), np.asarray(jax.grad(f)(x)))


SHARD_MAP = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
import ato_jax
assert len(jax.devices()) == 4
mesh = Mesh(np.array(jax.devices()), ("data",))
x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 3, 40)), jnp.float32)
w, b = jnp.linspace(0.5, 1.5, 40), jnp.linspace(-1, 1, 40)
loss = lambda a: (ato_jax.layer_norm(a, w, b) ** 2).sum()
f = jax.jit(shard_map(jax.grad(loss), mesh=mesh, in_specs=P("data"), out_specs=P("data")))
assert np.array_equal(np.asarray(f(x)), np.asarray(jax.grad(loss)(x)))
# the replicated weight's gradient: per-device partial sums, summed over the mesh (fp32 sums of
# 24 rows grouped otherwise than the one-device call's: 1e-5 relative)
loss_w = lambda ww, a: (ato_jax.layer_norm(a, ww, b) ** 2).sum()
gw = jax.jit(shard_map(jax.grad(loss_w), mesh=mesh, in_specs=(P(), P("data")), out_specs=P()))(w, x)
np.testing.assert_allclose(np.asarray(gw), np.asarray(jax.grad(loss_w)(w, x)), rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_shard_map_on_four_host_devices():
    """Data-parallel layer_norm: dx per shard bitwise the one-device call's; the replicated
    weight's gradient summed over the mesh."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", SHARD_MAP], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
