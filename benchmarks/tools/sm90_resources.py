"""Registers, stack and shared memory of every launch of the compile examples
(tests/test_compile_sm90.py's plans: every family's cases.COMPILE), compiled for sm_90 on
this machine (no GPU needed), as cuobjdump -res-usage reads them from each cubin, and the
programs an SM that the registers and the shared memory allow (H100: 65536 registers, 228 KB).
STACK is a thread's local memory: spills and local arrays. A kernel held to 2 or fewer programs
an SM by its registers is a candidate for a cap (Launch.maxnreg): --maxnreg N compiles every
launch under N instead of its own cap, to show what the cap would cost in stack. The GPU
loads the same binaries; benchmarks/tools/kernel_resources.py reads them there for the bench
shapes.

    python benchmarks/tools/sm90_resources.py [--maxnreg N] [--only LABEL_SUBSTRING]
"""

import dataclasses
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="ato-sm90-"))

import test_compile_sm90 as base  # noqa: E402

SM_REGISTERS, SM_SHARED, SM_WARPS = 65536, 233472, 64


def programs_per_sm(regs: int, warps: int, shared: int) -> int:
    """Resident programs an SM: registers are allocated per warp in units of 256."""
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = SM_REGISTERS // (per_warp * warps)
    by_shared = SM_SHARED // shared if shared else by_regs
    return min(by_regs, by_shared, SM_WARPS // warps)


def main():
    cap = int(sys.argv[sys.argv.index("--maxnreg") + 1]) if "--maxnreg" in sys.argv else None
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    print(f"{'example:launch':64s} {'regs':>4s} {'stack':>6s} {'shared':>7s} warps  programs/SM  cap")
    for name, plan, inputs in base.PLANS:
        if only not in name:
            continue
        for i, launch in enumerate(plan.launches):
            if cap is not None:
                launch = dataclasses.replace(launch, maxnreg=cap)
            compiled = base.compile_sm90(launch, plan, inputs)
            res = base.cubin_resources(compiled.asm["cubin"])
            shared = compiled.metadata.shared
            progs = programs_per_sm(res["REG"], launch.num_warps, shared)
            print(f"{name + ':' + str(i) + ':' + launch.name:64s} {res['REG']:4d} {res['STACK']:6d} {shared:7d} "
                  f"{launch.num_warps:5d} {progs:12d}  {launch.maxnreg or '-'}", flush=True)


if __name__ == "__main__":
    main()
