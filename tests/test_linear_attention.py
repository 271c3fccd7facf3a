"""linear_attention, linear_attention_step, elu_plus_one: CPU tier (Triton's interpreter).

Every case runs in ato_torch and ato_jax (under jax.jit(jax.value_and_grad)) on the same
inputs and is compared with the float64 reference (outputs and every gradient, with the
per-dtype tolerances of ato_cli.harness.TOLERANCE); on the CPU both frameworks run the
identical interpreted kernels, so they must agree bit for bit.
"""

import os
import sys
import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import ato_jax
import ato_torch
import ato_torch.launcher
from ato_cli import harness as h
from ato_core.ops.linear_attention.cases import elu_case, la_case, step_case
from ato_core.ops.linear_attention import plans as la_core
from ato_core import reference as ref
from ato_core.target import INTERPRETER
from helpers import assert_bnhd_is_bhnd, bad_input_arrays, check, frontend, raises_naming

LA_CASES = [
    # (B, H, N, Dk, Dv): one row; lengths that are no multiple of any block; several
    # segments and several chunks per segment (N=300); odd head dims; Dk > 128 (chunk
    # 32, several Dv tiles in the forward and several Dk tiles in the backward).
    (1, 1, 1, 16, 16),
    (1, 2, 37, 8, 12),
    (2, 2, 300, 48, 40),
    (1, 2, 70, 3, 5),
    (1, 1, 45, 130, 72),
]


def _spec(*shape):
    """The ArraySpec of a contiguous fp32 CPU tensor of this shape (for plan-level tests)."""
    return ato_torch.launcher.spec(torch.empty(shape))


