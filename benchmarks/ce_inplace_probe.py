"""Probe (not a test): the cross-entropy forward kernel with the gradient written to a new
buffer vs over the logits (Liger's way), and loss-only, T8192 V128256 bf16."""
import torch
from triton.testing import do_bench

from ato_core.kernels.cross_entropy import ce_fwd_kernel

T, V = 8192, 128256
g = torch.Generator(device="cuda").manual_seed(0)
logits = torch.randn(T, V, device="cuda", dtype=torch.bfloat16, generator=g)
tgt = torch.randint(0, V, (T,), device="cuda", generator=g)
count = torch.tensor([float(T)], device="cuda")
loss = torch.empty(T, device="cuda")
other = torch.empty_like(logits)
sms = torch.cuda.get_device_properties(0).multi_processor_count
for grad, name in ((False, "loss only"), (True, "grad to new buffer"), (True, "grad over logits")):
    for pps in (1, 2):
        for block, warps in ((16384, 32), (8192, 16), (8192, 32), (4096, 16)):
            out = logits if name == "grad over logits" else other

            def run():
                ce_fwd_kernel[(min(T, sms * pps),)](logits, tgt, count, T, V, -100, 0.0, loss, out, BLOCK_V=block,
                                                    SMOOTH=False, MEAN=True, GRAD=grad, num_warps=warps)
            ms = do_bench(run, warmup=20, rep=200, return_mode="median")
            print(f"{name:20s} programs/SM {pps} BLOCK_V {block:5d} warps {warps:2d}: {ms * 1e3:7.1f} us", flush=True)
            logits.normal_(generator=g)
