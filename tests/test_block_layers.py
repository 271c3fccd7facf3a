"""A small transformer block (ato_cli/block.py: LayerNorm, causal multi-head attention,
RMSNorm, SwiGLU MLP, head, cross-entropy) trained from the same weights and data four ways:
on ato_torch.nn's layers, on torch.nn's, on ato_jax.nn's and on flax nnx's. The losses agree
step by step (issue 21; test_block_training.py trains a CAB block in both frameworks). The
GPU tier runs this at a larger size (test_gpu.py)."""

import numpy as np
import pytest

# (B, N, C, H, hidden, vocab): head dim 16, the flash kernels' smallest
CPU_DIMS = (1, 16, 64, 4, 64, 40)
STEPS, LR = 3, 0.5


def train_four_ways(dims, device: str, steps: int = STEPS, lr: float = LR, seed: int = 0) -> dict:
    """{"torch", "ato_torch", "flax", "ato_jax": the loss before each SGD step}, all four
    blocks starting from one torch block's weights (fp32; JAX's dots at full precision).
    Skips without flax and optax (ato_jax.nn's extra)."""
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    import jax
    import jax.numpy as jnp
    import torch

    from ato_cli import block

    B, N, C, H, hidden, vocab = dims
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, N, C)).astype(np.float32)
    targets = rng.integers(0, vocab, (B, N)).astype(np.int32)
    first = block.torch_block(C, H, hidden, vocab, ato=False, device=device)
    losses = {}
    for name in ("torch", "ato_torch"):
        m = block.torch_block(C, H, hidden, vocab, ato=name == "ato_torch", device=device)
        m.load_state_dict(first.state_dict())
        losses[name] = block.torch_sgd_losses(m, torch.from_numpy(x).to(device),
                                              torch.from_numpy(targets).long().to(device), steps, lr)
    for name in ("flax", "ato_jax"):
        m = block.jax_block(C, H, hidden, vocab, ato=name == "ato_jax")
        block.jax_params_from_torch(first, m)
        with jax.default_matmul_precision("highest"):
            losses[name] = block.jax_sgd_losses(m, jnp.asarray(x), jnp.asarray(targets), steps, lr)
    return losses


def check_losses(losses: dict, rtol: float) -> None:
    """Each way's losses against torch.nn's, step by step, and each step lowers the loss."""
    want = np.asarray(losses["torch"])
    assert np.all(np.diff(want) < 0), f"the block did not train: {want}"
    for name, got in losses.items():
        np.testing.assert_allclose(got, want, rtol=rtol, err_msg=f"{name} against torch.nn's layers")


def test_block_trains_the_same_four_ways():
    """fp32 on the interpreter: three SGD steps, the losses within 1e-5 of torch.nn's (their
    sums run in other orders, over at most 64 terms at fp32 precision, 6e-8 each; a wrong
    gradient in any op moves the later losses by far more, attention without its causal
    mask the first by 1e-2). Measured: 2e-7."""
    check_losses(train_four_ways(CPU_DIMS, "cpu"), rtol=1e-5)