@pytest.mark.parametrize("shape", LA_CASES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("feature_map", [None, "elu"])
def test_linear_attention_fp32(shape, causal, feature_map):
    check(la_case(*shape, causal=causal, feature_map=feature_map, seed=sum(shape)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_linear_attention_half(dtype, causal):
    check(la_case(2, 2, 150, 32, 24, dtype=dtype, causal=causal, seed=3))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_initial_and_final_state(dtype):
    """Gradients flow to the initial state and from the final state."""
    check(la_case(2, 1, 90, 16, 24, dtype=dtype, causal=True, state=True, final=True, seed=5))


def test_final_state_bidirectional():
    check(la_case(1, 2, 77, 16, 8, causal=False, final=True, seed=6))


def test_step():
    check(step_case(2, 3, 20, 12, seed=7))
    check(step_case(1, 2, 16, 16, dtype="bfloat16", feature_map=None, seed=8))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_elu_plus_one(dtype):
    check(elu_case((3, 1000), dtype))
    check(elu_case((4097,), dtype, seed=1))


def test_reference_forms_agree():
    """The quadratic form and the recurrence are two independent references."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.random((2, 2, 33, n)) for n in (6, 6, 5))
    S0, z0 = rng.random((2, 2, 6, 5)), rng.random((2, 2, 6))
    a, (Sa, za) = ref.linear_attention(q, k, v, causal=True, feature_map="elu", initial_state=(S0, z0),
                                       output_final_state=True)
    b, (Sb, zb) = ref.linear_attention_recurrent(q, k, v, feature_map="elu", initial_state=(S0, z0))
    for x, y in ((a, b), (Sa, Sb), (za, zb)):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


def test_reference_grad_in_jax_matches_torch():
    """The one reference yields the same gradients under jax.grad and torch autograd."""
    case = la_case(1, 2, 20, 4, 3, causal=True)
    inputs = h.make_inputs(case)
    r = h.run_torch(case, inputs, reference=True)
    do = h.cotangents(case, r.outputs)[0]

    def loss(q, k, v):
        return jnp.sum(ref.linear_attention(q, k, v, causal=True, feature_map="elu") * do)

    grads = jax.grad(loss, argnums=(0, 1, 2))(*(jnp.asarray(inputs[n]) for n in "qkv"))
    chex.assert_trees_all_close([np.asarray(g, np.float64) for g in grads], [r.grads[n] for n in "qkv"],
                                rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_state_continuation(framework):
    """Running a sequence in two pieces, carrying the state, equals running it whole."""
    case = la_case(2, 2, 150, 16, 12, causal=True)
    x = h.make_inputs(case)
    ops, arr = frontend(framework)
    q, k, v = (arr(x[n]) for n in "qkv")
    o, (S, z) = ops.linear_attention(q, k, v, causal=True, feature_map="elu", output_final_state=True)
    cut = 61
    o1, st = ops.linear_attention(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], causal=True, feature_map="elu",
                                  output_final_state=True)
    o2, (S2, z2) = ops.linear_attention(q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], causal=True,
                                        feature_map="elu", initial_state=st, output_final_state=True)
    whole = np.asarray(o)
    pieces = np.concatenate([np.asarray(o1), np.asarray(o2)], axis=2)
    assert h.rel_err(pieces, whole) < 1e-5
    assert h.rel_err(np.asarray(S2), np.asarray(S)) < 1e-5
    assert h.rel_err(np.asarray(z2), np.asarray(z)) < 1e-5

    # ...and a decoding step continues it: step(row N) == last row of the whole run on N+1.
    n = 149
    _, st = ops.linear_attention(q[:, :, :n], k[:, :, :n], v[:, :, :n], causal=True, feature_map="elu",
                                 output_final_state=True)
    o_step, (S3, z3) = ops.linear_attention_step(q[:, :, n], k[:, :, n], v[:, :, n], st, feature_map="elu")
    assert h.rel_err(np.asarray(o_step), whole[:, :, n]) < 1e-5
    assert h.rel_err(np.asarray(S3), np.asarray(S)) < 1e-5
    assert h.rel_err(np.asarray(z3), np.asarray(z)) < 1e-5


@pytest.mark.parametrize("pad", [0, 1], ids=["bnhd", "padded-rows"])
def test_non_contiguous_torch_inputs(pad):
    """A [B, N, H, D] tensor transposed to [B, H, N, D] is read in place, same bits; also
    with rows padded to D+1 elements, where no stride is a multiple of 16 (ALIGN 1: a plan
    that claimed more would make the kernels address the wrong rows). The views are taken
    of leaf tensors, so the op really gets those strides (clone() would compact padded rows)."""
    g = torch.Generator().manual_seed(0)
    dims = (16, 16, 24)
    bases = [torch.randn(2, 70, 3, d + pad, generator=g) for d in dims]
    for causal in (False, True):
        leaves_a = [b.clone().requires_grad_() for b in bases]
        views = [b[..., :d].transpose(1, 2) for b, d in zip(leaves_a, dims)]
        assert not views[0].is_contiguous() and (pad == 0 or views[0].stride()[2] % 16 != 0)
        leaves_b = [t.detach().contiguous().requires_grad_() for t in views]
        oa = ato_torch.linear_attention(*views, causal=causal, feature_map="elu")
        ob = ato_torch.linear_attention(*leaves_b, causal=causal, feature_map="elu")
        do = torch.randn(oa.shape, generator=g).transpose(2, 3).contiguous().transpose(2, 3)  # strided cotangent
        oa.backward(do)
        ob.backward(do)
        assert torch.equal(oa, ob)
        for a, b, d in zip(leaves_a, leaves_b, dims):
            assert torch.equal(a.grad[..., :d].transpose(1, 2), b.grad)
            assert not a.grad[..., d:].any()


def test_fp16_long_sequence_does_not_overflow():
    """N = 65536 in fp16 with ELU+1 features: z . phi(q) reaches ~1e6, far past fp16's
    65504; states and normaliser stay fp32, so o is finite and right."""
    N, D = 65536, 16
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((1, 1, N, D)).astype(np.float16) + np.float16(2.0) for _ in range(2))
    v = rng.standard_normal((1, 1, N, D)).astype(np.float16)
    o = ato_torch.linear_attention(*(torch.from_numpy(a) for a in (q, k, v)), causal=True, feature_map="elu")
    o = o.double().numpy()[0, 0]
    fq, fk = (ref.elu_plus_one(a.astype(np.float64))[0, 0] for a in (q, k))
    v64 = v.astype(np.float64)[0, 0]
    den = np.einsum("nd,nd->n", fq, np.cumsum(fk, axis=0))
    assert den.max() > 1e6  # the normaliser really does pass fp16's range
    rows = np.r_[0:64, N - 4096:N]  # check a prefix and the long tail against the recurrence
    S = np.zeros((D, D))
    expect = {}
    kv = fk[:, :, None] * v64[:, None, :]
    S_tail = kv[: N - 4096].sum(axis=0)
    for i in range(N - 4096, N):
        S_tail = S_tail + kv[i]
        expect[i] = fq[i] @ S_tail / (den[i] + 1e-6)
    for i in range(64):
        S = S + kv[i]
        expect[i] = fq[i] @ S / (den[i] + 1e-6)
    got = np.stack([o[i] for i in rows])
    want = np.stack([expect[i] for i in rows])
    assert np.all(np.isfinite(o))
    assert h.rel_err(got, want) < h.TOLERANCE["float16"]


BAD_INPUTS = [
    # (description, builder of kwargs from good inputs, exception, fragment of the message)
    ("q rank 3", lambda x: dict(x, q=x["q"][0]), ValueError, "q: expected rank 4"),
    ("B mismatch", lambda x: dict(x, k=x["k"][:1]), ValueError, "k: expected size 2 on axis 0"),
    ("N mismatch", lambda x: dict(x, v=x["v"][:, :, :5]), ValueError, "v: expected size 9 on axis 2"),
    ("Dk mismatch", lambda x: dict(x, k=x["k"][..., :3]), ValueError, "k: expected size 4 on axis 3"),
    ("integer q", lambda x: dict(x, q=x["q_int"]), TypeError, "q: expected a floating dtype"),
    ("mixed dtypes", lambda x: dict(x, v=x["v_half"]), TypeError, "v: expected dtype float32"),
    ("bad feature map", lambda x: dict(x, feature_map="relu"), ValueError, "feature_map: expected one of"),
    ("state when bidirectional", lambda x: dict(x, causal=False, initial_state=x["state"]), ValueError,
     "initial_state: expected None when causal=False"),
    ("state S shape", lambda x: dict(x, initial_state=(x["state"][0][..., :2], x["state"][1])), ValueError,
     "initial_state[0] (S): expected shape (2, 3, 4, 5)"),
    ("state dtype", lambda x: dict(x, initial_state=(x["state"][0], x["state"][1].astype("float16")
                                                     if hasattr(x["state"][1], "astype") else x["state"][1].half())),
     TypeError, "initial_state[1] (z): expected dtype float32"),
    ("state not a pair", lambda x: dict(x, initial_state=x["state"][0]), TypeError, "initial_state: expected a pair"),
    ("head dim too large", lambda x: dict(x, q=x["q_wide"], k=x["q_wide"]), ValueError, "(Dk): expected in [1, 256]"),
]


def _bad_input_args(framework):
    x = bad_input_arrays(framework, {"q": (2, 3, 9, 4), "k": (2, 3, 9, 4), "v": (2, 3, 9, 5), "S": (2, 3, 4, 5),
                                     "z": (2, 3, 4), "q_wide": (2, 3, 9, 257)})
    x["v_half"] = frontend(framework)[1](np.asarray(x["v"]).astype(np.float16))
    x["state"] = (x.pop("S"), x.pop("z"))
    x["causal"], x["feature_map"] = True, "elu"
    return x


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,mutate,exc,fragment", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs(framework, desc, mutate, exc, fragment):
    ops = frontend(framework)[0]
    kw = mutate(_bad_input_args(framework))
    raises_naming(exc, fragment, ops.linear_attention, kw["q"], kw["k"], kw["v"], causal=kw["causal"],
                  feature_map=kw["feature_map"], initial_state=kw.get("initial_state"))


@pytest.mark.skipif(not hasattr(torch, "device") or torch.cuda.device_count() > 0, reason="needs no second device")
def test_torch_inputs_on_different_devices():
    q = torch.rand(1, 1, 4, 4)
    k = torch.rand(1, 1, 4, 4, device="meta")
    with pytest.raises(ValueError, match="k: expected device cpu"):
        ato_torch.linear_attention(q, k, q)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_step_bad_state(framework):
    ops, arr = frontend(framework)
    q = arr(np.ones((2, 3, 4), np.float32))
    v = arr(np.ones((2, 3, 5), np.float32))
    S, z = arr(np.ones((2, 3, 4, 6), np.float32)), arr(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"state\[0\] \(S\): expected shape \(2, 3, 4, 5\)"):
        ops.linear_attention_step(q, q, v, (S, z))
    with pytest.raises(ValueError, match="q: expected rank 3"):
        ops.linear_attention_step(q[None], q, v, (S, z))


def test_causal_state_memory_does_not_grow_with_n():
    """Segment count is bounded by the GPU size, not N: state buffers are O(B*H*D^2)."""
    from ato_core.testing import h100

    gpu = h100()
    bound = -(-la_core.SETTINGS.waves * 132 // (8 * 16))
    for N in (4096, 65536, 1 << 20):
        cfg = la_core.config(8, 16, N, 64, 64, "bfloat16", True, gpu)
        assert cfg.nseg <= bound, (N, cfg.nseg, bound)
        assert cfg.nseg * cfg.seg_len >= N


def test_jax_triton_import_leaves_triton_cache_dir(monkeypatch, tmp_path):
    """jax-triton <= 0.3.1 sets TRITON_CACHE_DIR="" at import (0.4 deletes it); ato restores it."""
    from ato_jax import launcher

    fake = types.ModuleType("jax_triton")
    monkeypatch.setitem(sys.modules, "jax_triton", fake)
    # Simulate the import side effect by running it where the real import would.
    real_import = __builtins__["__import__"] if isinstance(__builtins__, dict) else __builtins__.__import__

    def importer(name, *args, **kwargs):
        if name == "jax_triton":
            os.environ["TRITON_CACHE_DIR"] = ""
            return fake
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", importer)
    monkeypatch.setattr(launcher, "_jax_triton", None)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert launcher.import_jax_triton() is fake
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path)
    monkeypatch.setattr(launcher, "_jax_triton", None)
    monkeypatch.delenv("TRITON_CACHE_DIR")
    launcher.import_jax_triton()
    assert "TRITON_CACHE_DIR" not in os.environ


def test_interpreter_target_is_used_on_cpu():
    assert ato_torch.launcher.target_for(torch.zeros(1)) == INTERPRETER


def test_alignment_and_scalar_specialisation():
    """ALIGN divides every value it covers; Launch switches off torch's divisibility
    specialisation of exactly its scalar arguments (as jax-triton compiles them)."""
    from ato_core.launch import alignment

    assert alignment(64, 4096 * 64, 0) == 16 and alignment(48, 96) == 16 and alignment(24) == 8
    assert alignment(129) == 1 and alignment(64, 3) == 1
    plan, _ = la_core.forward_plan(_spec(1, 2, 8, 16), _spec(1, 2, 8, 16), _spec(1, 2, 8, 16),
                                   causal=True, feature_map="elu", eps=1e-6, initial_state=None, target=INTERPRETER)
    for launch in plan.launches:
        params = launch.kernel.params
        first, count = len(launch.inputs), len(launch.scalars)
        assert all(p.do_not_specialize_on_alignment for p in params[first:first + count]), launch.name
        assert not any(p.do_not_specialize_on_alignment for p in params[:first]), launch.name
        assert launch.constexprs["ALIGN"] == 16
    # an input whose rows are padded to 17 elements: ALIGN must drop to 1 where it is read
    padded = ato_torch.launcher.spec(torch.empty(1, 8, 2, 17)[..., :16].transpose(1, 2))
    plan, _ = la_core.forward_plan(_spec(1, 2, 8, 16), padded, _spec(1, 2, 8, 16), causal=True,
                                   feature_map="elu", eps=1e-6, initial_state=None, target=INTERPRETER)
    assert [launch.constexprs["ALIGN"] for launch in plan.launches] == [1, 16, 1]


def test_jax_float_scalars_are_fp32():
    """jax-triton 0.3.x passes a Python float as fp64 (the kernel then computes in fp64:
    slower and different from torch): the launcher hands it np.float32. 0.4.x types a float
    as fp32 when fp32 holds it: a Python float of the fp32 value, np.float32 if subnormal."""
    import numpy as np

    from ato_jax.launcher import kernel_scalars

    out = kernel_scalars((3, 1e-6, True))
    assert out[0] == 3 and type(out[0]) is int and out[2] is True
    assert type(out[1]) is np.float32 and out[1] == np.float32(1e-6)
    out = kernel_scalars((3, 1e-6, 0.0, 1e-42), api_04=True)
    assert type(out[1]) is float and out[1] == float(np.float32(1e-6)) and type(out[2]) is float
    assert type(out[3]) is np.float32


def test_triton_call_arguments_for_both_jax_triton_apis():
    """0.3.x takes out_shape and enable_fp_fusion; 0.4.x takes out_type and backend_options
    (a stray enable_fp_fusion keyword would become a kernel metaparameter there)."""
    from ato_jax.launcher import MAXNREG, _api_04, triton_call_kwargs

    plan, _ = la_core.forward_plan(_spec(1, 2, 8, 16), _spec(1, 2, 8, 16), _spec(1, 2, 8, 16),
                                   causal=True, feature_map="elu", eps=1e-6, initial_state=None, target=INTERPRETER)
    launch = plan.launches[0]
    old, new = triton_call_kwargs(launch, False), triton_call_kwargs(launch, True)
    assert old["enable_fp_fusion"] is False and "backend_options" not in old and "out_type" not in old
    assert new["backend_options"] == {"enable_fp_fusion": False} and "enable_fp_fusion" not in new
    assert [o.shape for o in new["out_type"]] == [o.shape for o in old["out_shape"]] == [b.shape for b in launch.outputs]
    for kw in (old, new):
        assert kw["grid"] == launch.grid and kw["num_warps"] == launch.num_warps and kw["CHUNK"] == 64

    def call_03(*args, kernel, out_shape, grid, enable_fp_fusion=True, **kw): ...
    def call_04(*args, kernel, out_type=None, grid, backend_options=None, **kw): ...
    assert not _api_04(types.SimpleNamespace(triton_call=call_03))
    assert _api_04(types.SimpleNamespace(triton_call=call_04))
    assert MAXNREG not in old


def test_register_cap_reaches_jax_triton():
    """A launch's maxnreg: in 0.4.x's backend_options; in 0.3.x (fixed compile options) a
    metaparameter that _take_maxnreg's wrapper of get_or_create_triton_kernel moves from the
    kernel's constants into the options it compiles with (here with a stand-in jax-triton)."""
    import dataclasses

    from ato_jax.launcher import MAXNREG, _take_maxnreg, triton_call_kwargs

    plan, _ = la_core.forward_plan(_spec(1, 2, 8, 16), _spec(1, 2, 8, 16), _spec(1, 2, 8, 16),
                                   causal=True, feature_map="elu", eps=1e-6, initial_state=None, target=INTERPRETER)
    launch = dataclasses.replace(plan.launches[0], maxnreg=168)
    assert triton_call_kwargs(launch, True)["backend_options"] == {"enable_fp_fusion": False, "maxnreg": 168}
    assert triton_call_kwargs(launch, False)[MAXNREG] == 168

    def create(backend_init_func, fn, *, metaparams, num_warps):  # as jax-triton 0.3.1 compiles
        return backend_init_func(0, 90).parse_options({"num_warps": num_warps}), metaparams

    def init(device, capability):  # a fresh backend each call, as 0.3.1's get_cuda_backend
        return types.SimpleNamespace(parse_options=dict)

    lib = types.SimpleNamespace(get_or_create_triton_kernel=create)
    _take_maxnreg(lib)
    wrapped = lib.get_or_create_triton_kernel
    _take_maxnreg(lib)  # once only
    assert lib.get_or_create_triton_kernel is wrapped
    options, meta = wrapped(init, "fn", metaparams={"CHUNK": 64, MAXNREG: 168}, num_warps=4)
    assert options == {"num_warps": 4, "maxnreg": 168} and meta == {"CHUNK": 64}
    options, meta = wrapped(init, "fn", metaparams={"CHUNK": 64}, num_warps=4)
    assert options == {"num_warps": 4} and meta == {"CHUNK": 64}


def test_register_cap_reaches_triton_from_torch():
    """ato_torch compiles through Triton's launcher with the launch's maxnreg (none passed
    without a cap, Triton's default)."""
    import dataclasses

    from ato_torch import launcher

    plan, _ = la_core.forward_plan(_spec(1, 2, 8, 16), _spec(1, 2, 8, 16), _spec(1, 2, 8, 16),
                                   causal=True, feature_map="elu", eps=1e-6, initial_state=None, target=INTERPRETER)
    calls = []

    class Kernel:  # records what kernel[grid](...) receives
        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append((grid, args, kw))

    launch = plan.launches[0]
    for cap in (None, 168):
        launcher._jit_launch(Kernel(), dataclasses.replace(launch, maxnreg=cap), (1, 2))
    (_, _, plain), (grid, args, capped) = calls
    assert "maxnreg" not in plain and capped["maxnreg"] == 168 and grid == launch.grid and args == (1, 2)
    assert capped["num_warps"] == launch.num_warps and capped["enable_fp_fusion"] is launch.fp_fusion


@pytest.mark.parametrize("dims,kernels", [
    ((48, 40), {"la_bwd_dkdv_kernel"}),
    ((130, 72), {"la_bwd_dk_kernel", "la_bwd_dv_kernel"}),
])
def test_backward_reverse_pass_choice(dims, kernels):
    """The fused dk/dv pass when the whole reverse state fits one program, the tiled pair
    otherwise (LA_CASES test both numerically: (2,2,300,48,40) and (1,1,45,130,72))."""
    Dk, Dv = dims
    plan = la_core.backward_plan(_spec(1, 1, 9, Dk), _spec(1, 1, 9, Dk), _spec(1, 1, 9, Dv), _spec(1, 1, 9, Dv),
                                 causal=True, feature_map="elu", eps=1e-6, has_dfinal=False, target=INTERPRETER)
    names = {launch.name for launch in plan.launches}
    assert kernels <= names and not ({"la_bwd_dkdv_kernel", "la_bwd_dk_kernel"} - kernels) & names


def test_jax_vmap_runs_each_slice():
    """jax.vmap of ato_jax ops (jax-triton has no batching rule): the plan runs once per
    mapped slice, so vmap, vmap(grad), grad(vmap) and unmapped arguments all give exactly
    the per-slice results."""
    V, shape = 3, (1, 2, 20, 8)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q, k, v = (jax.random.normal(key, (V, *shape)) for key in keys[:3])
    f = lambda a, b, c: ato_jax.linear_attention(a, b, c, causal=True, feature_map="elu")  # noqa: E731
    loss = lambda a, b, c: jnp.sum(f(a, b, c) ** 2)  # noqa: E731
    per_slice = [f(q[i], k[i], v[i]) for i in range(V)]
    chex.assert_trees_all_equal(jax.jit(jax.vmap(f))(q, k, v), jnp.stack(per_slice))
    chex.assert_trees_all_equal(jax.vmap(f, in_axes=(0, None, None))(q, k[0], v[0]),
                                jnp.stack([f(q[i], k[0], v[0]) for i in range(V)]))
    grads = [jax.grad(loss, argnums=(0, 1, 2))(q[i], k[i], v[i]) for i in range(V)]
    want = tuple(jnp.stack([g[j] for g in grads]) for j in range(3))
    chex.assert_trees_all_equal(jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2))))(q, k, v), want)
    chex.assert_trees_all_equal(
        jax.grad(lambda a, b, c: jnp.sum(jax.vmap(f)(a, b, c) ** 2), argnums=(0, 1, 2))(q, k, v), want)
    # the step, with a mapped state
    S = jnp.abs(jax.random.normal(keys[3], (V, 1, 2, 8, 8)))
    z = jnp.abs(jax.random.normal(keys[3], (V, 1, 2, 8)))
    step = lambda a, b, c, s, t: ato_jax.linear_attention_step(a, b, c, (s, t), feature_map="elu")  # noqa: E731
    got = jax.vmap(step)(q[:, :, :, 0], k[:, :, :, 0], v[:, :, :, 0], S, z)
    for i in range(V):
        chex.assert_trees_all_equal(jax.tree.map(lambda x: x[i], got),
                                    step(q[i, :, :, 0], k[i, :, :, 0], v[i, :, :, 0], S[i], z[i]))
    x = jax.random.normal(keys[3], (4, 5, 6))
    chex.assert_trees_all_equal(jax.vmap(ato_jax.elu_plus_one)(x), ato_jax.elu_plus_one(x))


