"""Every kernel compiles for an H100 (sm_90) as its GPU plan launches it, on a CPU-only
machine: Triton's frontend, its passes and ptxas run without a GPU. Catches what the
interpreter cannot (constexpr globals, layouts, shared-memory budgets, the types a
compiled kernel infers), before a GPU run. One representative plan per op, bf16."""

import dataclasses
import importlib
import os
import re

import pytest

from ato_core.launch import cdiv
from ato_core.ops import FAMILIES, OPS
from ato_core.ops.norms import plans as norms
from ato_core.ops.rope import plans as rope
from ato_core.testing import compile_plans, gpu_spec as _spec, h100
from helpers import SLOW, plan_settings

H100 = h100()
_TT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int32": "i32", "int64": "i64",
       "uint32": "u32", "bool": "i1"}


def _plans():
    """(label, plan, input specs) of every family's compile examples (cases.COMPILE), the
    forward and, with a gradient, the backward (every cotangent given)."""
    for family in FAMILIES:
        for label, name, args, kwargs, *grad in importlib.import_module(family.__name__ + ".cases").COMPILE:
            plans = compile_plans(OPS[name], args, kwargs, H100, *grad)
            for (plan, specs), tag in zip(plans, ("", " bwd")):
                yield label + tag, plan, specs


def _is_one(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v == 1


def _scalar_type(v):
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i64" if abs(v) >= 2 ** 31 else "i32"
    return "fp32"


PLANS = list(_plans())


@pytest.fixture(autouse=True, scope="module")
def _shared_cache(tmp_path_factory):
    """One Triton cache for the module, shared by xdist's workers: many plans launch the same
    kernel alike (a cache key is the kernel's source, signature, constants and options, so a hit
    is the binary a fresh compile gives)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "triton-sm90"
    path.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(path))
        yield


def compile_sm90(launch, plan, inputs):
    """Compiles one launch of ``plan`` for an H100 as its GPU plan launches it (pointer dtypes
    from ``inputs`` or the plan's buffers, every pointer 16-byte aligned, scalars typed as
    the launchers type them, its constexprs and options). Also used by benchmarks/tools/ptx_fingerprint.py."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dtypes = [(inputs[n] if n in inputs else plan.buffer(n)).dtype for n in launch.inputs]
    constexprs = dict(launch.constexprs)
    dtypes += [b.dtype for b in launch.outputs]
    n_in, n_sc = len(launch.inputs), len(launch.scalars)
    sig, attrs = {}, {}
    for i, p in enumerate(launch.kernel.params):
        if i < n_in:
            sig[p.name] = "*" + _TT[dtypes[i]]
        elif i < n_in + n_sc:
            value = launch.scalars[i - n_in]
            # an integer 1 becomes a constant, as both launchers (Triton's, jax-triton's) make it: a
            # unit stride otherwise costs per-element address arithmetic the GPU binary never has
            if _is_one(value):
                sig[p.name], constexprs[p.name] = "constexpr", 1
            else:
                sig[p.name] = _scalar_type(value)
        elif i < n_in + n_sc + len(launch.outputs):
            sig[p.name] = "*" + _TT[dtypes[i - n_sc]]
        else:
            sig[p.name] = "constexpr"
        if sig[p.name].startswith("*"):  # 16-byte aligned, as jax-triton declares every pointer
            attrs[(i,)] = [["tt.divisibility", 16]]
    if launch.kernel.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn=launch.kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    else:
        src = ASTSource(fn=launch.kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    opts = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, "enable_fp_fusion": launch.fp_fusion}
    if launch.maxnreg:
        opts["maxnreg"] = launch.maxnreg
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


# Plans whose compile takes 30-60 s of a CPU (fp32 IEEE dots of kernels that other plans compile
# in bf16): the slow tier (helpers.SLOW); every GPU session's tier also compiles and runs them.
SLOW_PLANS = {"based_step16 bwd", "linear_attention_step64 bwd", "based32 causal Dv 48 bwd"}


def _check_scratch(launch, compiled, what):
    """A kernel uses Triton's global scratch iff its launch says so (Launch.scratch), and then its
    last output holds that scratch for every program, with room to align it."""
    import math

    from ato_core.launch import itemsize

    need, align = compiled.metadata.global_scratch_size, compiled.metadata.global_scratch_align
    assert bool(need) == launch.scratch, f"{what}: global scratch {need} bytes, Launch.scratch {launch.scratch}"
    if need:
        out = launch.outputs[-1]
        held = math.prod(out.shape) * itemsize(out.dtype)
        assert held >= math.prod(launch.grid) * need + align - 1, f"{what}: scratch {held} bytes"


@pytest.mark.parametrize("name,plan,inputs", [pytest.param(*p, marks=SLOW) if p[0] in SLOW_PLANS else p for p in PLANS],
                         ids=[p[0] for p in PLANS])
def test_compiles_for_sm90(name, plan, inputs):
    for launch in plan.launches:
        compiled = compile_sm90(launch, plan, inputs)
        assert compiled.asm["ptx"], f"{name}: {launch.name}"
        _check_scratch(launch, compiled, f"{name}: {launch.name}")
        # what an H100 (and H200) gives one block; more fails at launch (OutOfResources)
        assert compiled.metadata.shared <= 232448, f"{name}: {launch.name} needs {compiled.metadata.shared} B"


@pytest.mark.parametrize("name,plan,inputs", PLANS, ids=[p[0] for p in PLANS])
def test_no_input_sized_result_twice(name, plan, inputs):
    """No plan lists a buffer as large as its largest input (an activation or its gradient)
    under two of its results: ato_torch.library copies a result listed twice on every
    torch.compile call (a custom op's results may not alias). States and per-row statistics
    may be (a copy of their size). cross_entropy's unreturned z-loss once stood in as its
    gradient: a logits-sized copy a step."""
    import collections
    import math

    largest = max(math.prod(spec.shape) for spec in inputs.values() if spec is not None)
    twice = [r for r, n in collections.Counter(r for r in plan.results if r is not None).items() if n > 1]
    for r in twice:
        size = math.prod(inputs[r].shape if r in inputs else plan.buffer(r).shape)
        assert size < largest, f"{name}: {r} ({size} elements) is listed twice among {plan.results}"


def cubin_resources(cubin: bytes) -> dict:
    """{"REG": registers a thread, "STACK": local memory a thread (spills, local arrays),
    "SHARED": static shared memory} of a cubin, as cuobjdump -res-usage (Triton's own) reads
    it. Also used by benchmarks/tools/sm90_resources.py."""
    import os
    import re
    import subprocess
    import tempfile

    import triton

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED):(\d+)", out)}


