"""The instruction mix of each loop of an op's kernels as ptxas compiles them for an H100 (sm_90),
on this machine (no GPU): every launch of the op's forward and backward plans (the bench's bf16
specs), disassembled with the nvdisasm in Triton's wheel; per loop (a backward branch) the
instruction count, the count without uniform-datapath instructions, and the opcode mix. Not a test.

    python benchmarks/tools/sass_loops.py OP 'SHAPE;SHAPE[@DTYPE];...' ['{"kwarg": value}']   (bf16 by default)
    e.g. python benchmarks/tools/sass_loops.py flash_attention '4,32,4096,128;4,32,4096,128;4,32,4096,128' '{"causal": true, "softcap": 50.0}'

Used for flash attention's softcap in session 33 (results: flash_options-ab.txt).
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="ato-sass-"))

import triton  # noqa: E402

import test_compile_sm90 as base  # noqa: E402
from ato_core.ops import OPS  # noqa: E402
from ato_core.testing import compile_plans, gpu_spec, h100  # noqa: E402

NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")


def loops(sass: str):
    """(instructions, opcode Counter) of each loop of a disassembly: from a label to the branch back to it."""
    ins, labels = [], {}
    for line in sass.splitlines():
        m = re.match(r"\.(L_x_\d+):", line.strip())
        if m:
            labels[m.group(1)] = len(ins)
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1).strip())
    for i, text in enumerate(ins):
        m = re.search(r"BRA\s+`\(\.?(L_x_\d+)\)", text)
        if m and labels.get(m.group(1), i + 1) <= i:
            body = ins[labels[m.group(1)]:i + 1]
            yield body, collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0].split(".")[0] for x in body)


def main():
    op = OPS[sys.argv[1]]
    args = tuple(gpu_spec(tuple(map(int, shape.split(","))), *dtype) for shape, *dtype in
                 (a.split("@") for a in sys.argv[2].split(";")))
    kwargs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    for (plan, specs), tag in zip(compile_plans(op, args, kwargs, h100(), True), ("fwd", "bwd")):
        for launch in plan.launches:
            compiled = base.compile_sm90(launch, plan, specs)
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(compiled.asm["cubin"])
                f.flush()
                sass = subprocess.run([NVDISASM, "-c", f.name], capture_output=True, text=True, check=True).stdout
            for body, mix in loops(sass):
                if len(body) < 8:
                    continue
                plain = sum(n for k, n in mix.items() if not k.startswith("U"))
                print(f"{tag} {launch.name}: loop of {len(body)} instructions ({plain} non-uniform) "
                      + " ".join(f"{k} {n}" for k, n in mix.most_common(16)))


if __name__ == "__main__":
    main()