def test_interpreter_leaves_triton_language_as_found(tmp_path):
    """Triton's interpreter leaves tl.core functions and tensor methods patched after a run;
    a kernel compiled later in the same process (a CUDA tensor after a CPU one) then failed
    in its frontend ("'ir.value' object has no attribute 'dtype'"). ato_core.interpreter
    puts triton.language back after every launch. In a fresh process: interpreted ops, then
    a full compile of a kernel for an sm_90 target (no GPU needed to compile), with an empty
    cache so that it really compiles."""
    import subprocess

    code = """
import torch, triton, ato_torch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ato_core.ops.norms import kernels as norms
ato_torch.layer_norm(torch.randn(3, 100))
ato_torch.dropout_residual_layer_norm(torch.ones(2, 40), torch.zeros(2, 40), None, None, p=0.5, seed=1)
sig = dict.fromkeys(["X", "R", "W", "B", "SEED", "Y", "H", "MEAN", "RSTD"], "*fp32")
sig.update(M="i32", N="i32", eps="fp32", p="fp32", seed="i32")
ce = dict(BLOCK_N=128, SINGLE=True, RMS=False, HAS_W=False, HAS_B=False, HAS_RES=True, DROPOUT=True, ALIGN=4,
          SEED_WORDS=0)
sig.update(dict.fromkeys(ce, "constexpr"))
assert triton.compile(ASTSource(fn=norms.norm_fwd_kernel, signature=sig, constexprs=ce),
                      target=GPUTarget("cuda", 90, 32)).asm["ptx"]
print("ok")
"""
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


