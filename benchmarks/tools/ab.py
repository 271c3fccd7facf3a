"""Two versions of ato imported into ONE process and timed in alternating rounds (used by
``host_compare.py`` and the dated A/B experiments; not a test). A host's and a lease's speed
drift by more than the few per cent such a comparison looks for, so the versions run side by
side, each round in the other order.

``load(path, *modules)`` imports ``modules`` (default ato_torch) from the ato_core, ato_torch,
ato_jax and ato_cli found in ``path`` (e.g. a copy of another checkout's), after dropping any
loaded before; ``alternate(fns, rounds, time_fn)`` times each function once a round;
``module_at(commit, path)`` one module file as it was at a commit, beside the current tree;
``module_from_source(source, path, tag)`` one edited; ``launched(f, prefix)`` the CUDA kernels f()
runs (the check that a toggle took effect)."""
import importlib
import importlib.util
import subprocess
import sys
import tempfile


def load(path, *modules):
    lib = sys.modules.get("ato_torch.library")
    if lib is not None:
        # the loaded version's torch.ops.ato registrations, which the next one makes again
        # (its eager calls, which these comparisons time, do not use them)
        lib._LIB._destroy()
    for m in [m for m in sys.modules if m.split(".")[0] in ("ato_core", "ato_torch", "ato_jax", "ato_cli")]:
        del sys.modules[m]
    sys.path.insert(0, path)
    try:
        loaded = tuple(importlib.import_module(m) for m in (modules or ("ato_torch",)))
    finally:
        sys.path.remove(path)
    return loaded[0] if len(loaded) == 1 else loaded


def alternate(fns: dict, rounds: int, time_fn) -> dict:
    """{key: [time_fn(fn) per round]}, the keys in order on even rounds and reversed on odd."""
    res = {key: [] for key in fns}
    for r in range(rounds):
        for key in (list(fns) if r % 2 == 0 else list(reversed(list(fns)))):
            res[key].append(time_fn(fns[key]))
    return res


def module_at(commit: str, path: str):
    """The module file ``path`` (e.g. ato_core/ops/flash_attention/hopper.py) as it was at
    ``commit`` (git, from the repository root), loaded as a module of its own beside the current
    one; its relative imports resolve in the current package."""
    return module_from_source(subprocess.check_output(["git", "show", f"{commit}:{path}"], text=True), path,
                              f"at_{commit}")


def module_from_source(source: str, path: str, tag: str):
    """``source`` loaded as a module of its own (named after ``tag``) beside the module file
    ``path``, its relative imports resolved in path's package: a module file edited by an
    experiment, or as it was at a commit."""
    with tempfile.NamedTemporaryFile("w", suffix=f"_{tag}.py", delete=False) as f:
        f.write(source)
    package = path.removesuffix(".py").replace("/", ".").rpartition(".")[0]
    spec = importlib.util.spec_from_file_location(f"{package}._{tag}", f.name)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    spec.loader.exec_module(module)
    return module


def launched(f, prefix: str = "") -> list:
    """The sorted names of the CUDA kernels that f() launches whose names start with ``prefix``
    (torch.profiler): the check that an A/B's toggle took effect (an op's plan cache can hold
    the other side's plan)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.name.startswith(prefix)})


def op_fns(trees: dict, variants: dict) -> dict:
    """{(variant, mode, tag): fn} for ``variants`` {name: (op, tensors, kwargs)} (tensors q, k, v,
    the cotangent, then any further positional inputs) run by each of ``trees`` {tag: ato_torch as
    load gives it}, mode "fwd" or "fwd+bwd" (ato_cli.bench._torch_fwd_bwd)."""
    from ato_cli.bench import _torch_fwd_bwd

    def call(mod, op, x, kw):
        return lambda a, b, c: getattr(mod, op)(a, b, c, *x[4:], **kw)

    fns = {}
    for name, (op, x, kw) in variants.items():
        for tag, mod in trees.items():
            f = call(mod, op, x, kw)
            fns[(name, "fwd", tag)] = (lambda f, x: lambda: f(*x[:3]))(f, x)
            fns[(name, "fwd+bwd", tag)] = _torch_fwd_bwd(f, x[:3], x[3])
    return fns


def print_ratios(res: dict, variants, width: int = 48) -> None:
    """Each variant's and mode's median over the rounds of alternate's ``res`` (seconds) from trees
    "old" and "new", in us, and new / old."""
    import statistics

    for name in variants:
        for mode in ("fwd", "fwd+bwd"):
            o, n = (statistics.median(res[(name, mode, t)]) * 1e3 for t in ("old", "new"))
            print(f"{name:{width}s} {mode:8s} old {o:9.1f}  new {n:9.1f}  new/old {n / o:.3f}")
