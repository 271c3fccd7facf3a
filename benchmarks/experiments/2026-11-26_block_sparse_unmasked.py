"""block_sparse_attention with the key blocks every query of a tile sees whole run unmasked
(kernels._masked_tail: the masked tail is at most the last two kept blocks) against the tree
before (every tile masked), A/B in one process: the bench shape B1 H32 N32768 D128 bf16, blocks
of 64, random 10% mask (non-causal, as ato bench) and cab_attention (causal, keep 0.1); forward
and forward+backward (us, do_bench medians, 3 alternating rounds), the results' largest
difference new vs old. Then the curvature mask's kernels for settings of the select kernel
(plans.CAB_SELECT_ELEMENTS/CAB_SELECT_WARPS of 994d008, as ELEMENTS,WARPS) and the An @ An tiles
(BM,BN,BK,WARPS,STAGES), per kernel device time, the mask against the first setting's. Not a
test. On the GPU machine:
    python3 benchmarks/experiments/2026-11-26_block_sparse_unmasked.py .ab_old . [select settings] [-- dot settings]
"""
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, "benchmarks/tools")
import ab  # noqa: E402

args = sys.argv[3:]
selects = args[:args.index("--")] if "--" in args else args
dots = args[args.index("--") + 1:] if "--" in args else []
forms = {}
for name, path in (("old", sys.argv[1]), ("new", sys.argv[2])):
    forms[name] = ab.load(path, "ato_torch", "ato_cli.bench")
B, H, N, D, bs = 1, 32, 32768, 128, 64
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
mask = forms["new"][1].random_block_mask(B, H, N // bs, 0.1, "cuda")
print(f"GPU {torch.cuda.get_device_name()}; B{B} H{H} N{N} D{D} bf16, blocks of {bs} (us)")
calls = {"block_sparse (random 10%)": lambda ato: ato.block_sparse_attention(q, k, v, mask, block_size=bs),
         "block_sparse causal (random 10%)": lambda ato: ato.block_sparse_attention(q, k, v, mask, block_size=bs,
                                                                                     causal=True),
         "cab_attention (causal, keep 0.1)": lambda ato: ato.cab_attention(q, k, v, block_size=bs, keep=0.1)}
for label, call in calls.items():
    ref, times = None, {}
    for r in range(3):
        for form in (("old", "new") if r % 2 == 0 else ("new", "old")):
            ato = forms[form][0]

            def fwd():
                return call(ato)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (q, k, v), do)
            got = (fwd(), *fwd_bwd())
            ref = ref if ref is not None else got
            if r == 0 and form == "new":
                print(f"  {label}: o/dq/dk/dv new - old, largest: "
                      + " ".join(f"{float((a.float() - b.float()).abs().max()):.1e}" for a, b in zip(got, ref)))
            t = (do_bench(fwd, warmup=25, rep=200, return_mode="median") * 1e3,
                 do_bench(fwd_bwd, warmup=25, rep=200, return_mode="median") * 1e3)
            times.setdefault(form, []).append(t)
    for form, ts in times.items():
        print(f"  {label} {form}: fwd " + " / ".join(f"{f:7.1f}" for f, _ in ts) + " | fwd+bwd "
              + " / ".join(f"{b:7.1f}" for _, b in ts), flush=True)

ato, bench = forms["new"]
from ato_core.ops import OPS  # noqa: E402  (the new tree's, loaded last)
from ato_core.ops.block_sparse import plans  # noqa: E402

first = None
for setting in [f"select {s}" for s in selects] + [f"dot {s}" for s in dots]:
    kind, value = setting.split()
    if kind == "select":
        elements, warps = map(int, value.split(","))
        plans.CAB_SELECT_ELEMENTS["gpu"], plans.CAB_SELECT_WARPS = elements, warps
    else:
        plans.CAB_DOT_TILES["gpu"] = tuple(map(int, value.split(",")))
    for f in (plans.curvature_plan, plans.cab_forward_plan):
        f.cache_clear()
    for name in ("curvature_block_mask", "cab_attention"):
        OPS[name].cached_forward.cache_clear()
    try:
        with torch.no_grad():
            m = ato.curvature_block_mask(q, k, block_size=bs, keep=0.1)
            same = "" if first is None else f" mask == first's: {bool(torch.equal(m, first))}"
            first = m if first is None else first
            ms = do_bench(lambda: ato.curvature_block_mask(q, k, block_size=bs, keep=0.1), return_mode="median")
            total = do_bench(lambda: ato.cab_attention(q, k, v, block_size=bs, keep=0.1), return_mode="median")
            print(f"{setting:24s} mask {ms * 1e3:7.1f} us  cab fwd {total * 1e3:7.1f} us  share {ms / total:.3f}{same}",
                  flush=True)
            per = bench.device_kernels(lambda: ato.curvature_block_mask(q, k, block_size=bs, keep=0.1),
                                       lambda out: torch.cuda.synchronize(), calls=10)
        print("    " + ", ".join(f"{n.replace('_kernel', '')[:24]} {us:.1f}" for n, (c, us) in
                                 sorted(per.items(), key=lambda kv: -kv[1][1])), flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"{setting:24s} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
