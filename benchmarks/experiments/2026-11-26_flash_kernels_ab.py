"""A/B of two trees of the flash kernels (argv[1] old, argv[2] new; the forms each run tried
are in the results file), imported into one process, alternating rounds
(benchmarks/tools/ab.py): forward and forward+backward, causal and full, D128 (B4 H32 N4096)
and D64 (B16 H16 N1024), bf16, do_bench medians; o and the gradients compared bit for bit;
each tree's kernels' registers and spills as loaded (kernel_resources).

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python3 benchmarks/experiments/2026-11-26_flash_kernels_ab.py .ab_old .
"""
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
from ab import alternate, load  # noqa: E402

SHAPES = [(4, 32, 4096, 128), (16, 16, 1024, 64)]


def inputs(shape):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    return [t.detach().requires_grad_() for t in (q, k, v)], do


def fwd(mod, leaves, causal):
    q, k, v = (t.detach() for t in leaves)
    return lambda: mod.flash_attention(q, k, v, causal=causal)


def fwd_bwd(mod, leaves, do, causal):
    def run():
        for t in leaves:
            t.grad = None
        mod.flash_attention(*leaves, causal=causal).backward(do)
    return run


def results(mod, leaves, do, causal):
    for t in leaves:
        t.grad = None
    o = mod.flash_attention(*leaves, causal=causal)
    o.backward(do)
    return [o.detach().clone()] + [t.grad.clone() for t in leaves]


trees = sys.argv[1:3]
mods, outs, resources = {}, {}, {}
data = {shape: inputs(shape) for shape in SHAPES}
for tag, path in zip(("old", "new"), trees):
    mods[tag] = load(path)
    from kernel_resources import report  # noqa: E402  (reads the tree loaded now)
    for shape, (leaves, do) in data.items():
        for causal in (True, False):
            outs[(tag, shape, causal)] = results(mods[tag], leaves, do, causal)
    torch.cuda.synchronize()
    resources[tag] = report()
    del sys.modules["kernel_resources"]

fns = {}
for shape, (leaves, do) in data.items():
    for causal in (True, False):
        for tag in ("old", "new"):
            fns[(shape, causal, "fwd", tag)] = fwd(mods[tag], leaves, causal)
            fns[(shape, causal, "fwd+bwd", tag)] = fwd_bwd(mods[tag], leaves, do, causal)
res = alternate(fns, 4, lambda f: do_bench(f, warmup=50, rep=300, return_mode="median"))
print(f"GPU {torch.cuda.get_device_name()}; old = {trees[0]}, new = {trees[1]}; bf16; do_bench medians (us), "
      f"4 alternating rounds")
for shape in SHAPES:
    B, H, N, D = shape
    for causal in (True, False):
        same = all(torch.equal(a, b) for a, b in zip(outs[("old", shape, causal)], outs[("new", shape, causal)]))
        for mode in ("fwd", "fwd+bwd"):
            o, n = (statistics.median(res[(shape, causal, mode, t)]) * 1e3 for t in ("old", "new"))
            print(f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full':6s} {mode:8s} old {o:8.1f}  new {n:8.1f}  "
                  f"new/old {n / o:.3f}  o, dq, dk, dv bitwise equal: {same}")
for tag in ("old", "new"):
    print(f"\n{tag} kernels:\n{resources[tag]}")
