"""Session 45's persistent Gluon forward (its .patch, in the tree since session 46: K/V and Q by TMA
through 4-D descriptors over all heads, made once a program; the next item's Q and first K/V tiles
loaded under the last one's PV and epilogue; items dealt round by round, reversed every other round)
against the per-item grid (plans.HOPPER_PERSISTENT = False) and cuDNN (SDPA's backend): o and lse
bit for bit at odd shapes with every option it takes (and ato_jax's o bit for bit torch's), then
forward times. do_bench medians, best of 3 alternating rounds. Not a test. Results: flash_gluon.txt
29b (a wrong run: the op's plan cache held the persistent plan for both) and 30. On the GPU machine:
    source benchmarks/tools/gpu_env.sh
    timeout 300 python benchmarks/experiments/2026-11-28_flash_persistent_tma.py [--no-bits] [--no-jax] [--rule]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import ato_torch
from ato_core.ops import OPS
from ato_core.ops.flash_attention import plans

sys.path.insert(0, "benchmarks/tools")
from ab import launched  # noqa: E402

RULE = plans.PERSISTENT_MAX_TILES
# --rule: shapes around plans.PERSISTENT_MAX_TILES (mean key tiles an item: 64, 128, 32.5, 48.75, 64.5, 16.5)
RULE_SHAPES = [(2, 32, 32, 8192, dict()), (1, 32, 32, 16384, dict()), (2, 32, 32, 8192, dict(causal=True)),
               (1, 16, 4, 16384, dict(causal=True, window_size=(8192, 0))), (1, 32, 8, 16384, dict(causal=True)),
               (4, 32, 8, 4096, dict(causal=True))]


def persistent(on):
    """The persistent forward at every shape (on), or one item a program."""
    plans.HOPPER_PERSISTENT = on
    plans.PERSISTENT_MAX_TILES = float("inf") if on else RULE
    plans.forward_plan.cache_clear()
    OPS["flash_attention"].cached_forward.cache_clear()  # the op's own plan cache too


def rand(*shape, g):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)


def bits():
    g = torch.Generator(device="cuda").manual_seed(0)
    B = 2
    cases = [
        ("causal window GQA 1000x1500", (B, 8, 2, 1000, 1500), dict(causal=True, window_size=(300, 0))),
        ("full GQA 777x300", (B, 8, 2, 777, 300), dict()),
        ("window both sides 700x700", (B, 4, 4, 700, 700), dict(window_size=(100, 50))),
        ("softcap ALiBi [B,Hq] causal", (B, 8, 2, 1000, 1000), dict(causal=True, softcap=30.0, alibi="bh")),
        ("q_lengths causal", (B, 4, 2, 900, 1100), dict(causal=True, q_lengths=True)),
        ("segments causal", (B, 4, 2, 1024, 1024), dict(causal=True, segments=True)),
        ("bnhd full", (B, 4, 2, 513, 700), dict(layout="bnhd")),
        ("1x1", (3, 2, 2, 1, 1), dict(causal=True)),
        ("B16 H16 N1024 causal", (16, 16, 16, 1024, 1024), dict(causal=True)),
    ]
    ok = True
    for name, (b, hq, hkv, nq, nk, ), kw in cases:
        kw = dict(kw)
        bnhd = kw.get("layout") == "bnhd"
        q = rand(b, nq, hq, 128, g=g) if bnhd else rand(b, hq, nq, 128, g=g)
        k, v = ((rand(b, nk, hkv, 128, g=g) if bnhd else rand(b, hkv, nk, 128, g=g)) for _ in range(2))
        if kw.pop("alibi", None):
            kw["alibi_slopes"] = torch.rand(b, hq, device="cuda")
        if kw.pop("q_lengths", None):
            kw["q_lengths"] = torch.tensor([nq - 333, nq][:b], device="cuda", dtype=torch.int32)
        if kw.pop("segments", None):
            kw["segment_ids"] = (torch.arange(nq, device="cuda") * 5 // nq).expand(b, nq).to(torch.int32).contiguous()
        outs = {}
        for on in (True, False):
            persistent(on)
            o, lse = ato_torch.flash_attention(q, k, v, return_lse=True, **kw)
            torch.cuda.synchronize()
            outs[on] = (o, lse)
        same = torch.equal(outs[True][0], outs[False][0]) and torch.equal(outs[True][1], outs[False][1])
        ok &= same
        print(f"  {name:32s} o, lse persistent == one-item grid: {same}"
              + ("" if same else f" max |do| {float((outs[True][0].float() - outs[False][0].float()).abs().max()):.3g}"),
              flush=True)
    return ok


def jax_bits():
    import jax.numpy as jnp
    import numpy as np

    import ato_jax
    persistent(True)
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = rand(2, 8, 1000, 128, g=g), rand(2, 2, 1500, 128, g=g), rand(2, 2, 1500, 128, g=g)
    o_t = ato_torch.flash_attention(q, k, v, causal=True, window_size=(300, 0)).float().cpu().numpy()
    qj, kj, vj = (jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16) for x in (q, k, v))
    o_j = np.asarray(ato_jax.flash_attention(qj, kj, vj, causal=True, window_size=(300, 0)).astype(jnp.float32))
    same = np.array_equal(o_t, o_j)
    print(f"  ato_jax o == ato_torch o (persistent, causal window GQA): {same}", flush=True)
    return same


def timings(rule=False):
    shapes = RULE_SHAPES if rule else [(4, 32, 32, 4096, dict()), (4, 32, 32, 4096, dict(causal=True)), (1, 32, 32, 16384, dict(causal=True)),
              (1, 32, 32, 16384, dict(causal=True, window_size=(4096, 0))), (2, 32, 8, 8192, dict(causal=True)),
              (16, 16, 16, 1024, dict(causal=True)), (8, 16, 16, 2048, dict()),
              (4, 32, 32, 4096, dict(causal=True, softcap=30.0))]
    for B, Hq, Hkv, N, kw in shapes:
        g = torch.Generator(device="cuda").manual_seed(N)
        q = rand(B, Hq, N, 128, g=g)
        k, v = rand(B, Hkv, N, 128, g=g), rand(B, Hkv, N, 128, g=g)
        causal = kw.get("causal", False)
        runs = {"persistent": lambda: ato_torch.flash_attention(q, k, v, **kw),
                "one-item grid": lambda: ato_torch.flash_attention(q, k, v, **kw)}
        if set(kw) <= {"causal"}:
            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
            runs["SDPA cuDNN"] = sdpa
        for on in (True, False):
            persistent(on)
            print(f"    launches with HOPPER_PERSISTENT={on}: {launched(runs['persistent'], 'fa_fwd')}", flush=True)
        t = {n: [] for n in runs}
        for _ in range(3):
            for n, f in runs.items():
                if n != "SDPA cuDNN":
                    persistent(n == "persistent")
                t[n].append(do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3)
        best = {n: min(v) for n, v in t.items()}
        desc = " ".join(f"{k}={v}" for k, v in kw.items())
        line = f"  B{B} Hq{Hq} Hkv{Hkv} N{N} {desc or 'full'}: " + ", ".join(f"{n} {b:8.1f}" for n, b in best.items())
        line += f" us; persistent / one-item {best['persistent'] / best['one-item grid']:.3f}"
        if "SDPA cuDNN" in best:
            line += (f", / cuDNN {best['persistent'] / best['SDPA cuDNN']:.3f}"
                     f" (one-item {best['one-item grid'] / best['SDPA cuDNN']:.3f})")
        print(line, flush=True)
    plans.HOPPER_PERSISTENT, plans.PERSISTENT_MAX_TILES = True, RULE


if __name__ == "__main__":
    print(f"GPU {torch.cuda.get_device_name()}; bf16 D128, the Gluon forward", flush=True)
    if "--no-bits" not in sys.argv:
        print("bits:", bits(), flush=True)
    if "--no-jax" not in sys.argv:
        print("jax:", jax_bits(), flush=True)
    timings("--rule" in sys.argv)
