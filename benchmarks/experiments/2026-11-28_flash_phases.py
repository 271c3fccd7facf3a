"""Where a Gluon forward program's time goes (issue 25's window, issue 22's short sequences): the
forward kernel (hopper.py, edited here into a copy: _edited) stamps the SM's clock64 at five
points of each program into an extra output, read by consumer warpgroup 0: 0 the kernel's start
(after its indices), 1 after the query tiles' load (_forward_smem), 2 when the first QK is done
(the first K/V tile landed), 3 after the last PV, 4 after o and lse are stored; with its SM and
its tiles. Per shape: median cycles of setup (1 - 0), first tile (2 - 1), the other tiles (3 - 2,
and per tile), epilogue (4 - 3) and the gap to the next program on the same SM (launch,
teardown), and their share of an SM's time. B1 H32 Nq16384 D128 bf16 (the window bench's rows)
and B4 H32 N4096 causal. The stamps' stores cost a little; the copy's o is checked against
ato's. With --persistent (plans.HOPPER_PERSISTENT at every shape; without, off): the persistent kernel's
items instead (setup: the wait for its query tile; gap: from one item's stores to the next
item's start). Not a test. On the GPU machine, after ``source benchmarks/tools/gpu_env.sh``:
    python benchmarks/experiments/2026-11-28_flash_phases.py [--persistent]
"""
import dataclasses
import os
import sys

import numpy as np
import torch
from triton.testing import do_bench

from ato_core.launch import Buffer, Plan
from ato_core.ops.flash_attention import plans
from ato_core.target import cuda_target
from ato_torch.launcher import run_plan, spec
from benchmarks.tools.ab import module_from_source

PATH = "ato_core/ops/flash_attention/hopper.py"
STAMPS = '''

@gluon.jit
def _stamp(TIMES, k, at=None):
    """clock64 into TIMES[at, k] (at: the program, by default; the phases experiment)."""
    if TIMES is not None:
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        z = gl.zeros([1], gl.int32, lay)
        t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [z], dtype=gl.int64, is_pure=False, pack=1)
        gl.store(TIMES + _row(at) * 8 + k + z, t)


@gluon.jit
def _put(TIMES, k, value, at=None):
    """value into TIMES[at, k]; k = 5: the SM's id."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    z = gl.zeros([1], gl.int32, lay)
    if k == 5:
        v = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [z], dtype=gl.int32, is_pure=True, pack=1)
    else:
        v = z + value
    gl.store(TIMES + _row(at) * 8 + k + z, v.to(gl.int64))


@gluon.jit
def _row(at):
    if at is None:
        return (gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)).to(gl.int64)
    else:
        return at.to(gl.int64)
'''
EDITS = [  # (old, new), each old found exactly once
    ("@kernel(inputs=8, outputs=4, gluon=True)\ndef fa_fwd_hopper_kernel(",
     "@kernel(inputs=8, outputs=5, gluon=True)\ndef fa_fwd_hopper_kernel("),
    ("soh, son, Tq, Tk, O, LSE, LSE2, SCRATCH, CAUSAL: gl.constexpr, BLOCK_N",
     "soh, son, Tq, Tk, O, LSE, LSE2, TIMES, SCRATCH, CAUSAL: gl.constexpr, BLOCK_N"),
    ("    BLOCK_M: gl.constexpr = 2 * ROWS\n    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)\n",
     "    BLOCK_M: gl.constexpr = 2 * ROWS\n    pid_m, b, h, hk = _query_program(Hq, G, CAUSAL)\n"
     "    _stamp(TIMES, 0)\n"),
    ("_forward_smem(Q, q_off, sqn, start_m, n_q, BLOCK_N, D, STAGES, 1)\n",
     "_forward_smem(Q, q_off, sqn, start_m, n_q, BLOCK_N, D, STAGES, 1)\n    _stamp(TIMES, 1)\n"),
    ("    shift = kv_len - q_len\n    gl.warp_specialize([",
     "    shift = kv_len - q_len\n    _put(TIMES, 5, 0)\n    _put(TIMES, 6, tiles[3] - tiles[0])\n"
     "    gl.warp_specialize(["),
    ("start_m, tiles, None,\n                     CAUSAL, WINDOW, Q_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES)),\n"
     "        (_consumer, (q1",
     "start_m, tiles, None,\n                     CAUSAL, WINDOW, Q_LENS, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, D, STAGES, 0, TIMES)),\n"
     "        (_consumer, (q1"),
    ("SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,\n              BS: gl.constexpr = 0):",
     "SEGMENTS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,\n"
     "              BS: gl.constexpr = 0, TIMES=None):"),
    ("WINDOW, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, STAGES, BS)\n", "WINDOW, ALIBI, SOFTCAP, SEGMENTS, BLOCK_N, STAGES, BS, TIMES)\n"),
    ("BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BS: gl.constexpr):",
     "BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BS: gl.constexpr, TIMES=None):"),
    ("k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)\n"
     "    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))\n",
     "k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)\n"
     "    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))\n    _stamp(TIMES, 2)\n"),
    ("    if ALIBI or SOFTCAP:  # m is in base 2 already\n", "    _stamp(TIMES, 3)\n    if ALIBI or SOFTCAP:  # m is in base 2 already\n"),
    ('        gl.store(LSE2 + lse_off + offs_m, gl.where(empty_row, float("inf"), lse2), mask=offs_m < Nq)\n',
     '        gl.store(LSE2 + lse_off + offs_m, gl.where(empty_row, float("inf"), lse2), mask=offs_m < Nq)\n'
     '    _stamp(TIMES, 4)\n'),
]


