"""The Gluon forward with its query tiles loaded by TMA in the producer, first, beside the first
K/V tiles (2026-11-28_flash_q_tma.patch: hopper._forward_producer, the Q, K and V descriptors made
there; the consumers wait on a q_ready barrier), against the kernel before it (the 4 default warps
load Q, then the producer starts; its hopper.py given as argv[1], loaded beside the patched one)
through the same plan: o and lse bit for bit, then forward times against SDPA cuDNN's. do_bench
medians, best of 3 alternating rounds (tools/ab.alternate; us). Not a test. Prepared in session
45 (compiles for sm_90 alike for torch and JAX, scratch checks pass: test_compile_sm90 -k 'gluon
or scratch'), not run: no device time was left. On the GPU machine:
    cp ato_core/ops/flash_attention/hopper.py /tmp/old_hopper.py
    git apply benchmarks/experiments/2026-11-28_flash_q_tma.patch
    source benchmarks/tools/gpu_env.sh
    python benchmarks/experiments/2026-11-28_flash_q_tma.py /tmp/old_hopper.py
Then, if it is faster: the GPU tier -k '(hopper and not block_sparse) or flash_attention_cross'
(the tests expect fa_fwd_hopper_kernel still), memcheck, and flash_gluon.txt 30. The same A/B
serves 2026-11-28_flash_stale_max.patch (its o differs from the old kernel's in rounding: the
differences are printed).
"""
import dataclasses
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import ato_torch
from ato_core.launch import Plan
from ato_core.ops.flash_attention import plans
from ato_core.target import cuda_target
from ato_torch.launcher import run_plan, spec
from benchmarks.tools.ab import alternate, module_from_source

old = module_from_source(open(sys.argv[1]).read(), "ato_core/ops/flash_attention/hopper.py", "old")


def old_forward(q, k, v, causal, **kw):
    """The old kernel on the current plan's launch (its scratch output is larger than it needs)."""
    target = cuda_target(q.device.index or 0)
    options = plans.Options(window=plans.check_window(kw.get("window_size")), softcap=kw.get("softcap"))
    plan = plans.forward_plan(spec(q, "q"), spec(k, "k"), spec(v, "v"), causal=causal, softmax_scale=None,
                              target=target, options=options)
    (launch,) = plan.launches
    assert launch.name == "fa_fwd_hopper_kernel"
    plan = Plan((dataclasses.replace(launch, kernel=old.fa_fwd_hopper_kernel),), ("o", "lse"))
    return lambda: run_plan(plan, {"q": q, "k": k, "v": v}, target)


def rand(*shape, g):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)


def main():
    print(f"GPU {torch.cuda.get_device_name()}; bf16 D128, the Gluon forward", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    ok = True
    for B, Hq, Hkv, Nq, Nk, causal, kw in [(2, 8, 2, 1000, 1500, True, dict(window_size=(300, 0))),
                                           (2, 8, 2, 777, 300, False, {}), (3, 2, 2, 1, 1, True, {}),
                                           (2, 4, 4, 700, 700, False, dict(window_size=(100, 50), softcap=20.0)),
                                           (1, 4, 1, 129, 4097, True, {})]:
        q, k, v = rand(B, Hq, Nq, 128, g=g), rand(B, Hkv, Nk, 128, g=g), rand(B, Hkv, Nk, 128, g=g)
        o, lse = ato_torch.flash_attention(q, k, v, causal=causal, return_lse=True, **kw)
        o_old, lse_old = old_forward(q, k, v, causal, **kw)()
        same = torch.equal(o, o_old) and torch.equal(lse, lse_old)
        ok &= same
        diff = (o.float() - o_old.float()).abs().max() / o_old.float().abs().max()
        print(f"  B{B} Hq{Hq} Hkv{Hkv} {Nq}x{Nk} causal={causal} {kw}: o, lse == old kernel's {same}"
              + ("" if same else f" (max |o - o_old| / max |o_old| {float(diff):.2e},"
                 f" lse {float((lse - lse_old).abs().max()):.2e})"), flush=True)
    print("bits:", ok, flush=True)
    for B, Hq, Hkv, N, causal, kw in [(4, 32, 32, 4096, False, {}), (4, 32, 32, 4096, True, {}),
                                      (1, 32, 32, 16384, True, {}), (1, 32, 32, 16384, True, dict(window_size=(4096, 0))),
                                      (2, 32, 8, 8192, True, {}), (16, 16, 16, 1024, True, {})]:
        q, k, v = rand(B, Hq, N, 128, g=g), rand(B, Hkv, N, 128, g=g), rand(B, Hkv, N, 128, g=g)
        fns = {"new": lambda: ato_torch.flash_attention(q, k, v, causal=causal, **kw),
               "old": old_forward(q, k, v, causal, **kw)}
        if not kw:
            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
            fns["cuDNN"] = sdpa
        t = alternate(fns, 3, lambda f: do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3)
        b = {n: min(x) for n, x in t.items()}
        line = (f"  B{B} Hq{Hq} Hkv{Hkv} N{N} {'causal' if causal else 'full'} {kw or ''}: new {b['new']:8.1f}"
                f"  old {b['old']:8.1f} us  new / old {b['new'] / b['old']:.3f}")
        if "cuDNN" in b:
            line += f"  cuDNN {b['cuDNN']:8.1f}  new / cuDNN {b['new'] / b['cuDNN']:.3f} (old {b['old'] / b['cuDNN']:.3f})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
