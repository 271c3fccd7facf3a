"""Why ato's block (ato_cli/block.py) steps slower under torch.compile than eager (H100:
6976 against 6012 us, block-step.txt): per-kernel device time of one training step, ato eager,
ato compiled, torch compiled, and the device total against the step's do_bench time (host
gaps); "bf16 logits": the block without its logits.float() (ato_cli/block.py upcast=False).
Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python3 benchmarks/experiments/2026-11-27_block_compiled_kernels.py
"""
import numpy as np
import torch
from triton.testing import do_bench

from ato_cli import block
from ato_cli.bench import device_kernels

B, N, C, H, hidden, vocab = 8, 1024, 1024, 16, 2816, 32000
rng = np.random.default_rng(0)
xt = torch.from_numpy(rng.standard_normal((B, N, C)).astype(np.float32)).to("cuda", torch.bfloat16)
tt = torch.from_numpy(rng.integers(0, vocab, (B, N))).long().cuda()
print(f"GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; block B{B} N{N} C{C} H{H} bf16, one SGD step")
for name, ato, mode, upcast in (("ato eager", True, "eager", True), ("ato compiled", True, "compiled", True),
                                ("ato compiled, bf16 logits", True, "compiled", False),
                                ("torch compiled", False, "compiled", True)):
    torch.manual_seed(0)
    m = block.torch_block(C, H, hidden, vocab, ato=ato, device="cuda", dtype=torch.bfloat16, upcast=upcast)
    fwd = torch.compile(m) if mode == "compiled" else m
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)

    def step():
        return block.torch_step(fwd, opt, xt, tt)
    step()
    ms = do_bench(step, warmup=5, rep=50, return_mode="median")
    per = device_kernels(step, lambda out: torch.cuda.synchronize(), calls=5)
    total = sum(us for _, us in per.values())
    print(f"\n{name}: step {ms * 1e3:.1f} us, device {total:.1f} us in {sum(c for c, _ in per.values()):.0f} kernels")
    for k, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"    {us:8.1f} us  x{c:<4.0f} {k[:110]}")