def test_register_caps_reach_the_binary():
    """A launch's maxnreg (Based's block kernels: 168, for 3 programs an SM where they take
    230-255 registers uncapped) is in the sm_90 binary: registers a thread, as cuobjdump
    reads them from the cubin, at most the cap."""
    capped = [(name, launch, plan, inputs) for name, plan, inputs in PLANS for launch in plan.launches
              if launch.maxnreg]
    assert {launch.name for _, launch, _, _ in capped} >= {"based_fwd_kernel", "based_bwd_dq_kernel",
                                                            "based_bwd_dkdv_kernel"}
    for name, launch, plan, inputs in capped:
        regs = cubin_resources(compile_sm90(launch, plan, inputs).asm["cubin"])["REG"]
        assert regs <= launch.maxnreg, f"{name}: {launch.name} holds {regs} registers, capped at {launch.maxnreg}"


@pytest.mark.parametrize("exact", [False, True])
def test_walk_products_stay_in_registers(exact):
    """Based's state walks keep each chunk's product tile (fp32 [FT, CHUNK], from the selector
    dots) in the dots' registers: no layout conversion of it, which goes through shared memory.
    A choice of the products' form inside the chunk loop once joined the two forms' layouts and
    sent every tile through shared memory twice (H100 walk 202 against 154 us)."""
    import re

    walks = [(launch, plan, inputs) for name, plan, inputs in PLANS if name.startswith("based16 causal walk")
             for launch in plan.launches if launch.name.endswith("state_walk_kernel")]
    assert {launch.name for launch, _, _ in walks} == {"based_state_walk_kernel", "based_bwd_state_walk_kernel"}
    for launch, plan, inputs in walks:
        if "EXACT" in launch.constexprs:  # (the forward's: the final state's rests summed beside S)
            launch = dataclasses.replace(launch, constexprs={**launch.constexprs, "EXACT": exact})
        ttgir = compile_sm90(launch, plan, inputs).asm["ttgir"]
        tile = f"tensor<{launch.constexprs['FT']}x{launch.constexprs['CHUNK']}xf32"
        converted = re.findall(r"ttg\.convert_layout %\S+ : (tensor<[^>]*>)", ttgir)
        assert converted, "no layout conversion at all: the pattern no longer reads this Triton's IR"
        assert not [t for t in converted if t.startswith(tile)], f"{launch.name}: {tile} converted"


