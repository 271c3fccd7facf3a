"""The persistent Gluon forward with kv lengths (plans.PERSISTENT_KV_LENS: the consumers zero the
last V tile's rows past a batch's keys, hopper._zero_rows_from) against one item a program: o
and lse bit for bit, with the keys and values past the lengths NaN (no NaN out), then the
forward's time at flash_options' lengths row (B4 H32 N4096 D128 causal, full lengths) against
plain causal. do_bench medians, best of 3 alternating rounds. Not a test. On the GPU machine,
after ``source benchmarks/tools/gpu_env.sh`` (a wrong barrier phase hangs: run it under a timeout):
    timeout 200 python benchmarks/experiments/2026-11-28_flash_persistent_kv_lengths.py
"""
import sys

import torch
from triton.testing import do_bench

import ato_torch
from ato_core.ops import OPS
from ato_core.ops.flash_attention import plans

sys.path.insert(0, "benchmarks/tools")
from ab import launched  # noqa: E402

CASES = [((3, 4, 2, 1000, 1000), dict(causal=True)),
         ((3, 4, 4, 777, 900), dict(causal=False, window_size=(100, 50), softcap=20.0))]


def kv_persistent(on):
    plans.PERSISTENT_KV_LENS = on
    plans.forward_plan.cache_clear()
    OPS["flash_attention"].cached_forward.cache_clear()


def bits():
    g = torch.Generator(device="cuda").manual_seed(0)
    ok = True
    for (B, Hq, Hkv, Nq, Nk), kw in CASES:
        q = torch.randn(B, Hq, Nq, 128, device="cuda", generator=g).to(torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Nk, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        lens = [Nk, Nk // 3, 0][:B]
        for b, n in enumerate(lens):
            k[b, :, n:] = float("nan")
            v[b, :, n:] = float("nan")
        kv_lengths = torch.tensor(lens, device="cuda", dtype=torch.int32)
        out = {}
        for on in (True, False):
            kv_persistent(on)
            call = lambda: ato_torch.flash_attention(q, k, v, kv_lengths=kv_lengths, return_lse=True, **kw)  # noqa
            out[on] = call()
            print(f"  {on}: {launched(call, 'fa_fwd')}", flush=True)
        same = all(torch.equal(a, b) for a, b in zip(out[True], out[False]))
        finite = not out[True][0].isnan().any()
        ok &= same and finite
        print(f"  B{B} Hq{Hq} Hkv{Hkv} {Nq}x{Nk} {kw}: bits equal {same}, no NaN {finite}", flush=True)
    return ok


def timings():
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    full = torch.full((4,), 4096, device="cuda", dtype=torch.int32)
    runs = {"plain": (None, lambda: ato_torch.flash_attention(q, k, v, causal=True)),
            "lengths persistent": (True, lambda: ato_torch.flash_attention(q, k, v, causal=True, q_lengths=full,
                                                                            kv_lengths=full)),
            "lengths one item a program": (False, lambda: ato_torch.flash_attention(q, k, v, causal=True,
                                                                                    q_lengths=full, kv_lengths=full))}
    t = {n: [] for n in runs}
    for _ in range(3):
        for n, (on, f) in runs.items():
            if on is not None:
                kv_persistent(on)
            t[n].append(do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3)
    best = {n: min(x) for n, x in t.items()}
    print("  B4 H32 N4096 D128 causal: " + ", ".join(f"{n} {b:.1f} us ({b / best['plain']:.3f}x plain)"
                                                   for n, b in best.items()), flush=True)


if __name__ == "__main__":
    print(f"GPU {torch.cuda.get_device_name()}; bf16 D128", flush=True)
    print("bits:", bits(), flush=True)
    timings()
