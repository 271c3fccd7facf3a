"""Issue 19: how far the shared-prefix schedule's two kernels would overlap. The chunk-first
kernel (Gluon) and the tails (the split kernel in 2 parts a sequence, no merge) on two CUDA
streams, the combine after both, against the same plan run in order and against the plan
ato runs (one split that starts from the merged chunk partials). Bench batch (B64 sharing 4096
tokens, 256 private, Hq32 Hkv8 D128 bs16 bf16); do_bench medians (us); o against ato's.
Not a test, not a form ato can take as is (JAX has one stream). On the GPU machine:
python3 benchmarks/experiments/2026-11-28_decode_overlap.py
"""
import torch
from triton.testing import do_bench

import ato_torch
from ato_cli import bench
from ato_core import interpreter
from ato_core.launch import Plan
from ato_core.ops import OPS
from ato_core.ops.decode import plans
from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule
from ato_torch import launcher

(B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = bench.shared_prefix_batch()
print(f"GPU {torch.cuda.get_device_name()}; shared prefix B{B} P{P}+{T} Hq{Hq} Hkv{Hkv} D{D} bs{BS} bf16; us")
target = launcher.target_for(q)
main = torch.cuda.current_stream()
side = (torch.cuda.Stream(), torch.cuda.Stream())


def schedule(tokens):
    return DecodeSchedule(*(torch.as_tensor(a, device="cuda") for a in decode_schedule(
        table.cpu().numpy(), lens.cpu().numpy(), block_size=BS, chunk_tokens=tokens)))


def plan_of(s, splits):
    plans.SCHEDULE_SPLITS = splits
    plans.decode_plan.cache_clear()
    OPS["decode_attention"].cached_forward.cache_clear()
    specs = [launcher.spec(t) for t in (q, kc, vc, table, lens)]
    plan = plans.decode_plan(*specs, softmax_scale=None, target=target, schedule=tuple(launcher.spec(a) for a in s))
    arrays = dict(zip(("q", "k_cache", "v_cache", "block_table", "seq_lens"), (q, kc, vc, table, lens)))
    arrays.update(zip(plans.SCHEDULE, s))
    return plan, arrays


def streamed(plan, arrays, split_first):
    """The plan with its chunk kernel and split kernel on two streams (the split's launched first
    if split_first: it does not read the chunk's partials in 2 splits), the combine on the
    current stream after both."""
    if split_first:
        chunk, split, combine = plan.launches
        plan = Plan((split, chunk, combine), plan.results, plan.dense)

    def launch_fn(launch, inputs, outs, device):
        name = launch.kernel.__name__
        if "combine" in name:
            for s in side:
                main.wait_stream(s)
            return launcher._cuda_launch(launch, inputs, outs, device)
        s = side[0 if "chunk" in name else 1]
        s.wait_stream(main)
        with torch.cuda.stream(s):
            launcher._cuda_launch(launch, inputs, outs, device)

    return lambda: interpreter.execute(plan, arrays, launch_fn)


ref = ato_torch.decode_attention(q, kc, vc, table, lens, schedule=schedule(512))
rows = []
for tokens in (512, 1024):
    s = schedule(tokens)
    one, one_arrays = plan_of(s, 0)
    two, two_arrays = plan_of(s, 2)
    names = [launch.kernel.__name__ for launch in two.launches]
    forms = {f"{tokens}: ato's plan (one split, merged)": lambda: launcher.run_plan(one, one_arrays, target),
             f"{tokens}: 2 splits + combine, in order": lambda: launcher.run_plan(two, two_arrays, target),
             f"{tokens}: 2 splits + combine, two streams": streamed(two, two_arrays, False),
             f"{tokens}: 2 splits + combine, two streams, split first": streamed(two, two_arrays, True)}
    print(f"{tokens}-token chunks, the 2-split plan's kernels: {names}", flush=True)
    for r in range(2):
        for label, fn in forms.items():
            o = fn()[0]
            torch.cuda.synchronize()
            err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
            t = do_bench(fn, warmup=20, rep=200, return_mode="median") * 1e3
            print(f"  round {r} {label:58s} {t:6.1f} | o vs ato's {err:.1e}", flush=True)
plans.SCHEDULE_SPLITS = 0
