"""``ato check``: every op in both frameworks on this machine (compiled on a GPU, the
interpreter on a CPU), each compared with the float64 reference and the two frameworks
with each other; one table; non-zero exit on any failure."""

from __future__ import annotations

import sys
import time

from . import harness as h


FAMILIES = ("linear_attention", "flash_attention", "transformer_ops")


def family(case) -> str:
    """The op family of a case (the names ``--op`` takes, as in ``ato bench``)."""
    if case.op in ("elu_plus_one", "linear_attention", "linear_attention_step"):
        return "linear_attention"
    return "flash_attention" if case.op == "flash_attention" else "transformer_ops"


def cases(gpu: bool, quick: bool, ops=None):
    """Every case ``ato check`` runs; only the families in ``ops`` if given."""
    out = _all_cases(gpu, quick)
    return [c for c in out if family(c) in ops] if ops else out


def _all_cases(gpu: bool, quick: bool):
    if gpu:
        dims = [(2, 4, 2048, 64, 64), (1, 4, 1000, 96, 48)]
        fa_dims = [(2, 8, 2, 1024, 1024, 128), (1, 4, 4, 700, 1500, 80)]  # (B, Hq, Hkv, Nq, Nk, D)
        dtypes = ["float32", "float16", "bfloat16"]
    else:
        dims = [(2, 2, 200, 32, 24), (1, 2, 45, 48, 80)]
        fa_dims = [(1, 4, 2, 45, 29, 48), (1, 2, 2, 37, 70, 16)]
        dtypes = ["float32", "bfloat16"]
    if quick:
        dims, fa_dims, dtypes = dims[:1], fa_dims[:1], dtypes[-1:]
    out = [h.elu_case((4, 1001), d) for d in dtypes]
    for dtype in dtypes:
        for i, (B, H, N, Dk, Dv) in enumerate(dims):
            for causal in (False, True):
                out.append(h.la_case(B, H, N, Dk, Dv, dtype, causal=causal, feature_map="elu" if i == 0 else None,
                                     state=causal, final=causal, seed=i))
        out.append(h.step_case(2, 4, 64, 64, dtype))
        for i, fa in enumerate(fa_dims):
            for causal in (False, True):
                out.append(h.fa_case(*fa, dtype=dtype, causal=causal, seed=i))
        out += transformer_op_cases(gpu, dtype)
    return out


def transformer_op_cases(gpu: bool, dtype: str):
    M, N, V = (2048, 4096, 32000) if gpu else (6, 300, 500)
    return [
        h.norm_case("layer_norm", (M, N), dtype=dtype, seed=1),
        h.norm_case("rms_norm", (M, N + 1), dtype=dtype, bias=False, seed=2),
        h.drln_case((M, N), dtype=dtype, p=0.1, dseed=3, seed=3),
        h.softmax_case((M, N), dtype=dtype, seed=4),
        h.swiglu_case((M, N), dtype=dtype, seed=5),
        h.rope_case(2, 8, 2, 256 if gpu else 9, 64 if gpu else 16, dtype=dtype, positions=True,
                    max_pos=1024 if gpu else 20, seed=6),
        h.ce_case(M, V, dtype=dtype, label_smoothing=0.1, seed=7),
    ]


def _progress(i: int, n: int, label: str) -> None:
    end = "\r" if sys.stderr.isatty() else "\n"
    sys.stderr.write(f"\x1b[2K[{i}/{n}] {label}{end}" if end == "\r" else f"[{i}/{n}] {label}{end}")
    sys.stderr.flush()


def run(quick: bool = False, ops=None) -> int:
    import torch

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    backend = "compiled" if gpu else "interpreter"
    todo = cases(gpu, quick, ops)
    rows, failures = [], 0
    start = time.perf_counter()
    for i, case in enumerate(todo, 1):
        _progress(i, len(todo), case.label)
        inputs = h.make_inputs(case)
        ref = h.run_torch(case, inputs, device, reference=True)
        results = {}
        for fw in ("torch", "jax"):
            try:
                runner = h.run_torch if fw == "torch" else h.run_jax
                res = runner(case, inputs, device) if fw == "torch" else runner(case, inputs)
                # time a second, warm call (the first one compiles)
                res = runner(case, inputs, device) if fw == "torch" else runner(case, inputs)
                results[fw] = res
                err = h.max_rel_err(res, ref)
                ok = err < h.TOLERANCE[case.dtype]
                rows.append((case.label, fw, backend, f"{err:.2e}", f"{res.seconds * 1e3:.1f} ms", "ok" if ok else "FAIL"))
            except Exception as exc:  # a crash is a failure, reported in the table
                ok = False
                rows.append((case.label, fw, backend, type(exc).__name__, "-", "FAIL"))
            failures += not ok
        if len(results) == 2:
            same = h.bitwise_equal(results["torch"], results["jax"])
            diff = max(h.max_rel_err(results["jax"], results["torch"]), 0.0)
            rows.append((case.label, "torch vs jax", backend, "bitwise equal" if same else f"{diff:.2e}", "-",
                         "ok" if same else "FAIL"))
            failures += not same
    sys.stderr.write("\n")
    headers = ("op", "framework", "backend", "max error", "time", "ok")
    widths = [max(len(str(r[c])) for r in rows + [headers]) for c in range(len(headers))]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    n_ok = sum(r[-1] == "ok" for r in rows)
    print(f"\n{n_ok} passed, {failures} failed  ({device}, {time.perf_counter() - start:.0f} s; "
          "max error: relative to the float64 reference, outputs and gradients)")
    return 1 if failures else 0
