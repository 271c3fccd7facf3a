"""Run a script in a copy of the repository with some of its source replaced: an A/B of kernel
source variants, each timed in a process of its own (the kernels compile from the copy). Used by
experiments/2026-11-28_flash_dropout_bound.py, 2026-11-29_flash_draw_calls.py, and through
alternate_forms the other 2026-11-29 A/Bs (decode_merge_order, decode_prefetch, decode_splits,
coarsen_store)."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_patched(patches, script, *args, diffs=()) -> subprocess.CompletedProcess:
    """``script`` (a path relative to the repository root) with ``args``, run by this Python in a
    temporary copy of the tree (no .git, no .whl) with the unified diffs ``diffs`` (paths relative to
    the root) applied by git apply, then each (path, old, new) of ``patches`` (``old`` must occur
    exactly once), the copy first on PYTHONPATH."""
    with tempfile.TemporaryDirectory() as tree:
        shutil.copytree(ROOT, tree, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", ".whl"))
        for diff in diffs:
            subprocess.run(["git", "apply", os.path.join(ROOT, diff)], cwd=tree, check=True)
        for rel, old, new in patches:
            path = os.path.join(tree, rel)
            src = open(path).read()
            assert src.count(old) == 1, (rel, old)
            open(path, "w").write(src.replace(old, new))
        path = os.pathsep.join([tree] + os.environ.get("PYTHONPATH", "").split(os.pathsep)[:1])
        env = {**os.environ, "PYTHONPATH": path}
        return subprocess.run([sys.executable, os.path.join(tree, script), *args], capture_output=True, text=True,
                              cwd=tree, env=env)


def alternate_forms(script, forms, rounds: int = 2) -> None:
    """For each round, each (form, diffs) of ``forms`` in turn: ``script --inner <form>`` run by
    run_patched with ``diffs``; prints its output (or the end of its errors) under "round r form"."""
    for r in range(rounds):
        for form, diffs in forms:
            res = run_patched((), script, "--inner", form, diffs=diffs)
            print(f"round {r} {form}\n{res.stdout.rstrip() or res.stderr.strip()[-600:]}", flush=True)
