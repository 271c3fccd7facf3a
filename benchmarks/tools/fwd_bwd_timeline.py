"""Where a forward+backward's time goes under ``ato bench``'s timing (not a test).

``ato bench`` times a torch callable with triton.testing.do_bench: per call, a 256 MB L2
flush (a fill kernel), a CUDA event, the call, a CUDA event; the time between the events.
When the host issues the call's kernels more slowly than the GPU runs them, the GPU waits
between them and that wait is in the measured time. This script runs that same loop under
CUPTI (torch.profiler, CUDA activity only: kernels and the runtime/driver calls that launch
them, no CPU-op tracing) and reports, per op, the median over the calls of:

- ``events``: the do_bench time (CUDA events around the call);
- ``kernels``: the device time of the call's kernels;
- ``GPU idle``: time inside the call with no kernel of it running (host-bound wait);
- per kernel: when its launch was issued on the host (us after the flush's launch), when it
  started on the device (us after the flush ended) and how long it ran.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
python benchmarks/tools/fwd_bwd_timeline.py [--calls N]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile

import torch
import torch.nn.functional as F

import ato_torch
from ato_cli.bench import _torch_fwd_bwd, liger

def _trace(fn, calls: int):
    """(chrome trace events, do_bench-style event times in us) of ``calls`` flushed calls."""
    from torch.profiler import ProfilerActivity, profile
    from triton.runtime import driver

    active = driver.active  # do_bench's own L2 flush: its buffer, and a fill kernel over it
    cache = active.get_empty_cache_for_benchmark()
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            active.clear_cache(cache)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return events, times


def _calls(events, flush_us: float = 20.0):
    """The trace cut into calls: per call, the flush (launch ts, kernel end) and the call's
    kernels as (name, launch ts, kernel start, duration), in launch order. The flush is the
    fill kernel that runs longer than ``flush_us`` (256 MB: about 90 us on an H100)."""
    launches, kernels = {}, {}
    for ev in events:
        corr = (ev.get("args") or {}).get("correlation")
        if corr is None or ev.get("ph") != "X":
            continue
        if ev.get("cat") == "kernel":
            kernels[corr] = (ev["name"], float(ev["ts"]), float(ev["dur"]))
        elif ev.get("cat") in ("cuda_runtime", "cuda_driver"):
            launches[corr] = float(ev["ts"])
    seq = sorted((launches[c], name, start, dur) for c, (name, start, dur) in kernels.items() if c in launches)
    calls = []
    for launch, name, start, dur in seq:
        if "fill" in name.lower() and dur > flush_us:  # the 256 MB flush opens a call
            calls.append({"flush": (launch, start + dur), "kernels": []})
        elif calls:
            calls[-1]["kernels"].append((name, launch, start, dur))
    return [c for c in calls if c["kernels"]]


def report(label: str, fn, calls: int) -> list[str]:
    events, times = _trace(fn, calls)
    per_call = _calls(events)
    shapes = collections.Counter(tuple(k[0] for k in c["kernels"]) for c in per_call)
    names, _ = shapes.most_common(1)[0]
    same = [c for c in per_call if tuple(k[0] for k in c["kernels"]) == names]
    busy = [sum(k[3] for k in c["kernels"]) for c in same]
    span = [max(k[2] + k[3] for k in c["kernels"]) - c["flush"][1] for c in same]
    idle = [s - b for s, b in zip(span, busy)]
    med = statistics.median
    lines = [f"{label:<28} events {med(times):7.1f} us   kernels {med(busy):7.1f} us   GPU idle {med(idle):7.1f} us"
             f"   ({len(same)} of {len(per_call)} calls with the usual kernels)"]
    for i, name in enumerate(names):
        issued = med(c["kernels"][i][1] - c["flush"][0] for c in same)
        started = med(c["kernels"][i][2] - c["flush"][1] for c in same)
        ran = med(c["kernels"][i][3] for c in same)
        lines.append(f"    {name[:44]:<44} issued {issued:7.1f}   started {started:7.1f}   ran {ran:7.1f}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args()
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    M, N = 16384, 4096
    x, w, b, dy = (torch.randn(*s, device=dev, dtype=bf, generator=g) for s in ((M, N), (N,), (N,), (M, N)))
    fns = {
        "ato_torch layer_norm": _torch_fwd_bwd(lambda a, ww, bb: ato_torch.layer_norm(a, ww, bb), (x, w, b), dy),
        "torch eager layer_norm": _torch_fwd_bwd(lambda a, ww, bb: F.layer_norm(a, (N,), ww, bb, 1e-5), (x, w, b), dy),
    }
    lf = liger("liger_kernel.ops.layer_norm:LigerLayerNormFunction")
    if lf:
        fns["Liger layer_norm"] = _torch_fwd_bwd(lambda a, ww, bb: lf.apply(a, ww, bb, 1e-5), (x, w, b), dy)
    print(f"GPU {torch.cuda.get_device_name()}; forward+backward {M}x{N} bf16, do_bench's loop under CUPTI, "
          f"median of {args.calls} calls; 'issued': host us after the flush's launch, 'started': device us "
          "after the flush ended", flush=True)
    for label, fn in fns.items():
        print("\n".join(report(label, fn, args.calls)), flush=True)


if __name__ == "__main__":
    main()