# The kernels that stream [rows, width] arrays, and the scalar 16-bit loads and stores each may
# make: only the cross-entropy forward, one of each (the target's logit, and its gradient).
STREAMING = {"norm_fwd_kernel": 0, "norm_bwd_kernel": 0, "softmax_fwd_kernel": 0, "swiglu_fwd_kernel": 0,
             "swiglu_bwd_kernel": 0, "rope_kernel": 0, "ce_fwd_kernel": 1, "ce_bwd_kernel": 0}


OPS_PLANS = [p for p in PLANS if not p[0].startswith(("flash_attention", "linear_attention"))]


@pytest.mark.parametrize("name,plan,inputs", OPS_PLANS, ids=[p[0] for p in OPS_PLANS])
def test_streaming_kernels_move_vectors(name, plan, inputs):
    """At aligned widths the memory-bound kernels load and store 16-byte vectors, not one
    bf16 element per instruction: the row offsets they compute from a size or a stride must
    carry its divisibility (ALIGN, see ato_core.triton_helpers.aligned). The cross-entropy
    kernels once computed row * V without it and moved 2 bytes per access."""
    import re

    for launch in plan.launches:
        scalars = STREAMING.get(launch.kernel.fn.__name__)
        if scalars is None:
            continue
        ptx = compile_sm90(launch, plan, inputs).asm["ptx"]
        assert re.search(r"ld\.global[\w:.]*\.v[24]\.", ptx), f"{name}: {launch.name} loads no vector"
        if launch.constexprs.get("GRAD", True):  # the loss alone stores one fp32 number a row
            assert re.search(r"st\.global[\w:.]*\.v[24]\.", ptx), f"{name}: {launch.name} stores no vector"
        assert len(re.findall(r"ld\.global[\w:.]*\.b16\b", ptx)) <= scalars, f"{name}: {launch.name} loads scalar bf16"
        assert len(re.findall(r"st\.global[\w:.]*\.b16\b", ptx)) <= scalars, f"{name}: {launch.name} stores scalar bf16"


# Tile kernels whose [rows, columns] tiles of 1- and 2-byte elements must move in vectors: a mask
# on a bound of unknown alignment along the contiguous axis (keys < Nk, v0 + c < V), or a tile
# start the compiler cannot see is a multiple of the tile, splits every access into elements.
TILE_VECTORS = [("flash_attention options", "fa_fwd_kernel"), ("flash_attention options bwd", "fa_bwd_dq_kernel"),
                ("flash_attention options bwd", "fa_bwd_dkdv_kernel"), ("flash_attention bias", "fa_fwd_kernel"),
                ("flash_attention bias bwd", "fa_bwd_dq_kernel"), ("flash_attention bias bwd", "fa_bwd_dkdv_kernel"),
                ("linear_cross_entropy bwd", "lce_dlogits_kernel"), ("linear_cross_entropy bwd", "lce_dw_kernel"),
                ("merge_attention_states", "merge_states_kernel")]


@pytest.mark.parametrize("label,kernel_name", TILE_VECTORS, ids=[f"{a}:{b}" for a, b in TILE_VECTORS])
def test_tile_kernels_move_vectors(label, kernel_name):
    """No 1- or 2-byte global load or store in these kernels (bias and mask tiles of flash
    attention: one element a load made a bias cost 3.57x plain causal on an H100, 1.62x in
    vectors; linear_cross_entropy's dlogits stores and dweight's loads of them, which could not
    then be pipelined; merge_attention_states' rows of D)."""
    import re

    found = [(launch, plan, inputs) for name, plan, inputs in PLANS if name == label for launch in plan.launches
             if launch.name == kernel_name]
    assert found, f"no {kernel_name} in the compile example {label!r}"
    ptx = compile_sm90(*found[0]).asm["ptx"]
    narrow = re.findall(r"\b(?:ld|st)\.global[\w:.]*\.[bsu](?:8|16)\b", ptx)
    assert not narrow, f"{label}: {kernel_name} moves single elements ({len(narrow)} accesses, e.g. {narrow[0]})"


