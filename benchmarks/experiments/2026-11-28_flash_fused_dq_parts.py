"""Issue 22: where the fused-dQ dK / dV kernel's time goes (plans.HOPPER_FUSED_DQ; session 38's
form: each warpgroup half of dQ's columns, vector reds in turn). The kernel timed as it is and
in variants made by editing hopper.py's source (timing only; the variants' dq is not a gradient):
no wait for the turn (reds in any order), no wait and plain stores instead of reds, no memory
operation at all (the dQ wgmmas only; masks false at run time), and the reds 16 bytes wide
(dQ converted to a row-major layout first), in turn or not. On an sm_90 GPU, under a timeout.

    python3 benchmarks/experiments/2026-11-28_flash_fused_dq_parts.py

The fused form is gone from hopper.py since session 38 (measured slower; results README); it runs at commit f7500f4.
"""
import importlib.util
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from ato_core.ops.flash_attention import plans  # noqa: E402

SPIN = "seen = gl.inline_asm_elementwise(_WAIT, \"=r,l,r\", [turn, target], gl.int32, is_pure=False, pack=1)"
RED = "    gl.atomic_add(DQS + dqs_off"
RED_TAIL = "mask=(rows < Nq)[:, None], sem=\"relaxed\", scope=\"gpu\")"
V4 = ("    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))\n    rows = i * ROWS + offs_r\n",
      "    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))\n"
      "    v4: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])\n"
      "    dq = gl.convert_layout(dq, v4)\n"
      "    offs_r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, v4))\n"
      "    offs_d = w * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, v4))\n"
      "    rows = i * ROWS + offs_r\n")
VARIANTS = {
    "as is": [],
    "no wait": [(SPIN, "seen = target")],
    "no wait, stores": [(SPIN, "seen = target"), (RED, "    gl.store(DQS + dqs_off"),
                        (RED_TAIL, "mask=(rows < Nq)[:, None])")],
    "no memory op": [(SPIN, "seen = target"),
                     (RED_TAIL, "mask=(rows < -Nq)[:, None], sem=\"relaxed\", scope=\"gpu\")"),
                     ("mask=lane == 0, sem=\"release\"", "mask=lane < -Nq, sem=\"release\"")],
    "v4 reds": [V4],
    "v4 reds, no wait": [V4, (SPIN, "seen = target")],
}
SHAPES = [(4, 32, 32, 4096, 4096, False), (4, 32, 32, 4096, 4096, True), (2, 32, 8, 8192, 8192, True)]


def variant(name, edits):
    src = open(os.path.join(ROOT, "ato_core", "ops", "flash_attention", "hopper.py")).read()
    for old, new in edits:
        assert old in src, (name, old)
        src = src.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), f"hopper_{len(edits)}_{abs(hash(name))}.py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    import torch
    import triton

    import ato_torch
    from ato_torch.launcher import run_plan, spec, target_for

    print("GPU", torch.cuda.get_device_name(), flush=True)
    mods = {name: variant(name, edits) for name, edits in VARIANTS.items()}
    real = plans.kern.hopper
    plans.HOPPER_FUSED_DQ = True
    for B, Hq, Hkv, Nq, Nk, causal in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(o)
        target = target_for(q)
        env = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse}
        row = []
        for name, mod in mods.items():
            plans.kern.hopper = mod
            plans.backward_plan.cache_clear()
            try:
                plan = plans.backward_plan(*(spec(t) for t in (q, k, v, do)), causal=causal, softmax_scale=None,
                                           has_dlse=False, target=target)
                delta = type(plan)(plan.launches[:1], ("lse2", "delta"))
                scratch = dict(env, **dict(zip(delta.results, run_plan(delta, env, target))))
                dkdv = type(plan)(plan.launches[1:2], ("dk", "dv", "dq_sum"))
                t = triton.testing.do_bench(lambda: run_plan(dkdv, scratch, target), warmup=25, rep=200) * 1e3
            finally:
                plans.kern.hopper = real
                plans.backward_plan.cache_clear()
            row.append(f"{name} {t:8.1f} us")
        print(f"B{B} Hq{Hq} Hkv{Hkv} N{Nq} {'causal' if causal else 'full'}: dK / dV fused: " + " | ".join(row),
              flush=True)


if __name__ == "__main__":
    main()
