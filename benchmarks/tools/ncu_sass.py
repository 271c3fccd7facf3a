"""Where a kernel's time goes, instruction by instruction: reads Nsight Compute's source page
(SASS with warp-stall sampling, which works on the H100 and H200 machines) and prints, per
kernel, the stall reasons, the opcode mix (share of instructions executed and of stall samples),
and the hottest instructions with their two main stall reasons. Not a test. On the GPU machine:

    ncu --kernel-name regex:NAME --launch-skip K --launch-count 1 --section SourceCounters \\
        --section WarpStateStats --section InstructionStats --import-source yes \\
        --export $OUT/prof -f python3 SCRIPT
    ncu --import $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv
    python3 benchmarks/tools/ncu_sass.py $OUT/sass.csv [TOP]

(here or there: the csv is plain text). Used for Based's walk in session 28 (results:
NVIDIA_H100_80GB_HBM3-based-walk.txt section 8).
"""
import csv
import sys


def kernels(text):
    """(kernel name, header, rows) of each kernel in the csv."""
    for block in text.split('"Kernel Name",')[1:]:
        name = block.split(",")[0].strip('"')
        rows = list(csv.reader(block.splitlines()[1:]))
        header = rows[0]
        yield name, header, [r for r in rows[1:] if len(r) == len(header)]


def opcode(sass):
    words = sass.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def report(name, header, rows, top):
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed")
    stalls = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    total_s = sum(float(r[samples]) for r in rows) or 1.0
    total_e = sum(float(r[executed]) for r in rows) or 1.0
    print(f"{name}: {len(rows)} instructions, {total_e:.0f} executed (warp level), {total_s:.0f} stall samples")
    reasons = sorted(((sum(float(r[i]) for r in rows), header[i][6:]) for i in stalls), reverse=True)
    print("  stalls: " + ", ".join(f"{k} {v / total_s:.0%}" for v, k in reasons[:8] if v))
    mix = {}
    for r in rows:
        e, s = mix.get(opcode(r[1]), (0.0, 0.0))
        mix[opcode(r[1])] = (e + float(r[executed]), s + float(r[samples]))
    print("  opcodes (executed / samples): " + ", ".join(
        f"{o} {e / total_e:.0%}/{s / total_s:.0%}" for o, (e, s) in sorted(mix.items(), key=lambda kv: -kv[1][1])[:14]))
    print(f"  hottest {top} (index, executed, samples, instruction, stalls):")
    for n, r in sorted(enumerate(rows), key=lambda nr: -float(nr[1][samples]))[:top]:
        why = sorted(((float(r[i]), header[i][6:]) for i in stalls), reverse=True)[:2]
        print(f"  {n:5d} {float(r[executed]):10.0f} {float(r[samples]) / total_s:6.2%}  {r[1].strip()[:64]:64s} "
              + " ".join(f"{k}:{v:.0f}" for v, k in why if v))


def main():
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    for name, header, rows in kernels(open(sys.argv[1]).read()):
        report(name, header, rows, top)
        print()


if __name__ == "__main__":
    main()
