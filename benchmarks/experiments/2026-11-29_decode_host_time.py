"""Host time per eager call of ato_torch.decode_attention at the bench's shared-prefix batch
(ato bench --op decode: its wall row with the schedule went 68.6 -> 154.6 us in session 57 while
its device time went 45.7 -> 42.7): per-call wall of back-to-back calls (one sync at the end)
with and without the schedule, and at B1, with the N functions of most own time (cProfile) on
the schedule path. Session 57 also ran it on the tree before the merge-loads patch (a reverse
diff through patched_tree.alternate_forms). Not a test. On the GPU machine: python3 benchmarks/experiments/2026-11-29_decode_host_time.py
"""
import cProfile
import os
import pstats
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "tools")]


def inner():
    import torch

    import ato_torch
    from ato_cli.bench import shared_prefix_batch
    from host_overhead import per_call_us

    (B, Hq, Hkv, D, BS, P, T), (q, kc, vc, table, lens) = shared_prefix_batch()
    sched = ato_torch.decode_schedule(table, lens, block_size=BS)
    seq = lambda: ato_torch.decode_attention(q, kc, vc, table, lens)  # noqa: E731
    sch = lambda: ato_torch.decode_attention(q, kc, vc, table, lens, schedule=sched)  # noqa: E731
    one = (q[:1].contiguous(), kc, vc, table[:1].contiguous(), lens[:1].contiguous())
    b1 = lambda: ato_torch.decode_attention(*one)  # noqa: E731
    print("  ".join(f"{n} {per_call_us(f, 1000):.1f} us" for n, f in (("seq-first", seq), ("schedule", sch), ("B1", b1),
                                                                      ("schedule again", sch))))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(500):
        sch()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    inner()
