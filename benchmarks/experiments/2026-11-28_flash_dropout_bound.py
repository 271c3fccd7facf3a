"""Issue 25: what bounds dropout on the Gluon forward (plans.HOPPER_DROPOUT, the mask drawn by the
producer, hopper._draw_masks): what its parts cost (NVIDIA_H200-flash_gluon.txt 37). Forward times, ato_torch,
B4 H32 N4096 D128 bf16 causal, p 0.1, the persistent form, each variant in a process of its own
over a copy of the tree with hopper.py patched (tools/patched_tree.py; tools/fa_option_time.py's inputs;
do_bench medians; the patches as hopper.py reads since session 51):

    plain                 plain causal, the K/V ring of 3 stages (plans.HOPPER)
    plain, 2 stages       the ring of 2, as dropout has it (its masks take the third stage's shared memory)
    dropout               the tree's
    dropout, no draws     the producer stores nothing (the masks are whatever shared memory holds)
    dropout, no Philox    the draw without Philox: the counters' bits as the words
    dropout, no multiply  the consumers ignore the masks

    python3 benchmarks/experiments/2026-11-28_flash_dropout_bound.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOPPER = os.path.join("ato_core", "ops", "flash_attention", "hopper.py")
DRAW_LOOP = "for steps in range(0, ROWS // STEP, DRAW_CALLS):"
PHILOX = "w0, w1, w2, w3 = tl.philox(drop[0], c0 + zero, c1 + zero, zero + drop[1].to(gl.uint32), zero,\n" \
         "                                           DROPOUT_ROUNDS)"
MULTIPLY = "p_op = p_op * _keep_mask(masks, c, gl.constexpr(p_op.type.layout))"
VARIANTS = [  # label, plans settings, (old, new) source replacements in hopper.py
    ("plain", {}, []),
    ("plain, 2 stages", {"STAGES": 2}, []),
    ("dropout", {"DROPOUT": True}, []),
    ("dropout, no draws", {"DROPOUT": True}, [(DRAW_LOOP, "for steps in range(0):")]),
    ("dropout, no Philox", {"DROPOUT": True}, [(PHILOX, "w0 = c0 * 3 + c1\n                w1 = w0 ^ c1\n"
                                                        "                w2 = w0 + c1\n                w3 = w1 * c0")]),
    # the mask still awaited and its slot freed (the producer waits on it), its load unused
    ("dropout, no multiply", {"DROPOUT": True}, [(MULTIPLY, "_keep_mask(masks, c, gl.constexpr(p_op.type.layout))")]),
]


def one(label):
    """Time the variant in this process's tree (its hopper.py already patched)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "tools"))
    from fa_option_time import inputs
    from triton.testing import do_bench

    import ato_torch
    from ab import launched
    from ato_core.ops.flash_attention import plans
    from helpers import plan_settings

    settings = next(s for name, s, _ in VARIANTS if name == label)
    q, k, v, _ = inputs()
    kw = {"dropout_p": 0.1, "seed": 7} if settings.get("DROPOUT") else {}
    values = {"HOPPER_DROPOUT": True} if settings.get("DROPOUT") else {}
    if "STAGES" in settings:
        values["HOPPER"] = {**plans.HOPPER, "STAGES": settings["STAGES"]}
    with plan_settings("flash_attention", plans, [], **values):
        fwd = lambda: ato_torch.flash_attention(q, k, v, causal=True, **kw)  # noqa: E731
        kernels = launched(fwd, "fa_fwd")
        t = do_bench(fwd, warmup=100, rep=1000, return_mode="median") * 1e3
    print(f"RESULT {label}|{t:.1f}|{kernels}", flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        return one(sys.argv[2])
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "tools"))
    from patched_tree import run_patched

    times = {}
    for label, _, patches in VARIANTS:
        out = run_patched([(HOPPER, old, new) for old, new in patches],
                          os.path.join("benchmarks", "experiments", os.path.basename(__file__)), "--one", label)
        lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if not lines:
            print(f"{label}: failed\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}", flush=True)
            continue
        _, t, kernels = lines[0][7:].split("|")
        times[label] = float(t)
        print(f"{label:22s} fwd {float(t):8.1f} us  {float(t) / times.get('plain', float(t)):.3f}x plain  {kernels}",
              flush=True)


if __name__ == "__main__":
    main()