# With experiments/2026-11-28_flash_persistent_tma.patch applied (--persistent): the persistent
# kernel's consumers stamp each item (row 2 w + consumer): 0 before its query tile's wait, 1 after
# it, 2-4 as above; 5, 6 its SM and tiles.
PERSISTENT_EDITS = [
    ("@kernel(inputs=8, outputs=4, gluon=True)\ndef fa_fwd_hopper_persistent_kernel(",
     "@kernel(inputs=8, outputs=5, gluon=True)\ndef fa_fwd_hopper_persistent_kernel("),
    ("son, B, O, LSE, LSE2, SCRATCH, CAUSAL: gl.constexpr,", "son, B, O, LSE, LSE2, TIMES, SCRATCH, CAUSAL: gl.constexpr,"),
    ("out = (O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, (cap_in, cap_out))",
     "out = (O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, (cap_in, cap_out), TIMES)"),
    ("    O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, cap = out\n",
     "    O, LSE, LSE2, SLOPES, s_ab, s_ah, sob, soh, son, qk_scale, cap, TIMES = out\n"),
    ("    mbarrier.wait(q_ready, it & 1)\n",
     "    row = w * 2 + half // ROWS\n    _stamp(TIMES, 0, row)\n    mbarrier.wait(q_ready, it & 1)\n"
     "    _stamp(TIMES, 1, row)\n    _put(TIMES, 5, 0, row)\n    _put(TIMES, 6, tiles[3] - tiles[0], row)\n"),
    ("BLOCK_N, D, STAGES, 0, c, q_empty, True)", "BLOCK_N, D, STAGES, 0, c, q_empty, True, TIMES, row)"),
    ("BS: gl.constexpr = 0, c0=0, q_free=None, Q_FREE: gl.constexpr = False):",
     "BS: gl.constexpr = 0, c0=0, q_free=None, Q_FREE: gl.constexpr = False, TIMES=None, at=None):"),
    ("BLOCK_N, STAGES, BS, c0, q_free, Q_FREE)", "BLOCK_N, STAGES, BS, c0, q_free, Q_FREE, TIMES, at)"),
    ("BS: gl.constexpr, c0, q_free, Q_FREE: gl.constexpr):",
     "BS: gl.constexpr, c0, q_free, Q_FREE: gl.constexpr, TIMES=None, at=None):"),
    ("k_bufs.index(c0 % STAGES).permute((1, 0)), s_zero, use_acc=False, is_async=True)\n"
     "    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))\n",
     "k_bufs.index(c0 % STAGES).permute((1, 0)), s_zero, use_acc=False, is_async=True)\n"
     "    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))\n    _stamp(TIMES, 2, at)\n"),
    ("    if ALIBI or SOFTCAP:  # m is in base 2 already\n",
     "    _stamp(TIMES, 3, at)\n    if ALIBI or SOFTCAP:  # m is in base 2 already\n"),
    ('        gl.store(LSE2 + lse_off + offs_m, gl.where(empty_row, float("inf"), lse2), mask=offs_m < Nq)\n',
     '        gl.store(LSE2 + lse_off + offs_m, gl.where(empty_row, float("inf"), lse2), mask=offs_m < Nq)\n'
     '    _stamp(TIMES, 4, at)\n'),
]


def _edited(persistent=False):
    source = open(os.path.join(os.path.dirname(__file__), "..", "..", PATH)).read()
    for old, new in (PERSISTENT_EDITS if persistent else EDITS):
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return module_from_source(source + STAMPS, PATH, "phases")


def stamped(hop, q, k, v, causal, window):
    """(o, times [rows, 8] int64) of ato's forward plan with the stamping kernel (rows: its
    programs; persistent: its items, consumer warpgroup 0's)."""
    run, rows, persistent = stamped_run(hop, q, k, v, causal, window)
    o, t = run()
    t = t.view(rows, 8).cpu().numpy()
    return o, (t[0::2] if persistent else t)


