"""What the block kernels' state reads cost: based_fwd_kernel, based_bwd_dq_kernel and
based_bwd_dkdv_kernel timed alone (B8 H16 N4096 d16 Dv64 bf16, causal) on the start states
in fp32 and in bf16 (half the bytes; the dots round them to bf16 anyway). Run before the scan
wrote them in bf16 (results: NVIDIA_H100_80GB_HBM3-based-blocks.txt, section 4a); since then
the fp32 column reads the bf16 states widened. Not a test.

On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``, from the repository root:
    python benchmarks/experiments/2026-11-24_based_state_dtype.py
"""
import torch
from triton.testing import do_bench

from ato_core.launch import Plan
from ato_core.ops.based import plans
from ato_torch.launcher import run_plan, spec, target_for

dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter, a plumbing check
B, H, N, d, Dv = (8, 16, 4096, 16, 64) if dev == "cuda" else (1, 1, 100, 16, 64)
g = torch.Generator(device=dev).manual_seed(0)
q, k = (torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
v, do = (torch.randn(B, H, N, Dv, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
target = target_for(q)
fwd, _ = plans.forward_plan(spec(q), spec(k), spec(v), causal=True, scale=None, eps=1e-6, initial_state=None,
                            target=target)
bwd = plans.backward_plan(spec(q), spec(k), spec(v), spec(do), causal=True, scale=None, eps=1e-6,
                          has_dfinal=False, target=target)
env = {"q": q, "k": k, "v": v, "do": do, "init_S": None, "init_z": None}
env.update(zip(fwd.results, run_plan(fwd, env, target)))
env["S_res"], env["z_res"] = env["S_start"], env["z_start"]
head = tuple(ln for ln in bwd.launches if ln.name in ("based_bwd_g_kernel", "based_bwd_state_kernel",
                                                        "la_scan_kernel"))
env.update(zip(("g", "R_start", "r_start"), run_plan(Plan(head, ("g", "R_start", "r_start")), env, target)))
name = torch.cuda.get_device_name() if dev == "cuda" else "none (interpreter)"
print(f"GPU {name}; block kernels alone, B{B} H{H} N{N} d{d} Dv{Dv} bf16 causal, "
      f"do_bench medians (us)")
for launch in (*fwd.launches, *bwd.launches):
    if launch.name not in ("based_fwd_kernel", "based_bwd_dq_kernel", "based_bwd_dkdv_kernel"):
        continue
    one = Plan((launch,), (launch.outputs[0].name,))
    states = [n for n in launch.inputs if n in ("S_start", "S_res", "R_start")]
    times = []
    for dtype in (torch.float32, torch.bfloat16):
        arrays = {n: env[n] for n in launch.inputs}
        arrays.update({n: env[n].to(dtype) for n in states})
        if dev == "cpu":
            run_plan(one, arrays, target)
            times.append(1.0)
            continue
        times.append(do_bench(lambda: run_plan(one, arrays, target), warmup=10, rep=200, return_mode="median"))
    print(f"{launch.name:28s} state fp32 {times[0] * 1e3:7.1f}  bf16 {times[1] * 1e3:7.1f}  "
          f"({times[1] / times[0]:.2f}x)", flush=True)
