"""Fingerprints of the sm_90 PTX of every op's GPU plan (not a test; no GPU needed).

A refactor of kernel code that should not change what runs (a shared @triton.jit helper, a
renamed variable) can be checked without a GPU: run this before and after, and compare.
Line information (.loc, DWARF sections, $L__tmp labels) is left out, so moving code within a
file changes nothing. Plans: tests/test_compile_sm90.py's, plus norms and softmax at a
single-piece and a looped width, and the linear_attention backward with separate dk and dv kernels.

    python benchmarks/ptx_fingerprint.py [--dump DIR] > before.txt
"""

import hashlib
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="ato-ptx-"))

import test_compile_sm90 as base  # noqa: E402
from ato_core import norms, softmax  # noqa: E402


def plans():
    yield from base.PLANS
    # a [256, 256] state: the backward's separate dk and dv kernels
    yield from base.linear_attention_plans(base._spec((2, 4, 512, 256)), "linear_attention D256")
    for N in (1000, 65536):
        x, w = base._spec((64, N)), base._spec((N,))
        h100 = base.H100
        yield f"ln{N}", norms.forward_plan(x, None, w, w, rms=False, eps=1e-5, p=0.0, seed=0, target=h100), \
            {"x": x, "weight": w, "bias": w}
        yield f"rms{N}", norms.forward_plan(x, None, w, None, rms=True, eps=1e-5, p=0.0, seed=0, target=h100), \
            {"x": x, "weight": w}
        yield f"drln{N}", norms.forward_plan(x, x, w, w, rms=False, eps=1e-5, p=0.1, seed=0, target=h100), \
            {"x": x, "residual": x, "weight": w, "bias": w}
        yield f"softmax{N}", softmax.forward_plan(x, temperature=1.0, target=h100), {"x": x}
        yield f"softmax bwd{N}", softmax.backward_plan(x, temperature=1.0, target=h100), {"y": x, "dy": x}


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