@pytest.mark.parametrize("dtype,width", [("float32", 8192), ("bfloat16", 8192), ("float32", 4096)])
def test_norm_backward_pipeline_fits_shared_memory(dtype, width):
    """The norm backward pipelines its rows' loads through shared memory (x, dy and, with a
    residual, dh: STAGES - 1 rows ahead). The widest single-piece rows must still fit an H100
    block (227 KB), pipelined where ato_core.ops.norms.plans budgets for it."""
    x, w = _spec((64, width), dtype), _spec((width,), dtype)
    plan = norms.backward_plan(x, w, w, rms=False, has_residual=True, has_dh=True, p=0.1, seed=1, target=H100)
    stats = _spec((64,), "float32")
    compiled = compile_sm90(plan.launches[0], plan, {"h": x, "weight": w, "dy": x, "dh": x, "mean": stats,
                                                     "rstd": stats})
    assert plan.launches[0].constexprs["STAGES"] > 1
    assert compiled.metadata.shared <= 227 * 1024


@pytest.mark.parametrize("name,plan,inputs", PLANS, ids=[p[0] for p in PLANS])
def test_direct_launch_finds_every_parameter(name, plan, inputs):
    """ato_torch launches a cached binary by passing every kernel parameter in signature
    order: the plan's pointers and scalars, then the constexprs. Every GPU launch must be
    laid out so (else it would always take Triton's slower path, or misplace arguments)."""
    from ato_torch.launcher import _direct

    class Binary:
        run, function, packed_metadata = "launcher", "function", "metadata"

    for launch in plan.launches:
        nargs = len(launch.inputs) + len(launch.scalars) + len(launch.outputs)
        direct = _direct(launch, Binary(), nargs)
        params = launch.kernel.params
        assert direct, launch.name
        run, function, metadata, gx, gy, gz, tail = direct
        assert (run, function, metadata) == ("launcher", "function", "metadata")
        assert (gx, gy, gz) == tuple(launch.grid) + (1,) * (3 - len(launch.grid))
        assert len(tail) == len(params) - nargs == sum(p.is_constexpr for p in params)
        for p, v in zip(params[nargs:], tail):
            assert v == launch.constexprs.get(p.name, p.default), (launch.name, p.name)


def test_rope_grid_fits_any_sequence_and_head_count():
    """The rope grid puts (batch row, position block) on axis 0 and head tiles on axis 1 (at
    most 65535): a long sequence or very many heads still launch, the latter with more tiles
    per program."""
    cs = _spec((4_000_000, 64))
    long = _spec((2, 1, 4_000_000, 128))
    plan = rope.plan(long, long, cs, cs, None, interleaved=False, inverse=False, target=H100)
    (launch,) = plan.launches
    assert launch.grid[0] == 2 * cdiv(4_000_000, launch.constexprs["BLOCK_N"]) and launch.grid[1] <= 65535
    many = _spec((1, 3_000_000, 1, 128))
    (launch,) = rope.plan(many, many, cs, cs, None, interleaved=False, inverse=False, target=H100).launches
    tiles = 2 * cdiv(3_000_000, launch.constexprs["HEADS"])
    assert launch.scalars[-1] > 1 and launch.grid[1] <= 65535 and launch.grid[1] * launch.scalars[-1] >= tiles


def test_decode_chunk_loads_overlap_the_dots():
    """The chunk-first kernel's K/V gathers (behind their block-id load) are double-buffered:
    the wait at a tile's start leaves the next tile's copies in flight (async_wait num > 0).
    At the 3 stages it once had, Triton kept one buffer and waited for every copy (num = 0):
    no load overlapped the dots (H100 chunk kernel 27.3 against 22.3 us)."""
    import re

    chunks = [(launch, plan, inputs) for name, plan, inputs in PLANS if name == "decode chunk-first D64"
              for launch in plan.launches if launch.name == "decode_chunk_kernel"]
    assert len(chunks) == 1
    ttgir = compile_sm90(*chunks[0]).asm["ttgir"]
    waits = [int(n) for n in re.findall(r"ttg\.async_wait [^{]*\{num = (\d+)", ttgir)]
    assert waits, "no async copies at all: the pattern no longer reads this Triton's IR"
    assert max(waits) > 0, f"decode_chunk_kernel waits for every copy at each tile (async_wait nums {waits})"


def test_gqa_dkdv_takes_heads_in_one_loop():
    """flash_attention's portable dk/dv at G 4 (the "portable" compile example) loop over (head,
    block) pairs (HEADS_IN_LOOP): a small stack frame. A loop over heads around the three query-range loops
    held 1672 bytes a thread on sm_90 (GQA dk/dv 6.5% slower on an H100)."""
    found = [(launch, plan, inputs) for name, plan, inputs in PLANS if name == "flash_attention portable bwd"
             for launch in plan.launches if launch.name == "fa_bwd_dkdv_kernel"]
    assert len(found) == 1 and found[0][0].constexprs["HEADS_IN_LOOP"]
    stack = cubin_resources(compile_sm90(*found[0]).asm["cubin"])["STACK"]
    assert stack <= 256, f"fa_bwd_dkdv_kernel at G 4 holds a {stack}-byte stack frame a thread"


