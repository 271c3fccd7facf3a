"""Fingerprints of the sm_90 PTX of every op's GPU plan (not a test; no GPU needed).

A refactor of kernel code that should not change what runs (a shared @triton.jit helper, a
renamed variable) can be checked without a GPU: run this before and after, and compare.
Line information (.loc, DWARF sections, $L__tmp labels) is left out, so moving code within a
file changes nothing. Plans: tests/test_compile_sm90.py's (every family's cases.COMPILE).

    python benchmarks/tools/ptx_fingerprint.py [--dump DIR] > before.txt
"""

import hashlib
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="ato-ptx-"))

import test_compile_sm90 as base  # noqa: E402


def plans():
    yield from base.PLANS


def ptx(launch, plan, inputs) -> str:
    text = base.compile_sm90(launch, plan, inputs).asm["ptx"]
    text = text.split(".section\t.debug")[0].split(".section .debug")[0]
    return "\n".join(line for line in text.splitlines()
                     if not line.strip().startswith((".loc", ".file", "//", "$L__tmp")))


def main():
    dump = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
    for name, plan, inputs in plans():
        for i, launch in enumerate(plan.launches):
            text = ptx(launch, plan, inputs)
            print(f"{name}:{i}:{launch.name} {hashlib.sha1(text.encode()).hexdigest()[:12]}", flush=True)
            if dump:
                os.makedirs(dump, exist_ok=True)
                with open(os.path.join(dump, f"{name.replace(' ', '_')}-{i}.ptx"), "w") as f:
                    f.write(text)


if __name__ == "__main__":
    main()
