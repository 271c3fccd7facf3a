"""``ato check``: every op in both frameworks on this machine (compiled on a GPU, the
interpreter on a CPU), each compared with the float64 reference and the two frameworks
with each other; one table; non-zero exit on any failure."""

from __future__ import annotations

import sys
import time

from . import harness as h


def family(case) -> str:
    """The op family of a case (its folder under ato_core/ops)."""
    from ato_core.ops import OPS

    return OPS[case.op].family


def families(ops=None) -> list:
    """The family names that ``--op`` values select (a family, or a group of them such as
    transformer_ops); every family without."""
    from ato_core.ops import FAMILIES, GROUPS

    names = [f.__name__.rsplit(".", 1)[1] for f in FAMILIES]
    if not ops:
        return names
    chosen = {n for op in ops for n in GROUPS.get(op, (op,))}
    return [n for n in names if n in chosen]


def choices() -> list:
    """What ``--op`` accepts: every family and group."""
    from ato_core.ops import GROUPS

    return families() + list(GROUPS)


def cases(gpu: bool, quick: bool, ops=None):
    """Every case ``ato check`` runs (each family's cases.check_cases); only the families that
    ``ops`` selects if given."""
    import importlib

    dtypes = ["float32", "float16", "bfloat16"] if gpu else ["float32", "bfloat16"]
    if quick:
        dtypes = dtypes[-1:]
    mods = [importlib.import_module(f"ato_core.ops.{name}.cases") for name in families(ops)]
    return [c for dtype in dtypes for mod in mods for c in mod.check_cases(gpu, dtype, quick)]


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
    if not gpu:
        print("No GPU: the kernels ran under Triton's interpreter, which checks them, not their speed.")
    return 1 if failures else 0
