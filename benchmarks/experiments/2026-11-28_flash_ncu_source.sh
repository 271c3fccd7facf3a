# Where the Gluon forward's warps stall: Nsight Compute's per-SASS-instruction stall samples of one call of
# benchmarks/experiments/2026-11-28_flash_ncu.py ato_fwd_full, summed by opcode, and the 40 instructions with the most.
source benchmarks/tools/gpu_env.sh >/dev/null 2>&1
timeout 300 ncu --nvtx --nvtx-include "profile/" --section WarpStateStats --section SourceCounters --page source \
    --print-source sass --csv python3 benchmarks/experiments/2026-11-28_flash_ncu.py ato_fwd_full > /tmp/src.csv 2>&1
echo "ncu rc $? $(wc -l < /tmp/src.csv) lines"
python3 - <<'PY'
import csv, collections, io
lines = open("/tmp/src.csv").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"') and "Source" in l)
rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
print("columns:", list(rows[0].keys())[:20])
key = next(k for k in rows[0] if "Stall Sampling (All" in k)
nkey = next((k for k in rows[0] if "Not-issued" in k or "Not Issued" in k), None)
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
total = sum(num(r[key]) for r in rows)
by_op = collections.Counter()
for r in rows:
    by_op[r["Source"].split()[0] if r["Source"].strip() else "?"] += num(r[key])
print(f"samples {total:.0f}; by opcode (share):")
for op, v in by_op.most_common(25):
    print(f"  {op:24s} {v / total:6.3f}")
print("top instructions:")
for r in sorted(rows, key=lambda r: -num(r[key]))[:40]:
    print(f"  {num(r[key]) / total:6.3f} {num(r[nkey]) / total if nkey else 0:6.3f}  {r.get('Address', r.get('# Address', ''))}  {r['Source'][:90]}")
PY