@pytest.mark.parametrize("causal", [False, True])
def test_bnhd_layout(causal):
    """layout="bnhd" ([B, N, H, D] through strides): bitwise the bhnd results (output and the
    gradients of q, k, v) in both frameworks, N across several segments, Dk != Dv."""
    rng = np.random.default_rng(12)
    q, k = (np.abs(rng.standard_normal((2, 3, 37, 16))).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((2, 3, 37, 24)).astype(np.float32)
    assert_bnhd_is_bhnd("linear_attention", q, k, v, rng.standard_normal(v.shape).astype(np.float32),
                        causal=causal, feature_map="elu")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bnhd_layout_names_its_shapes(framework):
    mod, arr = frontend(framework)
    q = arr(np.ones((2, 8, 3, 16), np.float32))
    raises_naming(ValueError, "N, as in q", mod.linear_attention, q, arr(np.ones((2, 9, 3, 16), np.float32)), q,
                  layout="bnhd")
    raises_naming(ValueError, "layout", mod.linear_attention, q, q, q, layout="hnd")


@pytest.mark.parametrize("causal,state", [(False, False), (True, True), (True, False)])
def test_infinite_bf16_value_stays_infinite(causal, state):
    """An infinite bf16 v gives infinities where the float64 reference does, no NaN: the state
    kernels split v into a bf16 part and a finite rest (kernels._finite_part), whose bf16
    arithmetic the interpreter computes as the GPU does (ato_core.interpreter)."""
    from helpers import check_special

    case = la_case(1, 2, 80, 16, 16, "bfloat16", causal=causal, state=state, final=causal)
    inputs = h.make_inputs(case)
    inputs["v"] = inputs["v"].copy()
    inputs["v"][0, 1, 37, 5] = np.inf
    check_special(case, inputs, grads=False)