# float64 row ops as tests/test_float64.py runs them (op, logits-like shape, kwargs)
F64_PLANS = [("cross_entropy", {"label_smoothing": 0.1, "z_loss": 0.01}), ("cross_entropy", {"softcap": 2.0}),
             ("softmax", {}), ("layer_norm", {})]


@pytest.mark.parametrize("name,kwargs", F64_PLANS, ids=[f"{n} {k}" for n, k in F64_PLANS])
def test_float64_constants_stay_float64(name, kwargs):
    """No float64 kernel computes with an fp32-rounded copy of log2 e, ln 2 or 2 log2 e: a
    float constexpr in tl.fma became one (cross_entropy's gradient, 5e-8 off on the GPU), and
    the interpreter, which keeps constants exact, cannot show it."""
    import numpy as np

    from ato_core.testing import gpu_spec

    args = (gpu_spec((4, 6), "float64"),) + ((gpu_spec((4,), "int64"),) if name == "cross_entropy" else ())
    rounded = {f"0d{np.float64(np.float32(c)).view(np.uint64):016X}": c
               for c in (1.4426950408889634, 0.6931471805599453, 2.8853900817779268)}
    for plan, specs in compile_plans(OPS[name], args, kwargs, H100):
        for launch in plan.launches:
            ptx = compile_sm90(launch, plan, specs).asm["ptx"]
            found = [c for hexval, c in rounded.items() if hexval in ptx]
            assert not found, f"{name} {kwargs}: {launch.name} uses {found} rounded to fp32"