def stamped_run(hop, q, k, v, causal, window):
    """(a call of the stamping launch, its rows of times, whether it is the persistent kernel)."""
    target = cuda_target(q.device.index or 0)
    launch, rows = stamped_launch(hop, spec(q, "q"), spec(k, "k"), spec(v, "v"), causal, window, target)
    plan = Plan((launch,), ("o", "times"))
    return (lambda: run_plan(plan, {"q": q, "k": k, "v": v}, target), rows,
            launch.name.endswith("persistent_kernel"))


def stamped_launch(hop, q, k, v, causal, window, target):
    """(ato's forward launch (specs q, k, v) with the stamping kernel and its times output, the
    rows of times)."""
    options = plans.Options(window=plans.check_window(window)) if window else plans.NO_OPTIONS
    plan = plans.forward_plan(q, k, v, causal=causal, softmax_scale=None, target=target, options=options)
    (launch,) = plan.launches
    if launch.name == "fa_fwd_hopper_persistent_kernel":  # a row a consumer an item
        rows = 2 * -(-q.shape[2] // 128) * q.shape[0] * q.shape[1]
    else:
        assert launch.name == "fa_fwd_hopper_kernel"
        rows = launch.grid[0] * launch.grid[1]
    times = Buffer("times", (rows * 8,), "int64", zeroed=True)
    return dataclasses.replace(launch, kernel=getattr(hop, launch.name),
                               outputs=(*launch.outputs[:3], times, launch.outputs[3])), rows


def report(name, t, us):
    """The phases' medians, and the SMs' clock: their cycles from first start to last store over
    the kernel's time ``us`` (a kernel that idles less may run at a lower clock: the power cap)."""
    setup, first, body, epi = (t[:, i + 1] - t[:, i] for i in range(4))
    tiles = t[:, 6]
    order = np.lexsort((t[:, 0], t[:, 5]))
    same_sm = t[order[1:], 5] == t[order[:-1], 5]
    gap = (t[order[1:], 0] - t[order[:-1], 4])[same_sm]
    multi = tiles > 1
    per_tile = np.median(body[multi] / (tiles[multi] - 1)) if multi.any() else float("nan")
    fixed = np.mean(setup + first + epi) + np.mean(gap)
    span = np.mean(t[:, 4] - t[:, 0]) + np.mean(gap)
    print(f"  {name:30s} programs {len(t):5d}, tiles {tiles.mean():5.1f} | median cycles: setup {np.median(setup):6.0f}"
          f"  first tile {np.median(first):6.0f}  other tiles {np.median(body):8.0f} ({per_tile:5.0f} a tile)"
          f"  epilogue {np.median(epi):6.0f}  gap {np.median(gap):6.0f} | fixed {fixed / per_tile:4.1f} tiles,"
          f" {fixed / span:.2f} of an SM's time", flush=True)
    sms = np.unique(t[:, 5])
    cycles = np.mean([t[t[:, 5] == sm, 4].max() - t[t[:, 5] == sm, 0].min() for sm in sms])
    print(f"  {'':30s} kernel {us:8.1f} us, {len(sms)} SMs busy for {cycles:9.0f} cycles on average:"
          f" {cycles / us:5.0f} MHz", flush=True)


def main():
    import ato_torch
    persistent = "--persistent" in sys.argv
    plans.HOPPER_PERSISTENT = persistent  # the form asked for at every shape (its stamps differ)
    plans.PERSISTENT_MAX_TILES = float("inf")
    plans.forward_plan.cache_clear()
    hop = _edited(persistent)
    print(f"GPU {torch.cuda.get_device_name()}; the Gluon forward{' (persistent: a row an item)' if persistent else ''},"
          f" bf16 D128; SM clock64 cycles", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 32, 16384, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    kv = torch.randn(1, 32, 16384, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    rows = [("causal Nk 16384", q, kv, True, None), ("window (4096, 0) Nk 16384", q, kv, True, (4096, 0)),
            ("full Nk 4224 (33 tiles)", q, kv[:, :, :4224], False, None),
            ("full Nk 1024 (8 tiles)", q, kv[:, :, :1024], False, None),
            ("full Nk 128 (1 tile)", q, kv[:, :, :128], False, None)]
    q4 = torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    rows.append(("B4 H32 N4096 causal", q4, q4, True, None))
    for name, qq, k, causal, window in rows:
        k = k.contiguous()
        o, t = stamped(hop, qq, k, k, causal, window)
        o_ref = ato_torch.flash_attention(qq, k, k, causal=causal, window_size=window)
        for _ in range(3):  # warm, then the last run's stamps
            o, t = stamped(hop, qq, k, k, causal, window)
        torch.cuda.synchronize()
        assert torch.equal(o, o_ref), name
        us = do_bench(stamped_run(hop, qq, k, k, causal, window)[0], warmup=10, rep=100, return_mode="median") * 1e3
        report(name, t, us)


if __name__ == "__main__":
    main()
