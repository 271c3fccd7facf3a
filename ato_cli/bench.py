"""``ato bench`` (GPU): ato_torch, ato_jax and the peers timed side by side in one process
on the same inputs. Prints a table (time, ratio to the named baseline, GB/s or TFLOP/s),
and writes <out>/<gpu>-<family>.{csv,png,txt} per op family. Never a pass/fail test.

Torch-side times: triton.testing.do_bench (CUDA events around back-to-back calls, median).
JAX-side times, likewise back to back: wall clock of 100 jitted calls issued without waiting,
then blocked until ready, divided by 100; the median of such rounds. The first call's dispatch
latency and the final synchronisation (several hundred us with XLA's custom calls, reported
in its own row) are spread over the 100 calls; do_bench's CUDA events exclude them entirely.
"""

from __future__ import annotations

import csv
import itertools
import os
import statistics
import sys
import time


def _median_jax(fn, *args, reps: int = 10, calls: int = 100) -> float:
    """Milliseconds per call of a jitted fn: median over ``reps`` rounds of ``calls``
    back-to-back calls blocked once at the end."""
    import jax

    jax.block_until_ready(fn(*args))
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t) / calls)
    return statistics.median(times) * 1e3


def _bench_torch(fn, quick: bool) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25 if quick else 100, rep=100 if quick else 500, return_mode="median")


def _bench_graph(fn, quick: bool) -> float:
    """_bench_torch of replaying a CUDA graph of one call of fn (a call already made, so nothing
    compiles in the capture): the call's time without its host time."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    ms = _bench_torch(graph.replay, quick)
    del graph
    return ms


def _bench_rounds(fns: dict, quick: bool, rounds: int = 3) -> dict:
    """{name: the best of ``rounds`` _bench_torch medians} of fns, measured in alternating rounds:
    the ratios between them then see one thermal and clock state, not the one each ran in."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_bench_torch(fn, quick))
    return {name: min(ts) for name, ts in times.items()}


def _device_ms(per: dict) -> float:
    """Milliseconds of device time per call: the sum over device_kernels' result ``per``."""
    return sum(us for _, us in per.values()) / 1e3


