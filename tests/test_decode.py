"""decode_attention and merge_attention_states on the CPU (the interpreter): both frameworks
against the float64 reference (each sequence's keys gathered from its table, plain softmax),
bitwise torch == JAX, ragged lengths, GQA and MQA, splits and their merge, bad inputs.

Tolerances: ato_cli.harness.TOLERANCE (fp32 1e-4: a softmax over at most a few hundred keys
in fp32; bf16 2e-2: the bf16 output rounding, 2^-8, plus p rounded to bf16 for the p v dot)."""

import numpy as np
import pytest

from ato_cli import harness as h
from ato_core.ops.decode.cases import decode_case, merge_case
from ato_core.target import has_gluon
from helpers import check, clear_plans, frontend, raises_naming


def _inputs(case, lens, seed=0):
    """The case's inputs with these lengths and a table of distinct random blocks."""
    inputs = h.make_inputs(case)
    B, MB = inputs["block_table"].shape
    NB = inputs["k_cache"].shape[0]
    rng = np.random.default_rng(seed)
    inputs["block_table"] = rng.permutation(NB)[:B * MB].reshape(B, MB).astype(np.int32)
    inputs["seq_lens"] = np.asarray(lens, np.int32)
    return inputs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("Hq,Hkv,D", [(8, 2, 64), (4, 1, 80), (2, 2, 128)], ids=["gqa", "mqa", "mha"])
def test_decode_ragged(Hq, Hkv, D, dtype):
    """Lengths 0, 1, block_size - 1, one block, several blocks (and splits: the interpreter
    splits every 32 tokens), the table's whole capacity."""
    BS, MB = 16, 6
    lens = [0, 1, BS - 1, BS, 3 * BS + 5, MB * BS]
    case = decode_case(len(lens), Hq, Hkv, D, BS, len(lens) * MB + 3, MB, dtype=dtype)
    t, _, r = check(case, _inputs(case, lens))
    o, lse = t.outputs
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0])), "a sequence of length 0: zeros and -inf"
    assert np.isfinite(lse[1:]).all()


@pytest.mark.parametrize("block_size", [16, 32, 64, 128, 256])
def test_decode_block_sizes(block_size):
    case = decode_case(2, 4, 2, 48, block_size, 5, 2, dtype="float32", scale=0.2)
    check(case, _inputs(case, [block_size + 7, 2 * block_size]))


