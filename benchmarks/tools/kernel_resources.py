"""Registers, spills and shared memory of every ato kernel compiled so far in this process,
as the GPU loaded them (Triton's CompiledKernel: n_regs, and n_spills, the local memory a
thread in bytes, from the driver), for the shapes actually run. tests/test_compile_sm90.py
compiles its own example shapes on a CPU, whose numbers can differ (ptxas sees other
constants there).

    sys.path.insert(0, "benchmarks/tools"); from kernel_resources import report
    ...run ops...
    print(report())

or, on the GPU machine: python3 benchmarks/tools/kernel_resources.py flash_attention based
(runs each family's bench shape forward and backward from torch, then reports).
"""
import importlib
import pkgutil
import sys

import ato_core.ops

_KEYS = ("BLOCK_M", "BLOCK_N", "BM", "BV", "FT", "CHUNK", "BD", "CAUSAL")


def _kernels():
    for info in pkgutil.iter_modules(ato_core.ops.__path__):
        try:
            mod = importlib.import_module(f"ato_core.ops.{info.name}.kernels")
        except ImportError:
            continue
        for name, obj in vars(mod).items():
            if getattr(obj, "ato_io", None) is not None:
                yield name, obj


def report() -> str:
    rows = []
    seen = set()
    for name, jit in _kernels():
        for caches in getattr(jit, "device_caches", {}).values():
            for compiled in caches[0].values():
                if id(compiled) in seen:
                    continue
                seen.add(id(compiled))
                compiled._init_handles()
                md = compiled.metadata
                consts = {k[0] if isinstance(k, tuple) else k: v for k, v in compiled.src.constants.items()} \
                    if hasattr(compiled, "src") and hasattr(compiled.src, "constants") else {}
                names = [p.name for p in jit.params]
                picked = " ".join(f"{names[i]}={v}" for i, v in consts.items()
                                  if isinstance(i, int) and i < len(names) and names[i] in _KEYS)
                rows.append(f"{name:32s} regs {compiled.n_regs:3d}  spills {compiled.n_spills:5d}  "
                            f"shared {md.shared:6d}  warps {md.num_warps}  stages {md.num_stages}  {picked}")
    return "\n".join(rows)


def _run_flash():
    import torch
    import ato_torch
    for causal in (False, True):
        q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        ato_torch.flash_attention(q, k, v, causal=causal).sum().backward()


def _run_based():
    import torch
    import ato_torch
    q, k = (torch.randn(8, 16, 4096, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    v = torch.randn(8, 16, 4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ato_torch.based_attention(q, k, v).float().sum().backward()


if __name__ == "__main__":
    for family in sys.argv[1:]:
        {"flash_attention": _run_flash, "based": _run_based}[family]()
    import torch
    torch.cuda.synchronize()
    print(report())
