"""Issue 25: two variants of the dropout draw, alone and together, against the tree's, where the producers' draws
bound dropout (the forward 1.45x plain's time, dQ 1.34x; NVIDIA_H200-flash_gluon.txt 40):

    DRAW_CALLS 2  two Philox calls a loop step (hopper.DRAW_CALLS, 1 in the tree): two independent chains a
                  thread, so that one call's latency hides behind the other's
    mask bits     2026-11-29_flash_mask_bits.patch: the masks as bits, all ones kept, zeros dropped, applied by
                  bitwise ands (hopper._kept) instead of multiplies by 1.0 / 0: the draw 62 instructions a
                  Philox call against 70 (no `& 1.0`), dQ's consumer tile 446 against 463 (sm_90 compile)

Each variant in a process of its own over a copy of the tree (tools/patched_tree.py):
2026-11-29_flash_dropout_kernel_times.py's kernel-by-kernel times (plain, dropout with an int seed and a seed
tensor, ratios against plain in the same process) and a hash of the dropout forward's o, whose bits must not
change (p >= 0: p and 1.0 are p, p and 0 are +0, as the multiplies give).

    python3 benchmarks/experiments/2026-11-29_flash_draw_variants.py
"""
import hashlib
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HOPPER = os.path.join("ato_core", "ops", "flash_attention", "hopper.py")
LINE = "DRAW_CALLS = gl.constexpr(1)"


def one():
    """This tree's kernel times and a hash of the dropout forward's o."""
    path = os.path.join(HERE, "2026-11-29_flash_dropout_kernel_times.py")
    spec = importlib.util.spec_from_file_location("kernel_times", path)
    times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(times)
    import ato_torch

    sys.argv = sys.argv[:1]
    times.main()
    q, k, v, _ = times.inputs()
    o = ato_torch.flash_attention(q, k, v, causal=True, dropout_p=0.1, seed=7)
    print("o sha1", hashlib.sha1(o.float().cpu().numpy().tobytes()).hexdigest(), flush=True)


def main():
    if "--one" in sys.argv:
        return one()
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "tools"))
    from patched_tree import run_patched

    calls2 = [(HOPPER, LINE, LINE.replace("(1)", "(2)"))]
    bits = [os.path.join("benchmarks", "experiments", "2026-11-29_flash_mask_bits.patch")]
    for label, patches, diffs in (("tree", [], []), ("DRAW_CALLS 2", calls2, []), ("mask bits", [], bits),
                                  ("both", calls2, bits)):
        out = run_patched(patches, os.path.join("benchmarks", "experiments", os.path.basename(__file__)), "--one",
                          diffs=diffs)
        print(f"{label}:", flush=True)
        lines = [x for x in out.stdout.splitlines() if "warn" not in x.lower()]
        print("\n".join(lines) or out.stderr[-3000:], flush=True)


if __name__ == "__main__":
    main()