def test_merge_of_two_halves_is_the_whole():
    """Attention over a sequence's first 3 blocks merged with attention over the rest equals
    attention over all of it (each half a table of its own)."""
    BS = 16
    case = decode_case(2, 6, 3, 64, BS, 16, 7, dtype="float32")
    inputs = _inputs(case, [7 * BS, 5 * BS + 3])
    torch_ops, arr = frontend("torch")
    q, kc, vc = (arr(inputs[n].copy()) for n in ("q", "k_cache", "v_cache"))
    table, lens = inputs["block_table"], inputs["seq_lens"]
    whole = torch_ops.decode_attention(q, kc, vc, arr(table), arr(lens), return_lse=True)
    first = torch_ops.decode_attention(q, kc, vc, arr(table[:, :3].copy()), arr(np.minimum(lens, 3 * BS)),
                                       return_lse=True)
    rest = torch_ops.decode_attention(q, kc, vc, arr(table[:, 3:].copy()), arr(lens - 3 * BS), return_lse=True)
    o, lse = torch_ops.merge_attention_states(first[0], first[1], rest[0], rest[1])
    np.testing.assert_allclose(o.numpy(), whole[0].numpy(), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(lse.numpy(), whole[1].numpy(), rtol=2e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_merge_states(dtype):
    case = merge_case((3, 5), 72, dtype=dtype, seed=3)
    inputs = h.make_inputs(case)
    inputs["lse_a"] = inputs["lse_a"].copy()
    inputs["lse_a"][0, :2] = -np.inf     # one side empty
    inputs["lse_b"] = inputs["lse_b"].copy()
    inputs["lse_a"][1, 0] = inputs["lse_b"][1, 0] = -np.inf  # both empty: zeros, -inf
    t, _, _ = check(case, inputs)
    assert np.all(t.outputs[0][1, 0] == 0) and np.isneginf(t.outputs[1][1, 0])


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_forward_only(framework):
    case = decode_case(1, 2, 1, 16, 16, 2, 1)
    inputs = _inputs(case, [9])
    ops, arr = frontend(framework)
    a = {n: arr(v) for n, v in inputs.items()}
    args = (a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"])
    if framework == "torch":
        q = a["q"].clone().requires_grad_()
        o = ops.decode_attention(q, *args[1:])
        raises_naming(NotImplementedError, "decode_attention is forward only", o.sum().backward)
    else:
        import jax
        raises_naming(NotImplementedError, "decode_attention is forward only",
                      jax.grad(lambda q: ops.decode_attention(q, *args[1:]).sum()), args[0])


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bad_inputs(framework):
    ops, arr = frontend(framework)
    rng = np.random.default_rng(0)
    q, kc = arr(rng.random((2, 4, 32), np.float32)), arr(rng.random((4, 16, 2, 32), np.float32))
    table, lens = arr(np.array([[0, 1], [2, 3]], np.int32)), arr(np.array([5, 20], np.int32))
    call = ops.decode_attention
    raises_naming(ValueError, "q.shape[1] (Hq)", call, arr(rng.random((2, 3, 32), np.float32)), kc, kc, table, lens)
    raises_naming(ValueError, "k_cache", call, q, arr(rng.random((4, 16, 2, 48), np.float32)), kc, table, lens)
    raises_naming(ValueError, "block_size", call, q, arr(rng.random((4, 12, 2, 32), np.float32)),
                  arr(rng.random((4, 12, 2, 32), np.float32)), table, lens)
    raises_naming(TypeError, "block_table", call, q, kc, kc, arr(np.zeros((2, 2), np.float32)), lens)
    raises_naming(ValueError, "seq_lens", call, q, kc, kc, table, arr(np.array([5, 33], np.int32)))
    raises_naming(ValueError, "block_table[1, 1] = 4", call, q, kc, kc, arr(np.array([[0, 1], [2, 4]], np.int32)), lens)
    raises_naming(ValueError, "seq_lens", call, q, kc, kc, table, arr(np.array([5], np.int32)))
    raises_naming(TypeError, "q", call, arr(np.ones((2, 4, 32), np.int32)), kc, kc, table, lens)
    raises_naming(TypeError, "schedule", call, q, kc, kc, table, lens, schedule=object())
    o = arr(rng.random((3, 8), np.float32))
    raises_naming(ValueError, "lse_b", ops.merge_attention_states, o, arr(np.zeros(3, np.float32)), o,
                  arr(np.zeros(4, np.float32)))


def _shared_layout(BS=16, nb=60, seed=0):
    """A tree of prefixes over 8 sequences: blocks 0-2 shared by all, then blocks 3-4 by
    sequences 0 and 1 only, and one more block by sequences 2 and 3 whose prefix ends mid-block
    for sequence 3 (not shared then); private blocks after. Returns (table, lens)."""
    rng = np.random.default_rng(seed)
    ids = iter(rng.permutation(nb))
    common = [next(ids) for _ in range(3)]
    pair = [next(ids) for _ in range(2)]
    mid = next(ids)
    table = np.zeros((8, 7), np.int32)
    lens = np.array([6 * BS + 3, 7 * BS, 4 * BS + 1, 3 * BS + 9, 3 * BS, 5 * BS - 1, 2 * BS + 5, 4 * BS], np.int32)
    for b in range(8):
        row = common + (pair if b < 2 else [mid] if b in (2, 3) else [])
        row += [next(ids) for _ in range(7 - len(row))]
        table[b] = row
    return table, lens


def test_schedule_finds_the_tree():
    from ato_core.ops.decode import decode_schedule

    table, lens = _shared_layout()
    s = decode_schedule(table, lens, block_size=16, chunk_tokens=64)
    # tasks: the 3 common blocks (sequences 0-5 and 7 use all three whole; 6 ends inside the third),
    # then 2 blocks shared by 0 and 1; block `mid` is whole for sequence 2 only (3 ends inside it)
    starts = s.seq_start.tolist()
    assert starts == [5 * 16, 5 * 16, 3 * 16, 3 * 16, 3 * 16, 3 * 16, 2 * 16, 3 * 16]
    assert s.work.shape[1] == 6 and s.unit_seq.shape[0] == int((s.seq_units >= 0).sum())
    no_sharing = decode_schedule(np.arange(12, dtype=np.int32).reshape(3, 4), np.array([64, 10, 33]), block_size=16)
    assert no_sharing.work.shape == (0, 6) and not no_sharing.seq_start.any()


@pytest.fixture(params=["splits", "one split"])
def split_tiles(request, monkeypatch):
    """The interpreter's split: several a sequence (the chunk partials merged by the combine
    kernel), or one (merged by the split kernel itself)."""
    from ato_core.ops.decode import plans

    def clear():
        clear_plans("decode_attention", plans.decode_plan)

    clear()
    if request.param == "one split":
        monkeypatch.setattr(plans, "INTERPRETER_SPLIT_TILES", 1000)
    yield request.param
    monkeypatch.undo()
    clear()


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_schedule_agrees_with_seq_first(framework, dtype, split_tiles):
    """With the schedule (shared blocks chunk-first, a tree of prefixes, one ending mid-block)
    == without, within fp32 rounding (a different summation order), and against the reference;
    torch == JAX bitwise with the schedule. Both ways of merging the chunk partials."""
    from ato_core.launch import ArraySpec, row_major_strides
    from ato_core.ops.decode import decode_schedule, plans
    from ato_core.target import INTERPRETER

    BS = 16
    table, lens = _shared_layout(BS)
    case = decode_case(8, 8, 2, 64, BS, 60, 7, dtype=dtype)
    inputs = _inputs(case, lens)
    inputs["block_table"] = table
    def spec_of_numpy(a):
        return ArraySpec(tuple(a.shape), str(a.dtype), row_major_strides(a.shape))

    specs = [spec_of_numpy(inputs[n]) for n in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]
    plan = plans.decode_plan(*specs, softmax_scale=None, target=INTERPRETER,
                             schedule=tuple(map(spec_of_numpy, decode_schedule(table, lens, block_size=BS))))
    kernels = [launch.kernel.__name__ for launch in plan.launches]
    assert kernels == (["decode_chunk_kernel", "decode_split_kernel"] if split_tiles == "one split" else
                       ["decode_chunk_kernel", "decode_split_kernel", "decode_combine_kernel"]), kernels
    ops, arr = frontend(framework)
    a = {n: h.to_torch(v) if framework == "torch" else arr(v) for n, v in inputs.items()}
    args = (a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"])
    sched = ops.decode_schedule(a["block_table"], a["seq_lens"], block_size=BS)
    assert sched.work.shape[0] > 0
    o1, l1 = (np.asarray(x, np.float32) if framework == "jax" else x.float().numpy()
              for x in ops.decode_attention(*args, return_lse=True))
    o2, l2 = (np.asarray(x, np.float32) if framework == "jax" else x.float().numpy()
              for x in ops.decode_attention(*args, return_lse=True, schedule=sched))
    tol = 2e-6 if dtype == "float32" else 1e-2  # fp32 partials either way; bf16: the output's rounding
    np.testing.assert_allclose(o2, o1, rtol=tol, atol=tol)
    np.testing.assert_allclose(l2, l1, rtol=2e-6, atol=2e-6)
    ref_o, ref_l = h.reference_op("decode_attention")(*(inputs[n].astype(np.float64) if inputs[n].dtype.kind == "f"
                                                         else inputs[n] for n in ("q", "k_cache", "v_cache")),
                                                       table, lens, return_lse=True)
    assert h.rel_err(o2, ref_o) < h.TOLERANCE[dtype] and h.rel_err(l2, ref_l) < 1e-5
    if framework == "jax":
        import jax

        import ato_torch
        import torch
        ts = ato_torch.decode_schedule(torch.from_numpy(table), torch.from_numpy(lens), block_size=BS)
        to = ato_torch.decode_attention(*(h.to_torch(inputs[n]) for n in ("q", "k_cache", "v_cache")),
                                        torch.from_numpy(table), torch.from_numpy(lens), schedule=ts)
        jo = jax.jit(lambda *x: ops.decode_attention(*x[:5], schedule=x[5]))(*args, sched)
        assert np.array_equal(to.float().numpy(), np.asarray(jo, np.float32)), "torch and jax differ"


def test_schedule_with_more_units_than_a_load_group(split_tiles):
    """A sequence whose shared prefix is 5 chunk-first units (one split: the split kernel starts
    from them, MERGE_LOADS = 4 at a time, so two groups, the second partial; else the combine
    merges them): with == without the schedule within fp32 rounding, and the reference; tails of
    0, 7 and 40 tokens."""
    import torch

    import ato_torch
    from ato_core.ops.decode import kernels
    from ato_core.ops.decode.schedule import DecodeSchedule, decode_schedule

    BS, chunk = 16, 64
    shared, tails = 5 * chunk // BS, (0, 7, 40)
    MB = shared + 3
    case = decode_case(3, 4, 2, 64, BS, 3 * MB, MB, dtype="float32")
    inputs = _inputs(case, [shared * BS + t for t in tails])
    table = inputs["block_table"]
    table[1:, :shared] = table[0, :shared]
    a = {n: h.to_torch(v) for n, v in inputs.items()}
    args = [a[n] for n in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]
    sched = DecodeSchedule(*map(torch.from_numpy, decode_schedule(table, inputs["seq_lens"], block_size=BS,
                                                                  chunk_tokens=chunk)))
    assert sched.seq_units.shape[1] == 5 > kernels.MERGE_LOADS.value
    o1, l1 = ato_torch.decode_attention(*args, return_lse=True)
    o2, l2 = ato_torch.decode_attention(*args, return_lse=True, schedule=sched)
    torch.testing.assert_close(o2, o1, rtol=2e-6, atol=2e-6)  # fp32 partials, a different summation order
    torch.testing.assert_close(l2, l1, rtol=2e-6, atol=2e-6)
    ref_o, ref_l = h.reference_op("decode_attention")(*(inputs[n].astype(np.float64) for n in ("q", "k_cache",
                                                                                                "v_cache")),
                                                       table, inputs["seq_lens"], return_lse=True)
    assert h.rel_err(o2.numpy(), ref_o) < h.TOLERANCE["float32"] and h.rel_err(l2.numpy(), ref_l) < 1e-5


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("scheduled", [False, True], ids=["seq_first", "schedule"])
def test_bhnd_cache_layout_is_bnhd(framework, scheduled):
    """Caches laid out [num_blocks, Hkv, block_size, D] (layout="bhnd", read through strides)
    give the bits of the same caches as [num_blocks, block_size, Hkv, D], with and without a
    schedule, and agree with the reference told the layout; its errors name the layout's axes."""
    ops, arr = frontend(framework)
    BS = 16
    table, lens = _shared_layout(BS)
    inputs = _inputs(decode_case(8, 8, 2, 48, BS, 60, 7, dtype="bfloat16"), lens)
    inputs["block_table"] = table
    q, k, v = (inputs[n] for n in ("q", "k_cache", "v_cache"))
    kh, vh = (np.ascontiguousarray(c.transpose(0, 2, 1, 3)) for c in (k, v))
    to = (lambda x: h.to_torch(x)) if framework == "torch" else arr
    tail = (to(table), to(lens))
    kw = {"return_lse": True}
    if scheduled:
        kw["schedule"] = ops.decode_schedule(*tail, block_size=BS)
    want = ops.decode_attention(to(q), to(k), to(v), *tail, **kw)
    got = ops.decode_attention(to(q), to(kh), to(vh), *tail, layout="bhnd", **kw)
    host = (lambda x: x.float().numpy()) if framework == "torch" else (lambda x: np.asarray(x, np.float32))
    for a, b in zip(want, got):
        np.testing.assert_array_equal(host(a), host(b))
    from ato_core.ops.decode.reference import decode_attention as ref
    r = ref(q.astype(np.float64), kh.astype(np.float64), vh.astype(np.float64), table, lens, layout="bhnd")
    assert h.rel_err(host(got[0]).astype(np.float64), r) < h.TOLERANCE["bfloat16"]
    raises_naming(ValueError, "k_cache.shape[2] (block_size)", ops.decode_attention, to(q), to(k), to(v), *tail,
                  layout="bhnd")
    raises_naming(ValueError, "layout: expected one of", ops.decode_attention, to(q), to(k), to(v), *tail,
                  layout="nhd")


@pytest.mark.skipif(not has_gluon(), reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
def test_hopper_chunk_kernel_chosen_where_it_applies():
    """With a schedule on an H100 (Target.gluon), fp16 / bf16 caches at D 128 run the Gluon
    chunk-first kernel (grid: work items, 128-row tiles of the tasks' rows, Hkv), either cache
    layout; fp32, another D, rows cp.async cannot copy, the interpreter: the portable kernel."""
    import dataclasses

    from ato_core.ops.decode import plans
    from ato_core.ops.decode.schedule import DecodeSchedule
    from ato_core.target import INTERPRETER
    from ato_core.testing import gpu_spec, h100

    sched = DecodeSchedule(*(gpu_spec(s, "int32") for s in ((16, 6), (64,), (256,), (1024,), (64, 16), (64,))))

    def chunk(D=128, dtype="bfloat16", target=None, layout="bnhd", k=None):
        q = gpu_spec((64, 32, D), dtype)
        k = k or gpu_spec((2048, 16, 8, D) if layout == "bnhd" else (2048, 8, 16, D), dtype)
        plan = plans.decode_plan(q, k, k, gpu_spec((64, 272), "int32"), gpu_spec((64,), "int32"), softmax_scale=None,
                                 target=target or h100(), schedule=sched, layout=layout)
        return plan.launches[0]

    launch = chunk()
    assert launch.name == "decode_chunk_hopper_kernel" and launch.grid == (16, 2, 8)  # 64 x 4 rows: 2 tiles
    assert chunk(dtype="float16").name == chunk(layout="bhnd").name == "decode_chunk_hopper_kernel"
    # 64 tasks of 4 sequences (U / W = 4 a work item): 16 row tiles for 1 busy one, the portable kernel's loop
    many = DecodeSchedule(*(gpu_spec(s, "int32") for s in ((64, 6), (256,), (1024,), (256,), (256, 1), (256,))))
    q, k = gpu_spec((256, 64, 128), "bfloat16"), gpu_spec((2048, 16, 8, 128), "bfloat16")
    assert plans.decode_plan(q, k, k, gpu_spec((256, 20), "int32"), gpu_spec((256,), "int32"), softmax_scale=None,
                             target=h100(), schedule=many).launches[0].name == "decode_chunk_kernel"
    for kw in [{"dtype": "float32"}, {"D": 64}, {"k": gpu_spec((2048, 16, 8, 128), "bfloat16")._replace(aligned=False)},
               {"target": INTERPRETER}, {"target": dataclasses.replace(h100(), gluon=False)}]:
        assert chunk(**kw).name == "decode_chunk_kernel", kw


def test_splits_fill_one_wave():
    """On an H100 (132 SMs at PROGRAMS_PER_SM = 4: 528 places), Hq32 Hkv8 D128 bf16, 8192 tokens
    a sequence: the splits (the split kernel's first grid axis) as many as fit in one wave where
    they fill ONE_WAVE of it (B8: 8, not 9; B32: 2, not 3), else enough to fill it (B24: 2 would
    fill 0.73, so 3), none where the GPU is full (B48, B64); B1 at MAX_SPLITS (results: H200
    decode-sweep 21)."""
    from ato_core.ops.decode import plans
    from ato_core.testing import gpu_spec, h100

    k = gpu_spec((8192, 64, 8, 128), "bfloat16")
    for B, splits in ((1, 64), (8, 8), (16, 4), (24, 3), (32, 2), (48, 1), (64, 1)):
        plan = plans.decode_plan(gpu_spec((B, 32, 128), "bfloat16"), k, k, gpu_spec((B, 128), "int32"),
                                 gpu_spec((B,), "int32"), softmax_scale=None, target=h100())
        split = next(launch for launch in plan.launches if launch.name == "decode_split_kernel")
        assert split.grid == (splits, B * 8), (B, split.grid)
        assert [launch.name for launch in plan.launches][1:] == (["decode_combine_kernel"] if splits > 1 else [])
