"""Every kernel compiles for an H100 (sm_90) as its GPU plan launches it, on a CPU-only
machine: Triton's frontend, its passes and ptxas run without a GPU. Catches what the
interpreter cannot (constexpr globals, layouts, shared-memory budgets, the types a
compiled kernel infers), before a GPU run. One representative plan per op, bf16."""

import pytest

from ato_core import cross_entropy, flash_attention, linear_attention, norms, rope, softmax, swiglu
from ato_core.launch import ArraySpec, cdiv, row_major_strides
from ato_core.target import Target

H100 = Target(interpret=False, num_sms=132, capability=(9, 0))
_TT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int32": "i32", "int64": "i64"}


def _spec(shape, dtype="bfloat16"):
    return ArraySpec(tuple(shape), dtype, row_major_strides(shape), "cuda:0")


def _plans():
    x, w = _spec((64, 4096)), _spec((4096,))
    yield "layer_norm", norms.forward_plan(x, None, w, w, rms=False, eps=1e-5, p=0.0, seed=0, target=H100), \
        {"x": x, "weight": w, "bias": w}
    yield "layer_norm bwd", norms.backward_plan(x, w, w, rms=False, has_residual=False, has_dh=False, p=0.0, seed=0,
                                                target=H100), \
        {"hx": x, "weight": w, "dy": x, "mean": _spec((64,), "float32"), "rstd": _spec((64,), "float32")}
    yield "rms_norm bwd", norms.backward_plan(x, w, None, rms=True, has_residual=False, has_dh=False, p=0.0, seed=0,
                                              target=H100), \
        {"hx": x, "weight": w, "dy": x, "mean": _spec((1,), "float32"), "rstd": _spec((64,), "float32")}
    yield "drln bwd", norms.backward_plan(x, w, w, rms=False, has_residual=True, has_dh=True, p=0.1, seed=1,
                                          target=H100), \
        {"hx": x, "weight": w, "dy": x, "dh": x, "mean": _spec((64,), "float32"), "rstd": _spec((64,), "float32")}
    wide = _spec((4, 65536))
    yield "drln looped", norms.forward_plan(wide, wide, _spec((65536,)), None, rms=False, eps=1e-5, p=0.1, seed=1,
                                            target=H100), \
        {"x": wide, "residual": wide, "weight": _spec((65536,))}
    yield "softmax", softmax.forward_plan(_spec((8, 50000)), temperature=1.0, target=H100), {"x": _spec((8, 50000))}
    g = _spec((64, 7168))
    yield "swiglu", swiglu.forward_plan(g, g, target=H100), {"gate": g, "up": g}
    yield "swiglu bwd", swiglu.backward_plan(g, target=H100), {"gate": g, "up": g, "dy": g}
    q, k, cs, pos = _spec((2, 32, 16, 128)), _spec((2, 8, 16, 128)), _spec((64, 64)), _spec((2, 16), "int64")
    yield "rope", rope.plan(q, k, cs, cs, pos, interleaved=False, inverse=True, target=H100), \
        {"q": q, "k": k, "cos": cs, "sin": cs, "positions": pos}
    lg, t = _spec((16, 128256)), _spec((16,), "int64")
    yield "cross_entropy", cross_entropy.forward_plan(lg, t, ignore_index=-100, reduction="mean", label_smoothing=0.1,
                                                      grad=True, target=H100), {"logits": lg, "targets": t}
    yield "cross_entropy loss", cross_entropy.forward_plan(lg, t, ignore_index=-100, reduction="sum",
                                                           label_smoothing=0.0, grad=False, target=H100), \
        {"logits": lg, "targets": t}
    yield "cross_entropy bwd", cross_entropy.backward_plan(lg, _spec((16,), "float32"), target=H100), \
        {"dlogits": lg, "dloss": _spec((16,), "float32")}
    q, k = _spec((1, 8, 256, 128)), _spec((1, 2, 256, 128))
    yield "flash_attention", flash_attention.forward_plan(q, k, k, causal=True, softmax_scale=None, target=H100), \
        {"q": q, "k": k, "v": k}
    yield "flash_attention bwd", flash_attention.backward_plan(q, k, k, q, causal=True, softmax_scale=None,
                                                               has_dlse=True, target=H100), \
        {"q": q, "k": k, "v": k, "o": q, "do": q, "lse": _spec((1, 8, 256), "float32"),
         "dlse": _spec((1, 8, 256), "float32")}
    yield from linear_attention_plans(_spec((2, 4, 512, 64)))