def _gluon_launches(which):
    """(launch, plan, input specs) of a Gluon kernel: the Hopper forward or the backward's dK /
    dV or dQ launch, GQA, Nq != Nk, causal, with a window, or (which ending in "lengths") q and
    kv lengths, or ("alibi") [B, Hq] ALiBi slopes, or ("softcap") softcap with a window, ALiBi and
    lengths, or ("segments") segment ids with a window, or ("varlen") packed sequences with a
    window and [B, Hq] ALiBi slopes, or ("dropout", plans.HOPPER_DROPOUT, HOPPER_DROPOUT_BACKWARD)
    dropout with a window and an int seed, ("key dropout") with ALiBi and a JAX key's seed words;
    "item": the forward one item a program (plans.HOPPER_PERSISTENT off; on, these short items run persistent); "split": the
    forward's K / V ring with split barriers (plans.HOPPER_SPLIT_KV).
    "persistent": the forward's persistent form with kv lengths (plans.PERSISTENT_KV_LENS), dQ's
    persistent form (plans.HOPPER_BWD_PERSISTENT), whatever the forward's flag says; without it
    dQ is one item a program."""
    from ato_core.ops.flash_attention import plans as fa
    from ato_core.testing import gpu_spec

    if which.endswith("varlen"):
        q, k = gpu_spec((700, 8, 128)), gpu_spec((900, 2, 128))
        specs = {"q": q, "k": k, "v": k, "do": q, "cu_seqlens_q": gpu_spec((4,), "int32"),
                 "cu_seqlens_k": gpu_spec((4,), "int32"), "alibi_slopes": gpu_spec((3, 8), "float32"),
                 "lse_base2": gpu_spec((8, 700), "float32")}
        kw = dict(max_seqlen_q=300, max_seqlen_k=500, causal=True, softmax_scale=None, target=H100,
                  options=fa.Options(window=(100, None)), alibi=specs["alibi_slopes"])
        cu = (specs["cu_seqlens_q"], specs["cu_seqlens_k"])
        if which.startswith("forward"):
            plan = fa.varlen_forward_plan(q, k, k, *cu, **kw)
            return plan.launches[0], plan, specs
        plan = fa.varlen_backward_plan(q, k, k, *cu, q, has_dlse=False, **kw)
        return plan.launches[1 if which.startswith("dkdv") else 2], plan, specs
    q, k = gpu_spec((2, 8, 300, 128)), gpu_spec((2, 2, 500, 128))
    specs = {"q": q, "k": k, "v": k, "do": q, "q_lengths": gpu_spec((2,), "int32"),
             "kv_lengths": gpu_spec((2,), "int64"), "alibi_slopes": gpu_spec((2, 8), "float32"),
             "lse_base2": gpu_spec((2, 8, 300), "float32")}
    if which.endswith("lengths"):
        kw = {"arrays": (None, specs["q_lengths"], specs["kv_lengths"]) + (None,) * 5}
    elif which.endswith("alibi"):
        kw = {"arrays": (specs["alibi_slopes"],) + (None,) * 7}
    elif which.endswith("segments"):  # with a window
        specs.update(q_segment_ids=gpu_spec((2, 300), "int32"), kv_segment_ids=gpu_spec((2, 500), "int32"))
        kw = {"options": fa.Options(window=(100, None)),
              "arrays": (None,) * 3 + (specs["q_segment_ids"], specs["kv_segment_ids"]) + (None,) * 3}
    elif which.endswith("dropout"):  # with a window (an int seed), or ("key dropout") ALiBi and a JAX key's words
        specs["seed"] = gpu_spec((2,), "uint32")
        kw = {"options": fa.Options(window=(100, None), dropout_p=0.1, seed=3)}
        if "key" in which:
            kw = {"options": fa.Options(dropout_p=0.1),
                  "arrays": (specs["alibi_slopes"],) + (None,) * 6 + (specs["seed"],)}
    elif which.endswith("softcap"):  # with a window, ALiBi and lengths
        kw = {"options": fa.Options(window=(100, None), softcap=30.0),
              "arrays": (specs["alibi_slopes"], specs["q_lengths"], specs["kv_lengths"]) + (None,) * 5}
    else:
        kw = {"options": fa.Options(window=(100, None))}
    if which.startswith("forward"):
        with plan_settings("flash_attention", fa, [fa.forward_plan], HOPPER_DROPOUT="dropout" in which,
                           HOPPER_PERSISTENT="item" not in which, HOPPER_SPLIT_KV="split" in which,
                           PERSISTENT_KV_LENS="persistent" in which or fa.PERSISTENT_KV_LENS):
            plan = fa.forward_plan(q, k, k, causal=True, softmax_scale=None, target=H100, **kw)
        return plan.launches[0], plan, specs
    with plan_settings("flash_attention", fa, [fa.backward_plan],
                       HOPPER_BWD_PERSISTENT="persistent" in which):
        plan = fa.backward_plan(q, k, k, q, causal=True, softmax_scale=None, has_dlse=False, target=H100, **kw)
    return plan.launches[1 if which.startswith("dkdv") else 2], plan, specs


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
@pytest.mark.parametrize("which", ["forward", "dkdv", "dq", "forward persistent lengths", "dkdv lengths", "dq lengths",
                                   "forward alibi",
                                   "dkdv alibi", "dq alibi", "forward varlen", "dkdv varlen", "dq varlen",
                                   "forward softcap", "dkdv softcap", "dq softcap", "forward segments",
                                   "dq persistent", "dq persistent alibi", "forward dropout", "forward key dropout",
                                   "forward item dropout", "forward split", "forward item split dropout",
                                   "dkdv dropout", "dkdv key dropout", "dq dropout", "dq persistent dropout"])
def test_gluon_compiles_alike_for_jax(which):
    """ato_jax.launcher._compile_gluon (what jax-triton 0.3.x calls for a Gluon kernel) builds the
    Hopper kernels into the PTX that compile_sm90 (a launch as Triton's own launcher compiles it,
    torch's path) builds, and launches them with all their partitions' warps: the precondition of
    bitwise torch == JAX on the GPU, checked here on a CPU with a stand-in for jax-triton's library.
    Each fits an H100's shared memory and sets its partitions' registers (setmaxnreg)."""
    launch, plan, specs = _gluon_launches(which)
    assert "persistent" not in which or launch.name.endswith("_persistent_kernel"), launch.name
    assert "item" not in which or launch.name == "fa_fwd_hopper_kernel", launch.name
    assert launch.constexprs.get("DROPOUT", False) == ("dropout" in which), (launch.name, launch.constexprs)
    assert launch.constexprs.get("SPLIT_KV", False) == ("split" in which)
    _check_scratch(launch, _compiles_alike_for_jax(launch, plan, specs, 12), which)


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
def test_gluon_register_cap_reaches_jax():
    """A Gluon launch's maxnreg travels to jax-triton 0.3's Gluon compile as an option (not a
    kernel constant): the same PTX as torch's, with the cap in it."""
    import dataclasses

    launch, plan, specs = _gluon_launches("forward")
    capped = _compiles_alike_for_jax(dataclasses.replace(launch, maxnreg=160), plan, specs, 12)
    assert ".maxnreg 160" in capped.asm["ptx"]


