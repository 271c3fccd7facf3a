"""Time one training step of the small transformer block (ato_cli/block.py) on the GPU: on
ato's layers and on each framework's own, torch eager and compiled (torch.compile of the
block, default mode), JAX under nnx.jit; bf16 parameters and computation, SGD (issue 21).
torch rows: do_bench median of step() (zero_grad, forward, backward, optimizer step); JAX rows:
wall clock of 20 jitted steps after 3, synchronised once. Also the first step's loss of each
(bf16: the two layer sets agree to about 1e-2). The blocks pass the logits to the loss in fp32
(logits.float(), as Hugging Face's models do); the "bf16 logits" rows pass them as they are
(ato's cross_entropy sums in fp32 either way). Not a test. On the GPU machine:

    python3 benchmarks/tools/block_step.py [B N C H HIDDEN VOCAB] > $OUT/block_step.txt
"""
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from triton.testing import do_bench

from ato_cli import block

B, N, C, H, hidden, vocab = map(int, sys.argv[1:7]) if len(sys.argv) > 6 else (8, 1024, 1024, 16, 2816, 32000)
LR = 1e-2
rng = np.random.default_rng(0)
x = rng.standard_normal((B, N, C)).astype(np.float32)
targets = rng.integers(0, vocab, (B, N)).astype(np.int32)
print(f"GPU {torch.cuda.get_device_name()}; torch {torch.__version__}, jax {jax.__version__}; block B{B} N{N} C{C} "
      f"H{H} hidden {hidden} vocab {vocab}, bf16, one SGD step (us)", flush=True)
torch.manual_seed(0)
first = block.torch_block(C, H, hidden, vocab, ato=False, device="cuda", dtype=torch.bfloat16)
xt = torch.from_numpy(x).to("cuda", torch.bfloat16)
tt = torch.from_numpy(targets).long().cuda()
rows = {}
for name, upcast in (("ato_torch", True), ("ato_torch bf16 logits", False), ("torch", True)):
    for mode in ("eager", "compiled"):
        m = block.torch_block(C, H, hidden, vocab, ato=name.startswith("ato"), device="cuda", dtype=torch.bfloat16,
                              upcast=upcast)
        m.load_state_dict(first.state_dict())
        fwd = torch.compile(m) if mode == "compiled" else m
        opt = torch.optim.SGD(m.parameters(), lr=LR)

        def step():
            return block.torch_step(fwd, opt, xt, tt)
        try:
            loss0 = step().item()
            rows[f"{name} {mode}"] = (do_bench(step, warmup=5, rep=50, return_mode="median") * 1e3, loss0)
        except Exception as exc:  # a compile failure is a result too
            rows[f"{name} {mode}"] = (float("nan"), f"{type(exc).__name__}: {str(exc)[:200]}")
        print(f"{name + ' ' + mode:30s} {rows[name + ' ' + mode][0]:10.1f}   first loss {rows[name + ' ' + mode][1]}",
              flush=True)
for name, upcast in (("ato_jax", True), ("ato_jax bf16 logits", False), ("flax", True)):
    m = block.jax_block(C, H, hidden, vocab, ato=name.startswith("ato"), dtype=jnp.bfloat16, upcast=upcast)
    block.jax_params_from_torch(first, m)
    import optax
    from flax import nnx
    opt = nnx.Optimizer(m, optax.sgd(LR), wrt=nnx.Param)
    xj, tj = jnp.asarray(x, jnp.bfloat16), jnp.asarray(targets)

    @nnx.jit
    def jstep(mm, o):
        loss, grads = nnx.value_and_grad(lambda a: a(xj, tj))(mm)
        o.update(mm, grads)
        return loss
    loss0 = float(jstep(m, opt))
    for _ in range(3):
        jstep(m, opt)
    jax.block_until_ready(jstep(m, opt))
    t0 = time.perf_counter()
    for _ in range(20):
        out = jstep(m, opt)
    jax.block_until_ready(out)
    us = (time.perf_counter() - t0) / 20 * 1e6
    print(f"{name + ' jit':30s} {us:10.1f}   first loss {loss0}", flush=True)