def linear_attention_plans(q, label="linear_attention"):
    """The linear_attention forward and backward plans at q's shape (k = v = q), causal and
    not, with the forward's residuals as the backward's inputs."""
    for causal in (True, False):
        tag = f"{label} {'causal' if causal else 'bidir'}"
        fwd, _ = linear_attention.forward_plan(q, q, q, causal=causal, feature_map="elu", eps=1e-6,
                                               initial_state=None, target=H100)
        yield tag, fwd, {"q": q, "k": q, "v": q}
        bwd = linear_attention.backward_plan(q, q, q, q, causal=causal, feature_map="elu", eps=1e-6,
                                             has_dfinal=False, target=H100)
        # the forward's residuals (rden, S_res, z_res: its results 3-5) as the forward plan writes them
        res = dict(zip(("rden", "S_res", "z_res"), fwd.results[3:]))
        yield f"{tag} bwd", bwd, {"q": q, "k": q, "v": q, "o": q, "do": q,
                                  **{n: fwd.buffer(r) for n, r in res.items()}}


def _scalar_type(v):
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i64" if abs(v) >= 2 ** 31 else "i32"
    return "fp32"


PLANS = list(_plans())


def compile_sm90(launch, plan, inputs):
    """Compiles one launch of ``plan`` for an H100 as its GPU plan launches it (pointer dtypes
    from ``inputs`` or the plan's buffers, every pointer 16-byte aligned, scalars typed as
    the launchers type them, its constexprs and options). Also used by benchmarks/ptx_fingerprint.py."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dtypes = [(inputs[n] if n in inputs else plan.buffer(n)).dtype for n in launch.inputs]
    dtypes += [b.dtype for b in launch.outputs]
    n_in, n_sc = len(launch.inputs), len(launch.scalars)
    sig, attrs = {}, {}
    for i, p in enumerate(launch.kernel.params):
        if i < n_in:
            sig[p.name] = "*" + _TT[dtypes[i]]
        elif i < n_in + n_sc:
            sig[p.name] = _scalar_type(launch.scalars[i - n_in])
        elif i < n_in + n_sc + len(launch.outputs):
            sig[p.name] = "*" + _TT[dtypes[i - n_sc]]
        else:
            sig[p.name] = "constexpr"
        if sig[p.name].startswith("*"):  # 16-byte aligned, as jax-triton declares every pointer
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=launch.kernel, signature=sig, constexprs=dict(launch.constexprs), attrs=attrs)
    opts = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, "enable_fp_fusion": launch.fp_fusion}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


@pytest.mark.parametrize("name,plan,inputs", PLANS, ids=[p[0] for p in PLANS])
def test_compiles_for_sm90(name, plan, inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    for launch in plan.launches:
        compiled = compile_sm90(launch, plan, inputs)
        assert compiled.asm["ptx"], f"{name}: {launch.name}"


# The kernels that stream [rows, width] arrays, and the scalar 16-bit loads and stores each may
# make: only the cross-entropy forward, one of each (the target's logit, and its gradient).
STREAMING = {"norm_fwd_kernel": 0, "norm_bwd_kernel": 0, "softmax_fwd_kernel": 0, "swiglu_fwd_kernel": 0,
             "swiglu_bwd_kernel": 0, "rope_kernel": 0, "ce_fwd_kernel": 1, "ce_bwd_kernel": 0}


OPS_PLANS = [p for p in PLANS if not p[0].startswith(("flash_attention", "linear_attention"))]


@pytest.mark.parametrize("name,plan,inputs", OPS_PLANS, ids=[p[0] for p in OPS_PLANS])
def test_streaming_kernels_move_vectors(name, plan, inputs, tmp_path, monkeypatch):
    """At aligned widths the memory-bound kernels load and store 16-byte vectors, not one
    bf16 element per instruction: the row offsets they compute from a size or a stride must
    carry its divisibility (ALIGN, see ato_core.kernels.common.aligned). The cross-entropy
    kernels once computed row * V without it and moved 2 bytes per access."""
    import re

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
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


@pytest.mark.parametrize("dtype,width", [("float32", 8192), ("bfloat16", 8192), ("float32", 4096)])
def test_norm_backward_pipeline_fits_shared_memory(dtype, width, tmp_path, monkeypatch):
    """The norm backward pipelines its rows' loads through shared memory (x, dy and, with a
    residual, dh: STAGES - 1 rows ahead). The widest single-piece rows must still fit an H100
    block (227 KB), pipelined where ato_core.norms budgets for it."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    x, w = _spec((64, width), dtype), _spec((width,), dtype)
    plan = norms.backward_plan(x, w, w, rms=False, has_residual=True, has_dh=True, p=0.1, seed=1, target=H100)
    stats = _spec((64,), "float32")
    compiled = compile_sm90(plan.launches[0], plan, {"hx": x, "weight": w, "dy": x, "dh": x, "mean": stats,
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
