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


def _torch_fwd_bwd(fn, inputs, cotangent):
    """A closure running fn on fresh leaves of ``inputs`` and its backward with ``cotangent``."""
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


FAMILIES = {"linear_attention": linear_attention_rows, "flash_attention": flash_attention_rows}


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

        timed = [r for r in rows if r[3] is not None and r[0].split()[0] in ("causal", "full")]
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
        print("ato bench needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    versions = _versions()
    for family in ops or FAMILIES:
        rows = FAMILIES[family](quick)
        cmd = f"command: ato bench --op {family}" + (" --quick" if quick else "")
        write_table(rows, out, gpu, family, [f"GPU {gpu}; {versions}", cmd])
    return 0