def _compiles_alike_for_jax(launch, plan, specs, warps, specialised=True):
    """test_gluon_compiles_alike_for_jax's check of one Gluon launch of ``warps`` warps in all
    (``specialised``: warp-specialised); returns torch's compiled kernel."""
    from ato_jax import launcher

    name, n_warps, _, shared, ptx, _, cc = _jax_compile(launch, plan, specs)
    torch_side = compile_sm90(launch, plan, specs)
    assert n_warps == torch_side.metadata.num_warps == warps and cc == 90
    assert shared == torch_side.metadata.shared <= 232448 and name == torch_side.metadata.name
    expected = torch_side.asm["ptx"]
    if launch.scratch:  # JAX's reads its global scratch from the last output (jaxlib passes none)
        expected = launcher.scratch_from_last_output(expected, name, torch_side.metadata.global_scratch_align)
        assert expected != torch_side.asm["ptx"]
    assert ptx == expected and ("setmaxnreg" in ptx) == specialised
    # a barrier of the whole CTA (no thread count) in a partition waits for warps that never come:
    # Triton 3.6 emits one for a gl.jit(noinline=True) function called from a partition (an
    # mbarrier.arrive's thread barrier there), the persistent dK / dV patch's hang
    bar0 = re.search(r"\bbar\.sync\s+0;", ptx)
    assert not (specialised and bar0), "a CTA-wide bar.sync 0 in a warp-specialised kernel"
    return torch_side


