"""flash_attention with a bias or a boolean mask, their [BLOCK_M, BLOCK_N] tiles loaded in
16-byte vectors along the keys (kernels._pair_aligned, _pair_keys) against the tree before
(one element a load: a mask on keys < Nk of unknown alignment, and tile starts the compiler
could not see were multiples of BLOCK_N), A/B in one process: B4 H32 N4096 D128 bf16 causal,
forward and forward+backward, plain causal beside them (us, do_bench medians, 3 alternating
rounds); o and the gradients against OLD's (relative L2). --alibi: plain and ALiBi instead.
--memcheck instead: odd shapes against the float64 reference (bias broadcast and full, masks,
with a window, lengths and segment ids, a per-head bias shared by the batch), for a run under
compute-sanitizer. Not a test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_flash_pair_vectors.py .ab_old . [--alibi]
    compute-sanitizer --tool memcheck python3 benchmarks/experiments/2026-11-26_flash_pair_vectors.py --memcheck
"""
import sys

import torch

sys.path.insert(0, "benchmarks/tools")

if sys.argv[1] == "--memcheck":
    import ato_torch
    from ato_core.ops.flash_attention import reference
    from fa_against_reference import against_reference

    for B, Hq, Hkv, Nq, Nk, D, kw in [(2, 4, 2, 200, 333, 128, dict(causal=True, bias="full")),
                                      (1, 4, 1, 129, 250, 64, dict(bias="rows", mask=True)),
                                      (2, 4, 2, 300, 300, 80, dict(causal=True, mask=True, window_size=(50, None))),
                                      (2, 2, 2, 190, 190, 128, dict(bias="full", segments=True, lengths=True)),
                                      (3, 4, 2, 150, 170, 64, dict(causal=True, bias="heads"))]:
        g = torch.Generator(device="cuda").manual_seed(Nq)
        q = torch.randn(B, Hq, Nq, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
        k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
                for _ in range(2))
        opts = {n: kw[n] for n in ("causal", "window_size") if n in kw}
        if kw.get("bias") == "full":
            opts["bias"] = torch.randn(B, Hq, Nq, Nk, device="cuda", generator=g).to(torch.bfloat16)
        elif kw.get("bias") == "heads":  # shared by the batch: batches inner on the grid
            opts["bias"] = torch.randn(Hq, Nq, Nk, device="cuda", generator=g).to(torch.bfloat16)
        elif kw.get("bias") == "rows":
            opts["bias"] = torch.randn(Nq, Nk, device="cuda", generator=g).to(torch.bfloat16)
        if kw.get("mask"):
            opts["mask"] = torch.rand(B, 1, Nq, Nk, device="cuda", generator=g) > 0.3
        if kw.get("lengths"):
            opts["q_lengths"] = torch.tensor([Nq - 1, 5], device="cuda", dtype=torch.int32)
            opts["kv_lengths"] = torch.tensor([Nk, Nk // 3], device="cuda", dtype=torch.int32)
        if kw.get("segments"):
            opts["segment_ids"] = torch.sort(torch.randint(0, 3, (B, Nq), device="cuda", generator=g,
                                                           dtype=torch.int32)).values
        result = against_reference(ato_torch.flash_attention, reference.flash_attention, q, k, v, **opts)
        print(f"{B}x{Hq}x{Hkv}x{Nq}x{Nk}x{D} bf16 {sorted(kw)}: " + result, flush=True)
    sys.exit()

from triton.testing import do_bench  # noqa: E402

import ab  # noqa: E402

forms = {name: ab.load(path, "ato_torch") for name, path in (("old", sys.argv[1]), ("new", sys.argv[2]))}
B, H, N, D = 4, 32, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
variants = {"plain": {}, "bias [H, N, N]": {"bias": torch.randn(H, N, N, device="cuda", dtype=torch.bfloat16,
                                                                 generator=g)},
            "mask [N, N] all true": {"mask": torch.ones(N, N, device="cuda", dtype=torch.bool)}}
if "--alibi" in sys.argv:  # (the ALiBi A/B of session 30 ran this loop on these two)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda")
    variants = {"plain": {}, "alibi": {"alibi_slopes": slopes}}
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16 causal (us)")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for name, kw in variants.items():
    ref, times = None, {}
    for r in range(3):
        for form in (("old", "new") if r % 2 == 0 else ("new", "old")):
            ato = forms[form]

            def fwd():
                return ato.flash_attention(q, k, v, causal=True, **kw)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (q, k, v), do)
            got = (fwd(), *fwd_bwd())
            ref = ref if ref is not None else got
            t = (do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3,
                 do_bench(fwd_bwd, warmup=25, rep=200, return_mode="median") * 1e3)
            times.setdefault(form, []).append(t)
            if r == 0 and form == "new":
                print(f"  {name}: o/dq/dk/dv new vs old " + " ".join(f"{rel(a, b):.1e}" for a, b in zip(got, ref)))
    for form, ts in times.items():
        print(f"  {name} {form}: fwd " + " / ".join(f"{f:7.1f}" for f, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)