def device_kernels(fn, sync, calls: int = 20) -> dict:
    """{kernel name: (launches per call, device us per call)} of ``calls`` calls of fn, from
    torch.profiler (CUPTI, which also sees the kernels XLA launches); ``sync(out)`` waits for
    the last call's result. One warm-up call first. Device time only: host time is not in it."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    sync(fn())
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            out = fn()
        sync(out)
    acc = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            acc[ev.name][0] += 1
            acc[ev.name][1] += ev.device_time
    return {n: (c / calls, t / calls) for n, (c, t) in acc.items()}


def to_jax_bf16(t):
    """A torch tensor's values as a bf16 JAX array (through the host): the JAX rows' inputs."""
    import jax.numpy as jnp

    return jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16)


def liger(name):
    """Liger-Kernel's ``module:attribute``, or None where it cannot be imported (the peer's
    rows are then left out)."""
    import importlib

    try:
        mod, attr = name.rsplit(":", 1)
        return getattr(importlib.import_module(mod), attr)
    except Exception:
        return None


def liger_rope_args(q, k, cos, sin):
    """Liger's rope inputs for ato's (q, k [B, H, N, D]; cos, sin [N, D/2]): q and k laid out
    [B, N, H, D] in memory (its kernel's layout; the same [B, H, N, D] view), cos and sin
    at full width D."""
    import torch

    qb, kb = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k))
    return qb, kb, torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


# The transformer ops' math in plain JAX (fp32 inside, the input's dtype out): the peers that
# jax.jit compiles with XLA, for the bench table and benchmarks/experiments/2026-11-21_jax_gap.py.
def xla_layer_norm(a, w, b, eps=1e-5):
    import jax
    import jax.numpy as jnp

    a32 = a.astype(jnp.float32)
    mu = a32.mean(-1, keepdims=True)
    var = ((a32 - mu) ** 2).mean(-1, keepdims=True)
    return ((a32 - mu) * jax.lax.rsqrt(var + eps) * w + b).astype(a.dtype)


def xla_rms_norm(a, w, eps=1e-6):
    import jax
    import jax.numpy as jnp

    a32 = a.astype(jnp.float32)
    return (a32 * jax.lax.rsqrt((a32 * a32).mean(-1, keepdims=True) + eps) * w).astype(a.dtype)


def xla_softmax(a):
    import jax
    import jax.numpy as jnp

    return jax.nn.softmax(a.astype(jnp.float32), -1).astype(a.dtype)


def xla_swiglu(a, c):
    import jax
    import jax.numpy as jnp

    return (jax.nn.silu(a.astype(jnp.float32)) * c).astype(a.dtype)


def xla_cross_entropy(a, t):
    """Mean cross-entropy of logits a [T, V] against targets t [T], in fp32."""
    import jax
    import jax.numpy as jnp

    a32 = a.astype(jnp.float32)
    lse = jax.nn.logsumexp(a32, -1)
    return jnp.mean(lse - jnp.take_along_axis(a32, t[:, None], -1)[:, 0])


def xla_rope(q, k, cos, sin):
    """Half rotation (LLaMA) of q and k [B, H, N, D] by cos, sin [N, D/2]."""
    import jax.numpy as jnp

    c, s = cos.astype(jnp.float32), sin.astype(jnp.float32)

    def rot(t):
        half = t.shape[-1] // 2
        t1, t2 = t[..., :half].astype(jnp.float32), t[..., half:].astype(jnp.float32)
        return jnp.concatenate([t1 * c - t2 * s, t2 * c + t1 * s], -1).astype(t.dtype)

    return rot(q), rot(k)


def _torch_fwd_bwd(fn, inputs, cotangent=None):
    """A closure running fn on fresh leaves of ``inputs`` and its backward with ``cotangent``
    (None for a scalar output)."""
    leaves = [t.detach().requires_grad_() for t in inputs]

    def run():
        for t in leaves:
            t.grad = None
        fn(*leaves).backward(cotangent)

    return run


def linear_attention_rows(quick: bool):
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import ato_jax
    import ato_torch

    B, N, H, D = 8, 4096, 16, 64
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    do = torch.randn_like(v)
    rows = []
    shape = f"B{B} N{N} H{H} D{D} bf16"

    # memory-copy ceiling, measured in this run
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = _bench_torch(lambda: dst.copy_(src), quick)
    copy_gbs = 2 * src.numel() / ms / 1e6
    rows.append(("copy 1 GiB", "torch", "", ms, None, f"{copy_gbs:.0f} GB/s"))

    def fwd_bwd(fn):
        return _torch_fwd_bwd(fn, (q, k, v), do)

    ato = lambda a, b, c, causal: ato_torch.linear_attention(a, b, c, causal=causal, feature_map="elu")  # noqa
    peers = {}
    try:
        from fla.ops.linear_attn import chunk_linear_attn, fused_chunk_linear_attn

        # fla: [B, T, H, D] layout, ELU+1 applied outside (not timed), scale 1 and its own normaliser.
        qf, kf = ((F.elu(t.float()) + 1).to(t.dtype).transpose(1, 2).contiguous() for t in (q, k))
        vt = v.transpose(1, 2).contiguous()
        dot = do.transpose(1, 2).contiguous()
        for name, fn in (("fla fused_chunk", fused_chunk_linear_attn), ("fla chunk", chunk_linear_attn)):
            def f_fwd(fn=fn):
                return fn(qf, kf, vt, scale=1.0, normalize=True)[0]

            def f_fb(fn=fn):
                leaves = [t.detach().requires_grad_() for t in (qf, kf, vt)]
                fn(*leaves, scale=1.0, normalize=True)[0].backward(dot)

            peers[name] = (f_fwd, f_fb)
    except Exception as exc:  # report, don't hide
        rows.append(("fla unavailable", type(exc).__name__, str(exc)[:60], None, None, ""))

    def torch_plain(a, b, c):
        fa, fb = F.elu(a) + 1, F.elu(b) + 1
        A = (fa @ fb.transpose(-1, -2)).tril()
        return (A @ c) / (A.sum(-1, keepdim=True) + 1e-6)

    results = {}
    results["ato_torch fwd"] = _bench_torch(lambda: ato(q, k, v, True), quick)
    results["ato_torch fwd+bwd"] = _bench_torch(fwd_bwd(lambda a, b, c: ato(a, b, c, True)), quick)
    for name, (ff, fb) in peers.items():
        results[f"{name} fwd"] = _bench_torch(ff, quick)
        results[f"{name} fwd+bwd"] = _bench_torch(fb, quick)
    results["torch plain fwd"] = _bench_torch(lambda: torch_plain(q, k, v), quick)

    qj, kj, vj, doj = (jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) for t in (q, k, v, do))
    jf = jax.jit(lambda a, b, c: ato_jax.linear_attention(a, b, c, causal=True, feature_map="elu"))
    def j_fwd_bwd(a, b, c, d):  # the analogue of torch's o.backward(do): one VJP with the cotangent d
        _, vjp = jax.vjp(lambda x, y, z: ato_jax.linear_attention(x, y, z, causal=True, feature_map="elu"), a, b, c)
        return vjp(d)

    jfb = jax.jit(j_fwd_bwd)
    reps = 3 if quick else 10
    results["ato_jax fwd"] = _median_jax(jf, qj, kj, vj, reps=reps)
    results["ato_jax fwd+bwd"] = _median_jax(jfb, qj, kj, vj, doj, reps=reps)

    for mode in ("fwd", "fwd+bwd"):
        fastest_peer = min((results[f"{p} {mode}"] for p in peers), default=None)
        for name in [n for n in results if n.endswith(" " + mode)]:
            ms = results[name]
            ratio = ms / fastest_peer if fastest_peer else None
            rows.append((f"causal {name}", shape, "x fastest fla", ms, ratio, ""))
    blocked = _median_jax(jf, qj, kj, vj, reps=10 * reps, calls=1)
    rows.append(("causal ato_jax fwd, blocked every call", shape, "x back to back", blocked,
                 blocked / results["ato_jax fwd"], "host dispatch+sync latency"))
    jt = results["ato_jax fwd+bwd"] / results["ato_torch fwd+bwd"]
    rows.append(("causal ato_jax / ato_torch fwd+bwd", shape, "", None, jt, ""))
    rows.append(("causal ato_jax / ato_torch fwd", shape, "", None, results["ato_jax fwd"] / results["ato_torch fwd"], ""))

    # bidirectional: bytes of q, k, v, o at the copy ceiling
    ms = _bench_torch(lambda: ato(q, k, v, False), quick)
    gbs = 4 * q.numel() * 2 / ms / 1e6
    rows.append(("bidir ato_torch fwd", shape, "of copy GB/s", ms, gbs / copy_gbs, f"{gbs:.0f} GB/s"))
    jb = jax.jit(lambda a, b, c: ato_jax.linear_attention(a, b, c, causal=False, feature_map="elu"))
    ms = _median_jax(jb, qj, kj, vj, reps=reps)
    gbs = 4 * q.numel() * 2 / ms / 1e6
    rows.append(("bidir ato_jax fwd", shape, "of copy GB/s", ms, gbs / copy_gbs, f"{gbs:.0f} GB/s"))
    ms = _bench_torch(fwd_bwd(lambda a, b, c: ato(a, b, c, False)), quick)
    rows.append(("bidir ato_torch fwd+bwd", shape, "", ms, None, ""))
    return rows


def flash_attention_rows(quick: bool):
    """Causal and non-causal, bf16, at B4 H32 N4096 D128 and B4 H64 N4096 D64: ato_torch and
    ato_jax against SDPA's flash and cuDNN backends, jax.nn.dot_product_attention (cuDNN)
    and the Pallas GPU mha. TFLOP/s count 4*B*H*N^2*D forward (half that when causal) and
    3.5x that forward+backward (the FlashAttention convention: the backward is 2.5 forwards)."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import ato_jax
    import ato_torch

    rows = []
    reps = 3 if quick else 5
    for B, H, N, D in ((4, 32, 4096, 128), (4, 64, 4096, 64)):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        qj, kj, vj, doj = (jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) for t in (q, k, v, do))
        # [B, N, H, D] copies for the JAX peers (their layout)
        qb, kb, vb, dob = (jnp.transpose(t, (0, 2, 1, 3)) for t in (qj, kj, vj, doj))
        shape = f"B{B} H{H} N{N} D{D} bf16"
        for causal in (False, True):
            flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
            times = {}

            def torch_fb(fn):
                return _torch_fwd_bwd(fn, (q, k, v), do)

            ato = lambda a, b, c: ato_torch.flash_attention(a, b, c, causal=causal)  # noqa: E731
            times["ato_torch fwd"] = _bench_torch(lambda: ato(q, k, v), quick)
            times["ato_torch fwd+bwd"] = _bench_torch(torch_fb(ato), quick)
            for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
                def sdpa(a, b, c, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(a, b, c, is_causal=causal)
                try:
                    times[f"{name} fwd"] = _bench_torch(lambda: sdpa(q, k, v), quick)
                    times[f"{name} fwd+bwd"] = _bench_torch(torch_fb(sdpa), quick)
                except Exception as exc:  # report, don't hide
                    rows.append((f"{name} unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))

            def jax_pair(fwd, layout_bnhd):
                args = (qb, kb, vb) if layout_bnhd else (qj, kj, vj)
                cot = dob if layout_bnhd else doj

                def fb(a, b, c, d):
                    _, vjp = jax.vjp(fwd, a, b, c)
                    return vjp(d)
                return jax.jit(fwd), jax.jit(fb), args, cot

            peers_j = {"ato_jax": (lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=causal), False),
                       "jax cuDNN": (lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=causal,
                                                                                 implementation="cudnn"), True)}
            try:
                from jax.experimental.pallas.ops.gpu.attention import mha

                peers_j["Pallas mha"] = (lambda a, b, c: mha(a, b, c, None, sm_scale=1.0 / D ** 0.5, causal=causal), True)
            except Exception as exc:
                rows.append(("Pallas mha unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
            for name, (fn, bnhd) in peers_j.items():
                jf, jfb, args, cot = jax_pair(fn, bnhd)
                try:
                    times[f"{name} fwd"] = _median_jax(jf, *args, reps=reps, calls=20)
                    times[f"{name} fwd+bwd"] = _median_jax(jfb, *args, cot, reps=reps, calls=10)
                except Exception as exc:
                    rows.append((f"{name} unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
            tag = "causal" if causal else "full"
            for mode, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
                base = times.get(f"SDPA flash {mode}")
                for name in [n for n in times if n.endswith(" " + mode)]:
                    ms = times[name]
                    tflops = mult * flops / ms / 1e9
                    rows.append((f"{tag} {name}", shape, "x SDPA flash TFLOP/s", ms,
                                 (base / ms) if base else None, f"{tflops:.0f} TFLOP/s"))
            for mode in ("fwd", "fwd+bwd"):
                if f"ato_jax {mode}" in times:
                    rows.append((f"{tag} ato_jax / ato_torch {mode}", shape, "time ratio", None,
                                 times[f"ato_jax {mode}"] / times[f"ato_torch {mode}"], ""))
                    if f"Pallas mha {mode}" in times:
                        rows.append((f"{tag} ato_jax vs Pallas mha {mode}", shape, "x Pallas TFLOP/s", None,
                                     times[f"Pallas mha {mode}"] / times[f"ato_jax {mode}"], ""))
    return rows


# Issue 22's table: (B, Hq, Hkv, N, D, causal).
FLASH_SHAPES = ((4, 32, 32, 4096, 128, False), (4, 32, 32, 4096, 128, True), (16, 16, 16, 1024, 64, False),
                (16, 16, 16, 1024, 64, True), (1, 32, 32, 16384, 128, True), (2, 32, 8, 8192, 128, True))


def flash_shapes_rows(quick: bool):
    """Every shape of issue 22's table (D 128 and 64, causal and not, N 16384, GQA), bf16:
    ato_torch and ato_jax against SDPA's cuDNN backend and jax.nn.dot_product_attention's cuDNN
    (through [B, N, H, D] copies, its layout), forward and forward+backward; ratios are time over
    cuDNN's from the same framework. TFLOP/s as flash_attention_rows."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import ato_jax
    import ato_torch

    rows = []
    reps = 3 if quick else 5
    for B, Hq, Hkv, N, D, causal in FLASH_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(N)
        q, do = (torch.randn(B, Hq, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        shape = f"B{B} Hq{Hq} Hkv{Hkv} N{N} D{D} bf16 {'causal' if causal else 'full'}"
        flops = 4 * B * Hq * N * N * D * (0.5 if causal else 1.0)
        ato = lambda a, b, c: ato_torch.flash_attention(a, b, c, causal=causal)  # noqa: E731

        def cudnn(a, b, c):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=Hq != Hkv)

        t = {}
        for name, fn in (("ato_torch", ato), ("SDPA cuDNN", cudnn)):
            try:
                t[f"{name} fwd"] = _bench_torch(lambda fn=fn: fn(q, k, v), quick)
                t[f"{name} fwd+bwd"] = _bench_torch(_torch_fwd_bwd(fn, (q, k, v), do), quick)
            except Exception as exc:  # report, don't hide
                rows.append((f"{name} unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
        qj, kj, vj, doj = (jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16) for x in (q, k, v, do))
        jpeers = {"ato_jax": (lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=causal), (qj, kj, vj, doj)),
                  "jax cuDNN": (lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=causal,
                                                                            implementation="cudnn"),
                                tuple(jnp.transpose(x, (0, 2, 1, 3)) for x in (qj, kj, vj, doj)))}
        for name, (fn, args) in jpeers.items():
            try:
                def fb(a, b, c, d, fn=fn):
                    return jax.vjp(fn, a, b, c)[1](d)
                t[f"{name} fwd"] = _median_jax(jax.jit(fn), *args[:3], reps=reps, calls=10)
                t[f"{name} fwd+bwd"] = _median_jax(jax.jit(fb), *args, reps=reps, calls=5)
            except Exception as exc:
                rows.append((f"{name} unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
        for mode, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
            for name, peer in (("ato_torch", "SDPA cuDNN"), ("SDPA cuDNN", None), ("ato_jax", "jax cuDNN"),
                               ("jax cuDNN", None)):
                ms = t.get(f"{name} {mode}")
                if ms is None:
                    continue
                base = t.get(f"{peer} {mode}") if peer else None
                rows.append((f"{name} {mode}", shape, "x cuDNN time" if peer else "", ms, ms / base if base else None,
                             f"{mult * flops / ms / 1e9:.0f} TFLOP/s"))
        del q, k, v, do, qj, kj, vj, doj
    return rows


def window_tile_fraction(N: int, left: int, block_m: int, block_n: int) -> float:
    """Of the (query block, key block) tiles a causal forward visits, the fraction a causal
    window of ``left`` keys back visits (Nq = Nk = N; the kernels' key ranges)."""
    causal = window = 0
    for first in range(0, N, block_m):
        last = min(first + block_m, N) - 1
        end = last + 1
        causal += -(-end // block_n)
        start = max(first - left, 0) // block_n * block_n
        window += -(-(end - start) // block_n)
    return window / causal


def flash_options_rows(quick: bool):
    """flash_attention's options (issue 25), bf16 D128 (torch's times: best of alternating rounds,
    _bench_rounds). Sliding window 4096 over causal
    N 16384 (B1 H32): against causal time x the fraction of tiles the window visits, FlexAttention
    (compiled, sliding-window block mask) and cuDNN's local window (jax.nn.dot_product_attention).
    Each option's cost over plain causal at B4 H32 N4096: softcap, ALiBi, q/kv lengths (full
    length), segment ids (one segment; 8 equal documents), bnhd, a bias and a mask."""
    import jax
    import jax.numpy as jnp
    import torch

    import ato_jax
    import ato_torch
    from ato_core.ops.flash_attention import plans as fa_plans
    from ato_core.target import Target

    rows = []
    reps = 3 if quick else 5

    # sliding window
    B, H, N, D, W = 1, 32, 16384, 128, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    shape = f"B{B} H{H} N{N} D{D} bf16 window {W}"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = fa_plans.config(D, "bfloat16", Target(interpret=False, num_sms=sms)).fwd
    frac = window_tile_fraction(N, W, tiles.m, tiles.n)
    causal = lambda a, b, c: ato_torch.flash_attention(a, b, c, causal=True)  # noqa: E731
    win = lambda a, b, c: ato_torch.flash_attention(a, b, c, causal=True, window_size=(W, 0))  # noqa: E731
    fns = {"causal fwd": lambda: causal(q, k, v), "causal fwd+bwd": _torch_fwd_bwd(causal, (q, k, v), do),
           "ato_torch fwd": lambda: win(q, k, v), "ato_torch fwd+bwd": _torch_fwd_bwd(win, (q, k, v), do)}
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        mask = create_block_mask(lambda b, h, i, j: (j <= i) & (i - j <= W), None, None, N, N, device="cuda")
        flex = torch.compile(flex_attention)
        fx = lambda a, b, c: flex(a, b, c, block_mask=mask)  # noqa: E731
        fx(q, k, v)  # compiled here, so a failure is reported before the rounds
        fns.update({"FlexAttention fwd": lambda: fx(q, k, v),
                    "FlexAttention fwd+bwd": _torch_fwd_bwd(fx, (q, k, v), do)})
    except Exception as exc:  # report, don't hide
        rows.append(("FlexAttention unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
    t = _bench_rounds(fns, quick)
    qb, kb, vb, dob = (jnp.asarray(x.transpose(1, 2).float().cpu().numpy()).astype(jnp.bfloat16) for x in (q, k, v, do))
    jpeers = {"ato_jax": lambda a, b, c: ato_jax.flash_attention(a, b, c, causal=True, window_size=(W, 0),
                                                                   layout="bnhd"),
              "jax cuDNN": lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=True,
                                                                        local_window_size=(W, 0),
                                                                        implementation="cudnn")}
    for name, fn in jpeers.items():
        try:
            def jfb(a, b, c, d, fn=fn):
                return jax.vjp(fn, a, b, c)[1](d)
            t[f"{name} fwd"] = _median_jax(jax.jit(fn), qb, kb, vb, reps=reps, calls=20)
            t[f"{name} fwd+bwd"] = _median_jax(jax.jit(jfb), qb, kb, vb, dob, reps=reps, calls=10)
        except Exception as exc:
            rows.append((f"{name} window unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
    rows.append(("tiles visited, window / causal", shape, "fraction", None, frac, f"{tiles.m}x{tiles.n} tiles"))
    for mode in ("fwd", "fwd+bwd"):
        base = t[f"causal {mode}"] * frac
        rows.append((f"causal (no window) ato_torch {mode}", shape.replace(f" window {W}", ""), "", t[f"causal {mode}"],
                     None, ""))
        for name in ("ato_torch", "ato_jax", "FlexAttention", "jax cuDNN"):
            if f"{name} {mode}" in t:
                rows.append((f"window {name} {mode}", shape, "x causal x tiles", t[f"{name} {mode}"],
                             t[f"{name} {mode}"] / base, ""))
    del q, k, v, do

    # options at one shape: each against plain causal in the same run
    B, H, N, D = 4, 32, 4096, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    shape = f"B{B} H{H} N{N} D{D} bf16 causal"
    full = torch.full((B,), N, device="cuda", dtype=torch.int32)
    seg = torch.zeros((B, N), device="cuda", dtype=torch.int32)
    docs = (torch.arange(N, device="cuda", dtype=torch.int32) * 8 // N).expand(B, N).contiguous()
    slopes = (2.0 ** (-8.0 * torch.arange(1, H + 1, device="cuda") / H)).float()
    qn, kn, vn, don = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
    variants = {
        "plain": ((q, k, v), do, {}),
        "softcap 50": ((q, k, v), do, {"softcap": 50.0}),
        "alibi": ((q, k, v), do, {"alibi_slopes": slopes}),
        "q/kv lengths": ((q, k, v), do, {"q_lengths": full, "kv_lengths": full}),
        "segment ids": ((q, k, v), do, {"segment_ids": seg}),
        "segment ids, 8 documents": ((q, k, v), do, {"segment_ids": docs}),
        "bnhd": ((qn, kn, vn), don, {"layout": "bnhd"}),
        "bias [H, N, N]": ((q, k, v), do, {"bias": torch.randn(H, N, N, device="cuda", dtype=torch.bfloat16,
                                                               generator=g)}),
        "mask [N, N] all true": ((q, k, v), do, {"mask": torch.ones(N, N, device="cuda", dtype=torch.bool)}),
        "dropout 0.1": ((q, k, v), do, {"dropout_p": 0.1, "seed": torch.tensor(1, device="cuda")}),
    }
    fns = {}
    for name, (inputs, cot, kw) in variants.items():
        fn = lambda a, b, c, kw=kw: ato_torch.flash_attention(a, b, c, causal=True, **kw)  # noqa: E731
        fns[(name, 0)] = lambda fn=fn, inputs=inputs: fn(*inputs)
        fns[(name, 1)] = _torch_fwd_bwd(fn, inputs, cot)
    best = _bench_rounds(fns, quick)
    t = {name: (best[(name, 0)], best[(name, 1)]) for name in variants}
    for name, (f, b) in t.items():
        rows.append((f"{name} ato_torch fwd", shape, "x plain", f, f / t["plain"][0], ""))
        rows.append((f"{name} ato_torch fwd+bwd", shape, "x plain", b, b / t["plain"][1], ""))
    rows += _sdpa_dropout_rows((q, k, v), do, shape, quick)
    return rows


def _sdpa_dropout_rows(inputs, do, shape, quick):
    """torch's SDPA (its FlashAttention 2 backend) causal, with dropout 0.1 against without: the
    cost of dropout in a peer, beside ato's."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    t = {}
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for p in (0.0, 0.1):
                fn = lambda a, b, c, p=p: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                    a, b, c, is_causal=True, dropout_p=p)
                t[p] = (_bench_torch(lambda fn=fn: fn(*inputs), quick),
                        _bench_torch(_torch_fwd_bwd(fn, inputs, do), quick))
    except Exception as exc:  # report, don't hide
        return [("torch SDPA flash unavailable", shape, type(exc).__name__, None, None, str(exc)[:60])]
    return [(f"torch SDPA flash {name} {mode}", shape, "x SDPA flash plain", t[p][i], t[p][i] / t[0.0][i], "")
            for name, p in (("plain", 0.0), ("dropout 0.1", 0.1)) for i, mode in enumerate(("fwd", "fwd+bwd"))]


# issue 25's packed documents: 8 of mixed lengths (none a multiple of a tile), 32768 tokens
VARLEN_DOCS = (9000, 7000, 5500, 4000, 3000, 2268, 1500, 500)


def flash_varlen_rows(quick: bool):
    """flash_attention_varlen, 8 documents of mixed lengths packed into 32768 tokens (H32 D128
    bf16, causal): against the same documents run one by one as dense flash_attention calls
    (their times summed), FlexAttention (compiled, a causal document block mask over the packed
    sequence) and ato_jax's varlen."""
    import jax
    import jax.numpy as jnp
    import torch

    import ato_jax
    import ato_torch

    rows = []
    reps = 3 if quick else 5
    H, D, docs = 32, 128, VARLEN_DOCS
    T = sum(docs)
    shape = f"{len(docs)} docs, T{T} H{H} D{D} bf16 causal"
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    cu = torch.tensor([0, *itertools.accumulate(docs)], device="cuda", dtype=torch.int32)
    L = max(docs)
    varlen = lambda a, b, c: ato_torch.flash_attention_varlen(a, b, c, cu, cu, L, L, causal=True)  # noqa: E731
    t = {"ato_torch fwd": _bench_torch(lambda: varlen(q, k, v), quick),
         "ato_torch fwd+bwd": _bench_torch(_torch_fwd_bwd(varlen, (q, k, v), do), quick)}
    dense = lambda a, b, c: ato_torch.flash_attention(a, b, c, causal=True, layout="bnhd")  # noqa: E731
    per_doc = {"fwd": 0.0, "fwd+bwd": 0.0}
    for lo, n in zip(cu.tolist(), docs):
        one = [x[lo:lo + n][None] for x in (q, k, v, do)]
        per_doc["fwd"] += _bench_torch(lambda one=one: dense(*one[:3]), quick)
        per_doc["fwd+bwd"] += _bench_torch(_torch_fwd_bwd(dense, one[:3], one[3]), quick)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        doc = torch.repeat_interleave(torch.arange(len(docs), device="cuda"), torch.tensor(docs, device="cuda"))
        mask = create_block_mask(lambda b, h, i, j: (doc[i] == doc[j]) & (j <= i), None, None, T, T, device="cuda")
        flex = torch.compile(flex_attention)
        qt, kt, vt, dot = (x.transpose(0, 1)[None].contiguous() for x in (q, k, v, do))  # [1, H, T, D]
        fx = lambda a, b, c: flex(a, b, c, block_mask=mask)  # noqa: E731
        t["FlexAttention fwd"] = _bench_torch(lambda: fx(qt, kt, vt), quick)
        t["FlexAttention fwd+bwd"] = _bench_torch(_torch_fwd_bwd(fx, (qt, kt, vt), dot), quick)
    except Exception as exc:  # report, don't hide
        rows.append(("FlexAttention unavailable", shape, type(exc).__name__, None, None, str(exc)[:60]))
    qj, kj, vj, doj = (jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16) for x in (q, k, v, do))
    cuj = jnp.asarray(cu.cpu().numpy())
    jfn = lambda a, b, c: ato_jax.flash_attention_varlen(a, b, c, cuj, cuj, L, L, causal=True)  # noqa: E731

    def jfb(a, b, c, d):
        return jax.vjp(jfn, a, b, c)[1](d)
    t["ato_jax fwd"] = _median_jax(jax.jit(jfn), qj, kj, vj, reps=reps, calls=20)
    t["ato_jax fwd+bwd"] = _median_jax(jax.jit(jfb), qj, kj, vj, doj, reps=reps, calls=10)
    for mode in ("fwd", "fwd+bwd"):
        base = per_doc[mode]
        rows.append((f"dense per document, summed {mode}", shape, "x per-doc sum", base, 1.0,
                     "ato_torch flash_attention, one call per document"))
        for name in ("ato_torch", "ato_jax", "FlexAttention"):
            if f"{name} {mode}" in t:
                rows.append((f"varlen {name} {mode}", shape, "x per-doc sum", t[f"{name} {mode}"],
                             t[f"{name} {mode}"] / base, ""))
        if f"FlexAttention {mode}" in t:
            rows.append((f"varlen ato_torch / FlexAttention {mode}", shape, "time ratio", None,
                         t[f"ato_torch {mode}"] / t[f"FlexAttention {mode}"], ""))
    return rows


def _copy_gbs(quick: bool) -> float:
    import torch

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / _bench_torch(lambda: dst.copy_(src), quick) / 1e6


def transformer_ops_rows(quick: bool):
    """Forward of layer_norm, rms_norm, softmax (16384 x 4096), swiglu (16384 x 7168) and rope
    (B8 N4096 Hq32 Hkv8 D128), bf16: GB/s of the bytes each must move (inputs read once,
    outputs written once) against the copy bandwidth measured here, and time against the
    fastest peer (torch eager, torch.compile, Liger-Kernel; JAX: the same math under jax.jit).
    layer_norm forward+backward and cross_entropy loss+gradient (T8192 V128256) by time."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import ato_jax
    import ato_torch

    rows = []
    copy = _copy_gbs(quick)
    rows.append(("copy 1 GiB", "torch", "", 2 * (1 << 30) / copy / 1e6, None, f"{copy:.0f} GB/s"))
    reps = 3 if quick else 5
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device=dev, dtype=bf, generator=g)  # noqa: E731
    to_j = to_jax_bf16

    def compiled(fn):
        try:
            return torch.compile(fn)
        except Exception:
            return None

    def emit(op, shape, nbytes, torch_fns, jax_fns):
        """Times each callable; rows with GB/s, the ratio to copy bandwidth (ato) and to the
        fastest peer."""
        times = {}
        for name, fn in torch_fns.items():
            if fn is None:
                continue
            try:
                times[name] = _bench_torch(fn, quick)
            except Exception as exc:
                rows.append((f"{op} {name} failed", shape, type(exc).__name__, None, None, str(exc)[:50]))
        for name, (fn, args) in jax_fns.items():
            try:
                times[name] = _median_jax(jax.jit(fn), *args, reps=reps, calls=50)
            except Exception as exc:
                rows.append((f"{op} {name} failed", shape, type(exc).__name__, None, None, str(exc)[:50]))
        peers = [t for n, t in times.items() if not n.startswith("ato")]
        fastest = min(peers) if peers else None
        for name, ms in times.items():
            gbs = nbytes / ms / 1e6 if nbytes else None
            rate = f"{gbs:.0f} GB/s = {gbs / copy:.2f} of copy" if gbs else ""
            rows.append((f"{op} {name}", shape, "x fastest peer", ms, ms / fastest if fastest else None, rate))
        if "ato_jax" in times and "jax jit (XLA)" in times:
            rows.append((f"{op} ato_jax / jax jit (XLA)", shape, "time ratio", None,
                         times["ato_jax"] / times["jax jit (XLA)"], ""))

    # layer_norm / rms_norm
    M, N = 16384, 4096
    x, w, b, dy = rnd(M, N), rnd(N), rnd(N), rnd(M, N)
    xj, wj, bj = to_j(x), to_j(w), to_j(b)

    LigerLN = liger("liger_kernel.transformers.layer_norm:LigerLayerNorm")
    LigerRMS = liger("liger_kernel.transformers.rms_norm:LigerRMSNorm")
    lig_ln = LigerLN(N, eps=1e-5).to(dev, bf) if LigerLN else None
    lig_rms = LigerRMS(N, eps=1e-6).to(dev, bf) if LigerRMS else None
    eager_ln = lambda a: F.layer_norm(a, (N,), w, b, 1e-5)  # noqa: E731
    eager_rms = lambda a: F.rms_norm(a, (N,), w, 1e-6)  # noqa: E731
    c_ln, c_rms = compiled(eager_ln), compiled(eager_rms)
    nb = 2 * M * N * 2
    shape = f"{M}x{N} bf16"
    emit("layer_norm fwd", shape, nb, {
        "ato_torch": lambda: ato_torch.layer_norm(x, w, b), "torch eager": lambda: eager_ln(x),
        "torch.compile": (lambda: c_ln(x)) if c_ln else None, "Liger": (lambda: lig_ln(x)) if lig_ln else None},
        {"ato_jax": (lambda a, ww, bb: ato_jax.layer_norm(a, ww, bb), (xj, wj, bj)), "jax jit (XLA)": (xla_layer_norm, (xj, wj, bj))})
    emit("rms_norm fwd", shape, nb, {
        "ato_torch": lambda: ato_torch.rms_norm(x, w), "torch eager": lambda: eager_rms(x),
        "torch.compile": (lambda: c_rms(x)) if c_rms else None, "Liger": (lambda: lig_rms(x)) if lig_rms else None},
        {"ato_jax": (lambda a, ww: ato_jax.rms_norm(a, ww), (xj, wj)), "jax jit (XLA)": (xla_rms_norm, (xj, wj))})

    def fb(fn, *inputs):
        return _torch_fwd_bwd(fn, inputs, dy)

    ln_fns = {"ato_torch": fb(lambda a, ww, bb: ato_torch.layer_norm(a, ww, bb), x, w, b),
              "torch eager": fb(lambda a, ww, bb: F.layer_norm(a, (N,), ww, bb, 1e-5), x, w, b)}
    if LigerLN:
        lf = liger("liger_kernel.ops.layer_norm:LigerLayerNormFunction")
        if lf:
            ln_fns["Liger"] = fb(lambda a, ww, bb: lf.apply(a, ww, bb, 1e-5), x, w, b)
    c_fb = compiled(lambda a, ww, bb: F.layer_norm(a, (N,), ww, bb, 1e-5))
    if c_fb:
        ln_fns["torch.compile"] = fb(c_fb, x, w, b)
    dyj = to_j(dy)

    def vjp_of(f):
        def run(a, ww, bb, d):
            _, back = jax.vjp(f, a, ww, bb)
            return back(d)
        return run
    emit("layer_norm fwd+bwd", shape, None, ln_fns,
         {"ato_jax": (vjp_of(lambda a, ww, bb: ato_jax.layer_norm(a, ww, bb)), (xj, wj, bj, dyj)),
          "jax jit (XLA)": (vjp_of(xla_layer_norm), (xj, wj, bj, dyj))})

    # softmax
    LigerSM = liger("liger_kernel.ops.softmax:LigerSoftmaxFunction")
    c_sm = compiled(lambda a: torch.softmax(a, -1))
    emit("softmax fwd", shape, nb, {
        "ato_torch": lambda: ato_torch.softmax(x), "torch eager": lambda: torch.softmax(x, -1),
        "torch.compile": (lambda: c_sm(x)) if c_sm else None, "Liger": (lambda: LigerSM.apply(x)) if LigerSM else None},
        {"ato_jax": (lambda a: ato_jax.softmax(a), (xj,)),
         "jax jit (XLA)": (xla_softmax, (xj,))})
    temp, tempj = torch.tensor(0.7, device=dev), jax.device_put(jnp.float32(0.7))
    emit("softmax fwd, temperature", shape, nb, {
        "ato_torch": lambda: ato_torch.softmax(x, temperature=0.7),
        "ato_torch, 0-d temperature": lambda: ato_torch.softmax(x, temperature=temp)},
        {"ato_jax": (lambda a: ato_jax.softmax(a, temperature=0.7), (xj,)),
         "ato_jax, traced temperature": (lambda a, t: ato_jax.softmax(a, temperature=t), (xj, tempj))})
    del x, dy, xj, dyj

    # swiglu
    Ms, Ns = 16384, 7168
    ga, up = rnd(Ms, Ns), rnd(Ms, Ns)
    gj, uj = to_j(ga), to_j(up)
    LigerSw = liger("liger_kernel.ops.swiglu:LigerSiLUMulFunction")
    c_sw = compiled(lambda a, c: F.silu(a) * c)
    emit("swiglu fwd", f"{Ms}x{Ns} bf16", 3 * Ms * Ns * 2, {
        "ato_torch": lambda: ato_torch.swiglu(ga, up), "torch eager": lambda: F.silu(ga) * up,
        "torch.compile": (lambda: c_sw(ga, up)) if c_sw else None,
        "Liger": (lambda: LigerSw.apply(ga, up)) if LigerSw else None},
        {"ato_jax": (lambda a, c: ato_jax.swiglu(a, c), (gj, uj)),
         "jax jit (XLA)": (xla_swiglu, (gj, uj))})
    del ga, up, gj, uj

    # rope
    B, Nr, Hq, Hkv, D = 8, 4096, 32, 8, 128
    q, k = rnd(B, Hq, Nr, D), rnd(B, Hkv, Nr, D)
    ang = torch.arange(Nr, device=dev)[:, None] * (10000.0 ** (-torch.arange(D // 2, device=dev) / (D // 2)))[None]
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    qj, kj, cj, sj = to_j(q), to_j(k), to_j(cos), to_j(sin)

    def rot_half(t, c, s):
        c2, s2 = torch.cat([c, c], -1), torch.cat([s, s], -1)
        t1, t2 = t[..., : D // 2], t[..., D // 2:]
        return t * c2 + torch.cat([-t2, t1], -1) * s2

    LigerRope = liger("liger_kernel.ops.rope:LigerRopeFunction")
    qb, kb, cfull, sfull = liger_rope_args(q, k, cos, sin)
    c_rope = compiled(lambda a, c2, s2: (rot_half(a[0], c2, s2), rot_half(a[1], c2, s2)))
    emit("rope fwd", f"B{B} N{Nr} Hq{Hq} Hkv{Hkv} D{D} bf16", 2 * (q.numel() + k.numel()) * 2, {
        "ato_torch": lambda: ato_torch.rope(q, k, cos, sin),
        "ato_torch, [N, D] tables": lambda: ato_torch.rope(q, k, cfull, sfull),
        "torch eager": lambda: (rot_half(q, cos, sin), rot_half(k, cos, sin)),
        "torch.compile": (lambda: c_rope((q, k), cos, sin)) if c_rope else None,
        "Liger": (lambda: LigerRope.apply(qb, kb, cfull, sfull)) if LigerRope else None},
        {"ato_jax": (lambda a, bb, c, s: ato_jax.rope(a, bb, c, s), (qj, kj, cj, sj)),
         "jax jit (XLA)": (xla_rope, (qj, kj, cj, sj))})
    del q, k, qb, kb, qj, kj

    # cross_entropy loss + gradient
    T, V = 8192, 128256
    logits = rnd(T, V)
    tgt = torch.randint(0, V, (T,), device=dev, generator=g)
    lj, tj = to_j(logits), jnp.asarray(tgt.cpu().numpy())

    def ce_fb(fn):
        return _torch_fwd_bwd(lambda a: fn(a, tgt), (logits,))
    LigerCE = liger("liger_kernel.transformers.cross_entropy:LigerCrossEntropyLoss")
    lig_ce = LigerCE() if LigerCE else None

    emit("cross_entropy loss+grad", f"T{T} V{V} bf16", None, {
        "ato_torch": ce_fb(lambda a, t: ato_torch.cross_entropy(a, t)),
        "torch eager (fp32 upcast)": ce_fb(lambda a, t: F.cross_entropy(a.float(), t)),
        "Liger": ce_fb(lambda a, t: lig_ce(a, t)) if lig_ce else None},
        {"ato_jax": (jax.grad(lambda a, t: ato_jax.cross_entropy(a, t)), (lj, tj)),
         "jax jit (XLA)": (jax.grad(xla_cross_entropy), (lj, tj))})
    # with PaLM's z-loss and Gemma 2's soft-capping (against the rows above: the options' cost)
    opts = {"z_loss": 1e-4, "softcap": 30.0}
    lig_opt = LigerCE(lse_square_scale=opts["z_loss"], softcap=opts["softcap"]) if LigerCE else None
    emit("cross_entropy loss+grad, z_loss + softcap", f"T{T} V{V} bf16", None, {
        "ato_torch": ce_fb(lambda a, t: ato_torch.cross_entropy(a, t, **opts)),
        "Liger": ce_fb(lambda a, t: lig_opt(a, t)) if lig_opt else None},
        {"ato_jax": (jax.grad(lambda a, t: ato_jax.cross_entropy(a, t, **opts)), (lj, tj))})
    return rows


def based_rows(quick: bool):
    """Causal Based attention (d 16, Dv 64, bf16, with the normaliser) at B8 H16 N4096 and
    B2 H16 N16384: ato_torch, ato_jax and fla's parallel_based and fused_chunk_based (inputs
    in fla's [B, T, H, D] layout, made outside the timing). Each row's ratio is to fla's
    parallel_based; the "floor" rows give the forward's floor on this GPU, the larger of the
    bytes of q, k, v, o at the measured copy rate and the FLOP of phi(q) S and phi(k)^T v
    (4 F Dv per row, F = 273) at the bf16 tensor-core peak (PEAK_BF16_TFLOPS). Then
    based_step at B64 H16: the bytes of the state read and written, against the copy rate (JAX:
    wall time per call, and the device time of its kernels)."""
    import jax
    import torch

    import ato_jax
    import ato_torch

    dev, d, Dv, H = "cuda", 16, 64, 16
    F = 1 + d + d * d
    copy_gbs = _copy_gbs(quick)
    rows = [("copy 1 GiB", "torch", "", None, None, f"{copy_gbs:.0f} GB/s")]
    try:
        from fla.ops.based import fused_chunk_based, parallel_based
    except Exception as exc:  # report, don't hide
        parallel_based = fused_chunk_based = None
        rows.append(("fla unavailable", type(exc).__name__, str(exc)[:60], None, None, ""))
    reps = 3 if quick else 10
    for B, N in ((8, 4096), (2, 16384)):
        g = torch.Generator(device=dev).manual_seed(0)
        q, k = (torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
        v, do = (torch.randn(B, H, N, Dv, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
        shape = f"B{B} H{H} N{N} d{d} Dv{Dv} bf16"
        times = {"ato_torch fwd": _bench_torch(lambda: ato_torch.based_attention(q, k, v), quick),
                 "ato_torch fwd+bwd": _bench_torch(_torch_fwd_bwd(ato_torch.based_attention, (q, k, v), do), quick)}
        ft = [t.transpose(1, 2).contiguous() for t in (q, k, v, do)]
        agree = {}
        for name, fn in (("fla parallel_based", parallel_based), ("fla fused_chunk_based", fused_chunk_based)):
            if fn is None:
                continue
            times[f"{name} fwd"] = _bench_torch(lambda fn=fn: fn(*ft[:3], use_norm=True), quick)
            times[f"{name} fwd+bwd"] = _bench_torch(
                _torch_fwd_bwd(lambda a, b, c, fn=fn: fn(a, b, c, use_norm=True), ft[:3], ft[3]), quick)
            ours = ato_torch.based_attention(q, k, v).float()
            agree[name] = (fn(*ft[:3], use_norm=True).transpose(1, 2).float() - ours).norm() / ours.norm()
        qj, kj, vj, doj = (to_jax_bf16(t) for t in (q, k, v, do))
        jf = jax.jit(lambda a, b, c: ato_jax.based_attention(a, b, c))

        def j_fwd_bwd(a, b, c, dd):
            return jax.vjp(lambda x, y, z: ato_jax.based_attention(x, y, z), a, b, c)[1](dd)

        times["ato_jax fwd"] = _median_jax(jf, qj, kj, vj, reps=reps)
        times["ato_jax fwd+bwd"] = _median_jax(jax.jit(j_fwd_bwd), qj, kj, vj, doj, reps=reps)
        for mode in ("fwd", "fwd+bwd"):
            base = times.get(f"fla parallel_based {mode}")
            for name in [n for n in times if n.endswith(" " + mode)]:
                ms = times[name]
                rows.append((f"causal {name}", shape, "x fla parallel_based", ms, ms / base if base else None, ""))
            rows.append((f"causal ato_jax / ato_torch {mode}", shape, "time ratio", None,
                         times[f"ato_jax {mode}"] / times[f"ato_torch {mode}"], ""))
        nbytes = 2 * (2 * B * H * N * d + 2 * B * H * N * Dv)
        flop = 4 * F * Dv * B * H * N
        floor_ms = max(nbytes / copy_gbs / 1e6, flop / PEAK_BF16_TFLOPS / 1e9)
        rows.append(("causal fwd floor (bytes at copy rate, FLOP at peak)", shape, "ato_torch fwd / floor",
                     floor_ms, times["ato_torch fwd"] / floor_ms,
                     f"{nbytes / 1e6:.0f} MB, {flop / 1e9:.1f} GFLOP"))
        for name, err in agree.items():
            rows.append((f"causal o: |ato - {name}| / |ato|", shape, "relative L2 (rate column)", None, None,
                         f"{float(err):.1e}"))
        ms = _bench_torch(lambda: ato_torch.based_attention(q, k, v, causal=False), quick)
        rows.append(("bidir ato_torch fwd", shape, "x causal ato_torch fwd", ms, ms / times["ato_torch fwd"], ""))

    B = 64
    g = torch.Generator(device=dev).manual_seed(1)
    q, k = (torch.randn(B, H, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
    v = torch.randn(B, H, Dv, device=dev, dtype=torch.bfloat16, generator=g)
    S, z = torch.rand(B, H, F, Dv, device=dev), torch.rand(B, H, F, device=dev)
    ms = _bench_torch(lambda: ato_torch.based_step(q, k, v, (S, z)), quick)
    nbytes = 2 * 4 * B * H * F * (Dv + 1)
    gbs = nbytes / ms / 1e6
    rows.append(("based_step ato_torch", f"B{B} H{H} d{d} Dv{Dv} bf16", "of copy GB/s", ms, gbs / copy_gbs,
                 f"{gbs:.0f} GB/s"))
    js = jax.jit(lambda a, b, c, s1, s2: ato_jax.based_step(a, b, c, (s1, s2)))
    args = (*(to_jax_bf16(t) for t in (q, k, v)), *(jax.numpy.asarray(t.cpu().numpy()) for t in (S, z)))
    ms = _median_jax(js, *args, reps=reps)
    gbs = nbytes / ms / 1e6
    rows.append(("based_step ato_jax", f"B{B} H{H} d{d} Dv{Dv} bf16", "of copy GB/s", ms, gbs / copy_gbs,
                 f"{gbs:.0f} GB/s"))
    # JAX's row is wall time per call (its dispatch included); the device time of its kernels
    # tells the kernel's rate apart from the host's
    per = device_kernels(lambda: js(*args), jax.block_until_ready)
    ms = _device_ms(per)
    gbs = nbytes / ms / 1e6
    rows.append(("based_step ato_jax, device time", f"B{B} H{H} d{d} Dv{Dv} bf16", "of copy GB/s", ms,
                 gbs / copy_gbs, f"{gbs:.0f} GB/s, {sum(c for c, _ in per.values()):.0f} kernels"))
    return rows


# Dense bf16 tensor-core peak of the GPU the floors assume (H100 SXM datasheet).
PEAK_BF16_TFLOPS = 989.0


def decode_rows(quick: bool):
    """decode_attention over a paged cache, bf16, Hq32 Hkv8 D128, every sequence 8192 tokens,
    block tables a random permutation of the cache's blocks: GB/s of the K and V bytes read
    against the copy rate measured here, and time against torch's SDPA on the same keys laid
    out contiguously ([B, Hkv, N, D], enable_gqa). B 64 with block sizes 16 and 64, B 8 and 1
    (split-K must keep the GPU busy). JAX rows: wall time per call. "device" rows: the kernels'
    time per call alone (CUPTI), which wall time hides where a call's host time is longer (B 1);
    "graph" rows: wall time of a CUDA graph's replay (a serving loop's step without host time)."""
    import jax
    import torch
    import torch.nn.functional as F

    import ato_jax
    import ato_torch

    Hq, Hkv, D, N = 32, 8, 128, 8192
    copy_gbs = _copy_gbs(quick)
    rows = [("copy 1 GiB", "torch", "", None, None, f"{copy_gbs:.0f} GB/s")]
    reps = 3 if quick else 10
    for B, BS in ((64, 16), (64, 64), (8, 16), (1, 16)):
        q, kc, vc, table, lens = paged_batch(B, BS, Hq, Hkv, D, N)
        shape = f"B{B} Hq{Hq} Hkv{Hkv} N{N} D{D} bs{BS} bf16"
        nbytes = 2 * B * N * Hkv * D * 2

        def contiguous():  # the same keys, [B, Hkv, N, D]
            return (c[table.long()].reshape(B, N, Hkv, D).transpose(1, 2).contiguous() for c in (kc, vc))

        k, v = contiguous()

        def sdpa():
            return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)
        ms_sdpa = _bench_torch(sdpa, quick)
        dev_sdpa = _device_ms(device_kernels(sdpa, lambda out: torch.cuda.synchronize()))
        ref = F.scaled_dot_product_attention(q[:, :, None].float(), k.float(), v.float(), enable_gqa=True)[:, :, 0]
        graph_sdpa = _bench_graph(sdpa, quick)
        del k, v
        ms = _bench_torch(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), quick)
        graph = _bench_graph(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), quick)
        dev = _device_ms(device_kernels(lambda: ato_torch.decode_attention(q, kc, vc, table, lens),
                                        lambda out: torch.cuda.synchronize()))
        gbs = nbytes / ms / 1e6
        rows.append(("ato_torch", shape, "x SDPA contiguous", ms, ms / ms_sdpa,
                     f"{gbs:.0f} GB/s, {gbs / copy_gbs:.2f} of copy"))
        gbs = nbytes / ms_sdpa / 1e6
        rows.append(("SDPA contiguous (enable_gqa)", shape, "x SDPA contiguous", ms_sdpa, 1.0,
                     f"{gbs:.0f} GB/s, {gbs / copy_gbs:.2f} of copy"))
        o = ato_torch.decode_attention(q, kc, vc, table, lens).float()
        rows.append(("o: |ato - SDPA fp32| / |SDPA|", shape, "relative L2 (rate column)", None, None,
                     f"{float((o - ref).norm() / ref.norm()):.1e}"))
        js = jax.jit(lambda *a: ato_jax.decode_attention(*a))
        args = (to_jax_bf16(q), to_jax_bf16(kc), to_jax_bf16(vc), jax.numpy.asarray(table.cpu().numpy()),
                jax.numpy.asarray(lens.cpu().numpy()))
        msj = _median_jax(js, *args, reps=reps)
        rows.append(("ato_jax", shape, "x ato_torch", msj, msj / ms, f"{nbytes / msj / 1e6:.0f} GB/s"))
        devj = _device_ms(device_kernels(lambda: js(*args), jax.block_until_ready))
        rows += [("device: ato_torch", shape, "x SDPA device", dev, dev / dev_sdpa,
                  f"{nbytes / dev / 1e6:.0f} GB/s, {nbytes / dev / 1e6 / copy_gbs:.2f} of copy"),
                 ("device: SDPA contiguous", shape, "x SDPA device", dev_sdpa, 1.0, f"{nbytes / dev_sdpa / 1e6:.0f} GB/s"),
                 ("device: ato_jax", shape, "x ato_torch device", devj, devj / dev, ""),
                 ("graph: ato_torch", shape, "x SDPA graph", graph, graph / graph_sdpa, ""),
                 ("graph: SDPA contiguous", shape, "x SDPA graph", graph_sdpa, 1.0, "")]
        del args, kc, vc, ref, o
        torch.cuda.empty_cache()
    rows += _decode_shared_rows(quick, copy_gbs, reps)
    return rows


def paged_batch(B, BS, Hq=32, Hkv=8, D=128, N=8192):
    """(q, k_cache, v_cache, block_table, seq_lens) on the GPU, bf16: B sequences of N tokens
    each, their blocks of BS tokens a random permutation of the cache (the decode rows' batch)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(B + BS)
    NB = B * N // BS
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    table = torch.randperm(NB, device="cuda", generator=g).reshape(B, N // BS).to(torch.int32)
    lens = torch.full((B,), N, device="cuda", dtype=torch.int32)
    return q, kc, vc, table, lens


def shared_prefix_batch(B=64, Hq=32, Hkv=8, D=128, BS=16, P=4096, T=256):
    """((B, Hq, Hkv, D, BS, P, T), (q, k_cache, v_cache, block_table, seq_lens)) on the GPU, bf16:
    B sequences sharing a P-token prefix, T private tokens each, blocks in random places."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(7)
    NB = P // BS + B * T // BS
    ids = torch.randperm(NB, device="cuda", generator=g).to(torch.int32)
    table = torch.cat([ids[:P // BS].expand(B, -1), ids[P // BS:].reshape(B, T // BS)], 1).contiguous()
    lens = torch.full((B,), P + T, device="cuda", dtype=torch.int32)
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(NB, BS, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    return (B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens)


def _decode_shared_rows(quick: bool, copy_gbs: float, reps: int):
    """B 64 sequences sharing a 4096-token prefix, 256 private tokens each (bf16, Hq32 Hkv8
    D128, block size 16): decode_attention with its schedule against the seq-first path on the
    same cache, and against reading the unique K and V bytes once at the copy rate."""
    import jax
    import torch

    import ato_jax
    import ato_torch

    (B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
    sched = ato_torch.decode_schedule(table, lens, block_size=BS)
    shape = f"B{B} Hq{Hq} Hkv{Hkv} prefix{P}+{T} D{D} bs{BS} bf16"
    ms_seq = _bench_torch(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), quick)
    ms = _bench_torch(lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched), quick)
    unique = 2 * (P + B * T) * Hkv * D * 2
    floor = unique / copy_gbs / 1e6
    o1 = ato_torch.decode_attention(q, kc, vc, table, lens).float()
    o2 = ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched).float()
    rows = [("shared: ato_torch, schedule", shape, "x seq-first", ms, ms / ms_seq, f"{ms / floor:.2f}x the unique-bytes floor"),
            ("shared: ato_torch, seq-first", shape, "x seq-first", ms_seq, 1.0, ""),
            ("shared: unique K, V bytes at copy rate", shape, "", floor, None, f"{unique / 1e6:.0f} MB"),
            ("shared: o schedule vs seq-first", shape, "relative L2 (rate column)", None, None,
             f"{float((o2 - o1).norm() / o1.norm()):.1e}")]
    js = ato_jax.decode_schedule(table.cpu().numpy(), lens.cpu().numpy(), block_size=BS)
    fn = jax.jit(lambda *a: ato_jax.decode_attention(*a[:5], schedule=a[5]))
    args = (to_jax_bf16(q), to_jax_bf16(kc), to_jax_bf16(vc), jax.numpy.asarray(table.cpu().numpy()),
            jax.numpy.asarray(lens.cpu().numpy()))
    msj = _median_jax(fn, *args, js, reps=reps)
    rows.append(("shared: ato_jax, schedule", shape, "x ato_torch", msj, msj / ms, ""))
    # device time (kernels only): an eager call's host time can pass its kernels'
    sync = lambda out: torch.cuda.synchronize()  # noqa: E731
    dev_seq = _device_ms(device_kernels(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), sync))
    dev = _device_ms(device_kernels(lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched), sync))
    devj = _device_ms(device_kernels(lambda: fn(*args, js), jax.block_until_ready))
    rows += [("shared device: ato_torch, schedule", shape, "x seq-first device", dev, dev / dev_seq,
              f"{dev / floor:.2f}x the unique-bytes floor"),
             ("shared device: ato_torch, seq-first", shape, "x seq-first device", dev_seq, 1.0, ""),
             ("shared device: ato_jax, schedule", shape, "x ato_torch device", devj, devj / dev, "")]
    graph_seq = _bench_graph(lambda: ato_torch.decode_attention(q, kc, vc, table, lens), quick)
    graph = _bench_graph(lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched), quick)
    rows += [("shared graph: ato_torch, schedule", shape, "x seq-first graph", graph, graph / graph_seq,
              f"{graph / floor:.2f}x the unique-bytes floor"),
             ("shared graph: ato_torch, seq-first", shape, "x seq-first graph", graph_seq, 1.0, "")]
    return rows


def torch_max_l2_coarsen(x, block_size):
    """Max-L2 coarsening as a torch user writes it (N a multiple of block_size): fp32 norms,
    argmax per block, a gather."""
    import torch

    B, H, N, D = x.shape
    M = N // block_size
    norms = x.float().pow(2).sum(-1).view(B, H, M, block_size)
    index = norms.argmax(-1) + torch.arange(M, device=x.device) * block_size
    return torch.gather(x, 2, index[..., None].expand(-1, -1, -1, D)), index.to(torch.int32)


def block_sparse_rows(quick: bool):
    """max_l2_coarsen B1 H32 N32768 D128 bf16, blocks of 64 (the issue's shape): GB/s over the
    bytes read and written against the copy rate measured here, and time against the torch
    implementation (eager and torch.compile); forward+backward against torch eager's."""
    import jax
    import torch

    import ato_jax
    import ato_torch

    B, H, N, D, bs = 1, 32, 32768, 128, 64
    copy_gbs = _copy_gbs(quick)
    rows = [("copy 1 GiB", "torch", "", None, None, f"{copy_gbs:.0f} GB/s")]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
    shape = f"B{B} H{H} N{N} D{D} block{bs} bf16"
    nbytes = x.numel() * 2 * (1 + 1 / bs) + B * H * (N // bs) * 4
    ms = _bench_torch(lambda: ato_torch.max_l2_coarsen(x, bs), quick)
    ms_eager = _bench_torch(lambda: torch_max_l2_coarsen(x, bs), quick)
    compiled = torch.compile(torch_max_l2_coarsen)
    ms_comp = _bench_torch(lambda: compiled(x, bs), quick)
    gbs = nbytes / ms / 1e6
    ref, ref_idx = torch_max_l2_coarsen(x, bs)
    xc, idx = ato_torch.max_l2_coarsen(x, bs)
    rows += [("max_l2_coarsen ato_torch", shape, "x torch eager", ms, ms / ms_eager,
              f"{gbs:.0f} GB/s, {gbs / copy_gbs:.2f} of copy"),
             ("max_l2_coarsen torch eager", shape, "x torch eager", ms_eager, 1.0, f"{nbytes / ms_eager / 1e6:.0f} GB/s"),
             ("max_l2_coarsen torch.compile", shape, "x torch eager", ms_comp, ms_comp / ms_eager,
              f"{nbytes / ms_comp / 1e6:.0f} GB/s"),
             ("max_l2_coarsen: index == torch's", shape, "", None, None,
              f"{float((idx == ref_idx).float().mean()):.6f} of blocks; rows equal {bool(torch.equal(xc, ref))}")]
    fn = jax.jit(lambda a: ato_jax.max_l2_coarsen(a, bs))
    xj = to_jax_bf16(x)
    msj = _median_jax(fn, xj, reps=3 if quick else 10)
    rows.append(("max_l2_coarsen ato_jax", shape, "x ato_torch", msj, msj / ms, f"{nbytes / msj / 1e6:.0f} GB/s"))
    # device time (CUPTI): the kernels alone, without each call's launch and event overhead
    sync = lambda out: torch.cuda.synchronize()  # noqa: E731
    dev = _device_ms(device_kernels(lambda: ato_torch.max_l2_coarsen(x, bs), sync))
    dev_comp = _device_ms(device_kernels(lambda: compiled(x, bs), sync))
    devj = _device_ms(device_kernels(lambda: fn(xj), jax.block_until_ready))
    rows += [("device: max_l2_coarsen ato_torch", shape, "x torch.compile device", dev, dev / dev_comp,
              f"{nbytes / dev / 1e6:.0f} GB/s, {nbytes / dev / 1e6 / copy_gbs:.2f} of copy"),
             ("device: max_l2_coarsen torch.compile", shape, "x torch.compile device", dev_comp, 1.0,
              f"{nbytes / dev_comp / 1e6:.0f} GB/s"),
             ("device: max_l2_coarsen ato_jax", shape, "x ato_torch device", devj, devj / dev, "")]
    cot = torch.randn(B, H, N // bs, D, device="cuda", dtype=torch.bfloat16, generator=g)
    ms_fb = _bench_torch(_torch_fwd_bwd(lambda a: ato_torch.max_l2_coarsen(a, bs)[0], [x], cot), quick)
    ms_fb_eager = _bench_torch(_torch_fwd_bwd(lambda a: torch_max_l2_coarsen(a, bs)[0], [x], cot), quick)
    fb_bytes = nbytes + x.numel() * 2 + cot.numel() * 2  # + dx written, the cotangent read
    rows += [("max_l2_coarsen fwd+bwd ato_torch", shape, "x torch eager", ms_fb, ms_fb / ms_fb_eager,
              f"{fb_bytes / ms_fb / 1e6:.0f} GB/s, {fb_bytes / ms_fb / 1e6 / copy_gbs:.2f} of copy"),
             ("max_l2_coarsen fwd+bwd torch eager", shape, "x torch eager", ms_fb_eager, 1.0, "")]
    return rows + _block_sparse_attention_rows(quick)


def random_block_mask(B, H, M, keep, device, seed=0):
    """A bool block mask [B, H, M, M] keeping ceil(keep * M) random key blocks of each query
    block, the diagonal among them."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    scores = torch.rand(B, H, M, M, device=device, generator=g)
    scores.diagonal(dim1=-2, dim2=-1).fill_(2.0)
    top = scores.topk(-(-int(keep * M * 1000) // 1000), dim=-1).indices
    return torch.zeros(B, H, M, M, device=device, dtype=torch.bool).scatter_(-1, top, True)


def _block_sparse_attention_rows(quick: bool):
    """block_sparse_attention B1 H32 N32768 D128 bf16, blocks of 64, 10% of the key blocks of
    each query block kept (random, the diagonal among them): against dense flash_attention
    times the kept fraction and torch FlexAttention (compiled) with the same block mask, both
    also at blocks of 128."""
    import torch

    import ato_jax
    import ato_torch
    import jax

    B, H, N, D, bs = 1, 32, 32768, 128, 64
    M = N // bs
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    mask = random_block_mask(B, H, M, 0.1, "cuda")
    kept = float(mask.float().mean())
    shape = f"B{B} H{H} N{N} D{D} block{bs} bf16, {kept:.3f} kept"
    rows = []
    ms = _bench_torch(lambda: ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs), quick)
    ms_dense = _bench_torch(lambda: ato_torch.flash_attention(q, k, v), quick)
    fb = _bench_torch(_torch_fwd_bwd(lambda a, b, c: ato_torch.block_sparse_attention(a, b, c, mask, block_size=bs),
                                     [q, k, v], do), quick)
    fb_dense = _bench_torch(_torch_fwd_bwd(lambda a, b, c: ato_torch.flash_attention(a, b, c), [q, k, v], do), quick)
    rows += [("block_sparse ato_torch fwd", shape, "x dense flash x kept", ms, ms / (ms_dense * kept), ""),
             ("dense flash_attention fwd", shape, "", ms_dense, None, ""),
             ("block_sparse ato_torch fwd+bwd", shape, "x dense flash x kept", fb, fb / (fb_dense * kept), ""),
             ("dense flash_attention fwd+bwd", shape, "", fb_dense, None, "")]
    # blocks of 128 (on Hopper the Gluon forward's)
    mask128 = random_block_mask(B, H, N // 128, 0.1, "cuda")
    kept128 = float(mask128.float().mean())
    shape128 = f"B{B} H{H} N{N} D{D} block128 bf16, {kept128:.3f} kept"
    ms128 = _bench_torch(lambda: ato_torch.block_sparse_attention(q, k, v, mask128, block_size=128), quick)
    fb128 = _bench_torch(_torch_fwd_bwd(lambda a, b, c: ato_torch.block_sparse_attention(a, b, c, mask128,
                                                                                         block_size=128),
                                        [q, k, v], do), quick)
    rows += [("block_sparse ato_torch fwd", shape128, "x dense flash x kept", ms128, ms128 / (ms_dense * kept128), ""),
             ("block_sparse ato_torch fwd+bwd", shape128, "x dense flash x kept", fb128,
              fb128 / (fb_dense * kept128), "")]
    # FlexAttention's tiles sized to the 64-token blocks (the fastest that compile:
    # experiments/2026-11-24_flex_options.py; its backward compiles with none of them), its defaults at 128
    tiles = {"BLOCK_M": bs, "BLOCK_N": bs, "num_warps": 4, "num_stages": 2, "BLOCK_M1": 32, "BLOCK_N1": bs,
             "BLOCK_M2": bs, "BLOCK_N2": 32}
    rows += _flex_rows(q, k, v, do, mask, bs, shape, ms, fb, tiles, quick)
    rows += _flex_rows(q, k, v, do, mask128, 128, shape128, ms128, fb128, None, quick)
    fn = jax.jit(lambda a, b, c, m: ato_jax.block_sparse_attention(a, b, c, m, block_size=bs))
    msj = _median_jax(fn, to_jax_bf16(q), to_jax_bf16(k), to_jax_bf16(v), jax.numpy.asarray(mask.cpu().numpy()),
                      reps=3, calls=10)
    rows.append(("block_sparse ato_jax fwd", shape, "x ato_torch", msj, msj / ms, ""))
    return rows + _cab_rows(q, k, v, do, bs, quick)


def _flex_rows(q, k, v, do, mask, bs, shape, ms, fb, tiles, quick):
    """block_sparse_attention (forward ms, forward+backward fb) against torch FlexAttention
    (compiled, kernel_options ``tiles``) with the same block mask (its kept-block lists, no
    token-level mask_mod), and the outputs' difference; a failing FlexAttention is a row saying so."""
    import torch

    import ato_torch

    rows = []
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        bm = BlockMask.from_kv_blocks(mask.sum(-1).to(torch.int32), order, BLOCK_SIZE=bs)
        flex = torch.compile(flex_attention)
        ms_flex = _bench_torch(lambda: flex(q, k, v, block_mask=bm, kernel_options=tiles), quick)
        o1 = ato_torch.block_sparse_attention(q, k, v, mask, block_size=bs).float()
        o2 = flex(q, k, v, block_mask=bm, kernel_options=tiles).float()
        rows += [("block_sparse ato_torch fwd", shape, "x FlexAttention", ms, ms / ms_flex, ""),
                 ("FlexAttention (compiled) fwd", shape, "x FlexAttention", ms_flex, 1.0, ""),
                 ("o: |ato - Flex| / |Flex|", shape, "relative L2 (rate column)", None, None,
                  f"{float((o1 - o2).norm() / o2.norm()):.1e}")]
        fb_flex = _bench_torch(_torch_fwd_bwd(lambda a, b, c: flex(a, b, c, block_mask=bm, kernel_options=tiles),
                                              [q, k, v], do), quick)
        rows += [("block_sparse ato_torch fwd+bwd", shape, "x FlexAttention", fb, fb / fb_flex, ""),
                 ("FlexAttention (compiled) fwd+bwd", shape, "x FlexAttention", fb_flex, 1.0, "")]
    except Exception as exc:  # noqa: BLE001  (FlexAttention missing or failing: say so in the table)
        msg = str(exc).splitlines()[0] if str(exc) else ""
        rows.append(("FlexAttention", shape, "", None, None, f"failed: {type(exc).__name__}: {msg[:90]}"))
    return rows


def _cab_rows(q, k, v, do, bs, quick):
    """cab_attention (keep 0.1, causal) at the block-sparse rows' shape: the whole call against
    its mask alone (curvature_block_mask: coarsening, scores, top-k; the issue's share), per
    mask kernel device time, fwd+bwd, and ato_jax."""
    import torch

    import ato_jax
    import ato_torch
    import jax

    B, H, N, D = q.shape
    shape = f"B{B} H{H} N{N} D{D} block{bs} bf16, keep 0.1, causal"
    ms_mask = _bench_torch(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1), quick)
    ms = _bench_torch(lambda: ato_torch.cab_attention(q, k, v, block_size=bs, keep=0.1), quick)
    kept = float(ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1).float().mean())
    fb = _bench_torch(_torch_fwd_bwd(lambda a, b, c: ato_torch.cab_attention(a, b, c, block_size=bs, keep=0.1),
                                     [q, k, v], do), quick)
    rows = [("cab_attention ato_torch fwd", shape, "", ms, None, f"{kept:.3f} of all blocks kept"),
            ("curvature_block_mask ato_torch", shape, "of cab_attention fwd", ms_mask, ms_mask / ms, ""),
            ("cab_attention ato_torch fwd+bwd", shape, "", fb, None, ""),
            ("curvature_block_mask ato_torch", shape, "of cab_attention fwd+bwd", ms_mask, ms_mask / fb, "")]
    per = device_kernels(lambda: ato_torch.curvature_block_mask(q, k, block_size=bs, keep=0.1),
                         lambda out: torch.cuda.synchronize(), calls=3 if quick else 50)
    rows += [(f"  mask kernel {name[:40]}", shape, "of the mask's device time", us / 1e3,
              us / sum(u for _, u in per.values()), f"{calls:.0f} launches") for name, (calls, us) in
             sorted(per.items(), key=lambda kv: -kv[1][1])]
    fn = jax.jit(lambda a, b, c: ato_jax.cab_attention(a, b, c, block_size=bs, keep=0.1))
    msj = _median_jax(fn, to_jax_bf16(q), to_jax_bf16(k), to_jax_bf16(v), reps=3, calls=10)
    rows.append(("cab_attention ato_jax fwd", shape, "x ato_torch", msj, msj / ms, ""))
    return rows


def linear_cross_entropy_rows(quick: bool):
    """The language model head's loss + gradients (x and weight) at T8192 H4096, V 128256 and
    256000, bf16: ato_torch, matmul + ato_torch.cross_entropy, torch matmul + F.cross_entropy
    (fp32 upcast), Liger's and Cut Cross-Entropy's fused linear cross-entropy; ato_jax and
    jitted matmul + optax. Ratios to matmul + ato_torch.cross_entropy. Rate: TFLOP/s of the
    three matmuls of the logits' form (6 T H V) and its share of PEAK_BF16_TFLOPS; memory:
    the peak above the inputs and their gradients (torch: max_memory_allocated over one call
    of torch.autograd.grad; JAX: XLA's temp bytes of the compiled call)."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import ato_jax
    import ato_torch

    try:
        import optax
    except Exception:
        optax = None
    LigerFLCE = liger("liger_kernel.transformers.fused_linear_cross_entropy:LigerFusedLinearCrossEntropyLoss")
    cce = liger("cut_cross_entropy:linear_cross_entropy")
    rows = []
    T, H = (4096, 4096) if quick else (8192, 4096)
    g = torch.Generator(device="cuda").manual_seed(0)
    for V in ((128256,) if quick else (128256, 256000)):
        x = (torch.randn(T, H, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
        w = (torch.randn(V, H, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
        t = torch.randint(0, V, (T,), device="cuda", generator=g)
        shape = f"T{T} H{H} V{V} bf16"
        flop = 6 * T * H * V
        fns = {"ato_torch": lambda a, b: ato_torch.linear_cross_entropy(a, b, t),
               "matmul + ato_torch.cross_entropy": lambda a, b: ato_torch.cross_entropy(a @ b.T, t),
               "torch matmul + F.cross_entropy (fp32 upcast)": lambda a, b: F.cross_entropy((a @ b.T).float(), t)}
        if LigerFLCE is not None:
            lig = LigerFLCE()
            fns["Liger fused linear CE"] = lambda a, b: lig(b, a, t)
        if cce is not None:
            fns["Cut Cross-Entropy"] = lambda a, b: cce(a, b, t)
        times, mem = {}, {}
        for name, fn in fns.items():
            xa, wa = x.detach().requires_grad_(), w.detach().requires_grad_()
            run = lambda fn=fn, xa=xa, wa=wa: torch.autograd.grad(fn(xa, wa), (xa, wa))  # noqa: E731
            try:
                run()
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                grads = run()
                torch.cuda.synchronize()
                mem[name] = torch.cuda.max_memory_allocated() - base - sum(gr.numel() * gr.element_size()
                                                                            for gr in grads)
                del grads
                times[name] = _bench_torch(run, quick)
            except Exception as exc:
                rows.append((f"{name} failed", shape, type(exc).__name__, None, None, str(exc)[:60]))
            torch.cuda.empty_cache()
        xj, wj, tj = to_jax_bf16(x), to_jax_bf16(w), jnp.asarray(t.cpu().numpy())
        jfns = {"ato_jax": lambda a, b: ato_jax.linear_cross_entropy(a, b, tj)}
        if optax is not None:
            jfns["jax matmul + optax"] = lambda a, b: optax.softmax_cross_entropy_with_integer_labels(
                (a @ b.T).astype(jnp.float32), tj).mean()
        for name, fn in jfns.items():
            try:
                f = jax.jit(jax.grad(fn, argnums=(0, 1)))
                stats = f.lower(xj, wj).compile().memory_analysis()
                mem[name] = getattr(stats, "temp_size_in_bytes", None)
                times[name] = _median_jax(f, xj, wj, reps=3 if quick else 5, calls=5)
            except Exception as exc:
                rows.append((f"{name} failed", shape, type(exc).__name__, None, None, str(exc)[:60]))
        del xj, wj
        base = times.get("matmul + ato_torch.cross_entropy")
        for name, ms in times.items():
            tf = flop / ms / 1e9
            m = mem.get(name)
            rate = f"{tf:.0f} TFLOP/s = {tf / PEAK_BF16_TFLOPS:.2f} of peak; " + (
                f"{m / 2 ** 20:.0f} MiB above inputs+grads" if m is not None else "memory ?")
            rows.append((f"linear_cross_entropy fwd+bwd {name}", shape, "x matmul + ato CE", ms,
                         ms / base if base else None, rate))
        del x, w
        torch.cuda.empty_cache()
    return rows


# One table per op family, or per group of families (ato_core.ops.GROUPS).
TABLES = {"linear_attention": linear_attention_rows, "based": based_rows, "flash_attention": flash_attention_rows,
          "flash_options": flash_options_rows, "flash_varlen": flash_varlen_rows, "flash_shapes": flash_shapes_rows,
          "decode": decode_rows, "block_sparse": block_sparse_rows, "transformer_ops": transformer_ops_rows,
          "linear_cross_entropy": linear_cross_entropy_rows}


def table_of(name: str) -> str:
    """The table that times a family or group (an ``--op`` value of ato check and ato bench)."""
    from ato_core.ops import GROUPS

    if name in TABLES:
        return name
    return next(group for group, families in GROUPS.items() if name in families)


def tables(ops=None) -> list:
    """The tables that ``--op`` values select, each once; all of them without."""
    return list(dict.fromkeys(table_of(op) for op in ops)) if ops else list(TABLES)


def _versions():
    import jax
    import torch
    import triton

    versions = f"torch {torch.__version__}, triton {triton.__version__}, jax {jax.__version__}"
    try:
        from ato_jax.launcher import import_jax_triton  # never a bare import: it blanks TRITON_CACHE_DIR

        versions += f", jax-triton {import_jax_triton().__version__}"
    except Exception:
        pass
    try:
        import fla

        versions += f", fla {fla.__version__}"
    except Exception:
        pass
    return versions


def write_table(rows, out: str, gpu: str, family: str, header_lines) -> None:
    """The table (printed and <gpu>-<family>.txt), its CSV and a bar plot of the timed rows."""
    os.makedirs(out, exist_ok=True)
    tag = gpu.replace(" ", "_")
    header = ("benchmark", "shape", "ratio means", "time (us)", "ratio", "rate")
    fmt = lambda r: (r[0], r[1], r[2], "" if r[3] is None else f"{r[3] * 1e3:.1f}",  # noqa: E731
                     "" if r[4] is None else f"{r[4]:.2f}", r[5])
    table = [fmt(r) for r in rows]
    widths = [max(len(x[c]) for x in table + [header]) for c in range(len(header))]
    lines = list(header_lines) + ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)) for r in table]
    text = "\n".join(lines)
    print(text, flush=True)
    with open(os.path.join(out, f"{tag}-{family}.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, f"{tag}-{family}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        timed = [r for r in rows if r[3] is not None and not r[0].startswith(("copy", "bidir"))]
        fig, ax = plt.subplots(figsize=(9, 0.3 * len(timed) + 1))
        ax.barh([f"{r[0]} {r[1]}" for r in timed], [r[3] * 1e3 for r in timed])
        ax.set_xlabel("time (us), lower is better")
        ax.set_title(f"{family}, {gpu}", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{tag}-{family}.png"), dpi=100)
    except Exception as exc:
        print(f"(no plot: {exc})", file=sys.stderr)


def run(out: str = "benchmarks/results", quick: bool = False, ops=None) -> int:
    import torch

    if not torch.cuda.is_available():
        print("ato bench needs a CUDA GPU (none found: torch.cuda.is_available() is False); on a CPU, "
              "`ato check` runs every op under Triton's interpreter", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    versions = _versions()
    for table in tables(ops):
        rows = TABLES[table](quick)
        cmd = f"command: ato bench --op {table}" + (" --quick" if quick else "")
        write_table(rows, out, gpu, table, [f"GPU {gpu}; {versions}", cmd])
    return 0