def _jax_compile(launch, plan, specs):
    """The TritonKernel arguments ato_jax's _compile_gluon makes of a Gluon launch, with a
    stand-in for jax-triton's library, as jax-triton calls it for triton_call_kwargs' call."""
    import types

    import numpy as np
    import triton._C.libtriton as libtriton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    from ato_jax import launcher

    assert launch.kernel.is_gluon()
    lib = types.SimpleNamespace(
        _triton=libtriton, get_or_create_triton_kernel=lambda *a, **kw: pytest.fail("not a Gluon compile"),
        triton_kernel_call_lib=types.SimpleNamespace(TritonKernel=lambda *a: a, get_compute_capability=lambda d: 90))
    launcher._compile_gluon(lib)
    # the scalars as jax-triton receives them (np.float32 for a float) and types them
    scalars = [float(v) if isinstance(v, np.float32) else v for v in launcher.kernel_scalars(launch.scalars)]
    n_in = len(launch.inputs)
    arg_dtypes = (["*" + _TT[(specs[n] if n in specs else plan.buffer(n)).dtype] for n in launch.inputs]
                  + [_scalar_type(v) for v in scalars]
                  + ["*" + _TT[b.dtype] for b in launch.outputs])
    scalar_args = [(n_in + i, arg_dtypes[n_in + i], v) for i, v in enumerate(scalars)]
    # the metaparameters besides the constexprs, as triton_call_kwargs passes them
    kw = {k: v for k, v in launcher.triton_call_kwargs(launch, False).items()
          if k in (launcher.MAXNREG, launcher.SCRATCH)}
    kernel, _ = lib.get_or_create_triton_kernel(
        lambda device, cc: CUDABackend(GPUTarget("cuda", cc, 32)), "CUDA", launch.kernel, arg_dtypes, scalar_args,
        num_warps=launch.num_warps, num_stages=launch.num_stages, num_ctas=1, compute_capability=90,
        enable_fp_fusion=launch.fp_fusion, metaparams=dict(launch.constexprs, **kw), dump=False)
    return kernel


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
def test_scratch_from_last_output():
    """The Gluon forward makes its TMA descriptors in Triton's global scratch, the parameter after
    its last output (then the profiler's), which jaxlib passes as null: JAX's PTX loads the last
    output's address instead, rounded up to the scratch's alignment, and nothing else changes."""
    import re

    from ato_jax import launcher

    launch, plan, specs = _gluon_launches("forward")
    compiled = compile_sm90(launch, plan, specs)
    name, ptx, align = compiled.metadata.name, compiled.asm["ptx"], compiled.metadata.global_scratch_align
    params = sorted(int(i) for i in re.findall(rf"\.param [^\n]*\b{name}_param_(\d+)\b", ptx))
    n = len(params)
    assert params == list(range(n)) and align == 128
    patched = launcher.scratch_from_last_output(ptx, name, align)
    assert f"[{name}_param_{n - 2}]" in ptx and f"[{name}_param_{n - 2}]" not in patched
    removed = [line for line in ptx.splitlines() if line not in patched.splitlines()]
    added = [line.strip() for line in patched.splitlines() if line not in ptx.splitlines()]
    assert len(removed) == 1 and re.fullmatch(r"\s*ld\.param\.b64 \t%rd\d+, \[\w+\];", removed[0])
    reg = removed[0].split()[1].rstrip(",")
    assert added == [f"ld.param.b64 \t{reg}, [{name}_param_{n - 3}];", f"add.s64 \t{reg}, {reg}, 127;",
                     f"and.b64 \t{reg}, {reg}, -128;"]


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
def test_jax_refuses_an_undeclared_scratch():
    """A Gluon kernel that needs global scratch while its launch's last output is not a
    scratch_buffer would, from JAX, read a real output as its scratch: refused when compiled."""
    import dataclasses

    launch, plan, specs = _gluon_launches("dq")
    assert launch.scratch
    plain = dataclasses.replace(launch.outputs[-1], scratch=False)
    undeclared = dataclasses.replace(launch, outputs=(*launch.outputs[:-1], plain))
    assert not undeclared.scratch
    with pytest.raises(RuntimeError, match="bytes of global scratch a program, its launch declares no scratch output"):
        _jax_compile(undeclared, plan, specs)


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
@pytest.mark.parametrize("block_size,causal", [(128, True), (256, False)])
def test_block_sparse_gluon_compiles_alike_for_jax(block_size, causal):
    """block_sparse_attention's Gluon forward, dK / dV and dQ kernels, as
    test_gluon_compiles_alike_for_jax: the same PTX for both frameworks, 12 warps."""
    from ato_core.ops.block_sparse import plans as bp
    from ato_core.testing import gpu_spec

    q, k = gpu_spec((2, 8, 1000, 128)), gpu_spec((2, 2, 1100, 128))
    mask = gpu_spec((2, 8, -(-1000 // block_size), -(-1100 // block_size)), "bool")
    plan = bp.block_sparse_forward_plan(q, k, k, mask, block_size=block_size, causal=causal, softmax_scale=None,
                                        target=H100)
    backward = bp.block_sparse_backward_plan(q, k, k, mask, q, block_size=block_size, causal=causal,
                                             softmax_scale=None, has_dlse=False, target=H100)
    assert [launch.name for launch in plan.launches[1:] + backward.launches[2:]] == [
        "bs_fwd_hopper_kernel", "bs_bwd_dkdv_hopper_kernel", "bs_bwd_dq_hopper_kernel"]
    specs = {"q": q, "k": k, "v": k, "do": q, "block_mask": mask, "rows": plan.buffer("rows"),
             "rows_count": plan.buffer("rows_count")}
    _compiles_alike_for_jax(plan.launches[1], plan, specs, 12)
    for launch in backward.launches[2:]:
        _compiles_alike_for_jax(launch, backward, specs, 12)


@pytest.mark.skipif(not H100.gluon, reason="the Gluon kernels need a Triton of target.GLUON_TRITON")
@pytest.mark.parametrize("shape,block_size,y_heads", [((2, 3, 1000, 128), 64, 0), ((1, 2, 300, 256), 256, 0),
                                                      ((3, 2, 70, 16), 16, 0), ((2, 4, 1000, 64), 32, 1)])
def test_coarsen_gluon_compiles_alike_for_jax(shape, block_size, y_heads):
    """max_l2_coarsen's Gluon kernel (4 warps, no partitions; y_heads: curvature_block_mask's q and
    k in one launch), as test_gluon_compiles_alike_for_jax: the same PTX for both frameworks, its
    ring within the shared memory of PROGRAMS_PER_SM programs."""
    from ato_core.ops.block_sparse import plans as bp

    x, y = _spec(shape), _spec((shape[0], y_heads, *shape[2:]))
    with plan_settings("max_l2_coarsen", bp, [], HOPPER_COARSEN={**bp.HOPPER_COARSEN, "MIN_TILES": 0}):
        if y_heads:
            plan = bp.curvature_plan(x, y, block_size=block_size, keep=0.1, lam=0.5, causal=True, local_blocks=1,
                                     target=H100)
        else:
            plan = bp.coarsen_plan(x, block_size=block_size, target=H100)
        assert plan.launches[0].name == "max_l2_coarsen_hopper_kernel"
        compiled = _compiles_alike_for_jax(plan.launches[0], plan, {"x": x, "q": x, "k": y}, 4, specialised=False)
        assert compiled.metadata.shared * bp.HOPPER_COARSEN["PROGRAMS_PER_SM"] <= 232448
