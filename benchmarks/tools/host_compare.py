"""Host time per call of two versions of ato_torch imported into ONE process, in alternating
rounds (not a test): a host's speed varies by 20-40% from one process to the next, which hides
a few microseconds between versions timed in separate processes. On the GPU machine, after
``source benchmarks/tools/gpu_env.sh``, from the repository root (the new version):

    python benchmarks/tools/host_compare.py OLD_DIR [ROUNDS]

OLD_DIR holds the other version's ato_core, ato_torch, ato_jax and ato_cli (e.g. a copy of
another checkout's). Prints per op the median and min over rounds of each, tiny inputs."""
import os, statistics, sys, time
import torch

from benchmarks.tools import ab
root = os.getcwd()

def load(path):
    t, b = ab.load(path, "ato_torch", "ato_cli.bench")
    return t, b._torch_fwd_bwd

dev, bf = "cuda", torch.bfloat16
x = torch.randn(8, 256, device=dev, dtype=bf)
w, b = torch.randn(256, device=dev, dtype=bf), torch.randn(256, device=dev, dtype=bf)
q, k = torch.randn(1, 4, 16, 64, device=dev, dtype=bf), torch.randn(1, 2, 16, 64, device=dev, dtype=bf)
tgt = torch.randint(0, 256, (8,), device=dev)
dy = torch.randn_like(x)

def ops(ato, fb):
    return {
        "layer_norm fwd": lambda: ato.layer_norm(x, w, b),
        "layer_norm fwd+bwd": fb(lambda a, ww, bb: ato.layer_norm(a, ww, bb), (x, w, b), dy),
        "softmax fwd": lambda: ato.softmax(x),
        "swiglu fwd": lambda: ato.swiglu(x, x),
        "rope fwd": lambda: ato.rope(q, k, x[:8, :32].contiguous().repeat(2, 1), x[:8, :32].contiguous().repeat(2, 1)),
        "cross_entropy loss+grad": fb(lambda a: ato.cross_entropy(a, tgt), (x,)),
        "flash_attention fwd": lambda: ato.flash_attention(q, k, k),
    }

sets = {"old": ops(*load(os.path.abspath(sys.argv[1]))), "new": ops(*load(root))}
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20

def per_call(fn, calls=300):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(calls): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / calls * 1e6

for s in sets.values():
    for fn in s.values():
        for _ in range(30): fn()
res = {v: {n: [] for n in sets[v]} for v in sets}
for r in range(rounds):
    for v in (("old", "new") if r % 2 == 0 else ("new", "old")):
        for n, fn in sets[v].items():
            res[v][n].append(per_call(fn))
print(f"GPU {torch.cuda.get_device_name()}; host us per call, old ({sys.argv[1]}) and new ato_torch in one "
      f"process, {rounds} alternating rounds of 300 calls: median (min)")
for n in res["old"]:
    o, nw = res["old"][n], res["new"][n]
    print(f"{n:28s} old {statistics.median(o):7.1f} ({min(o):6.1f})  new {statistics.median(nw):7.1f} ({min(nw):6.1f})"
          f"  new/old {statistics.median(nw) / statistics.median(o):.3f}", flush=True)
