"""based_attention, based_step, taylor_feature_map: CPU tier (Triton's interpreter).

Every case runs in ato_torch and ato_jax (jit(value_and_grad)) and is compared with the
float64 reference (the quadratic form written with s = scale q . k, not through phi), its
outputs, final state and every gradient within the dtype's tolerance; the two frameworks
must agree bit for bit.
"""

import math

import numpy as np
import pytest

from ato_cli import harness as h
from ato_core import reference as ref
from ato_core.ops.based import plans as based_core
from ato_core.ops.based.cases import based_case, based_step_case, taylor_case
from ato_core.target import INTERPRETER
from ato_core.testing import gpu_spec, h100
from helpers import SLOW, assert_bnhd_is_bhnd, bad_input_arrays, check, frontend, raises_naming

# (B, H, N, d, Dv): N no multiple of the chunk; several segments and chunks per segment
# (N=150: the interpreter's segments of 64 rows, chunks of 16); d = 1 (one feature), 5 (padded
# to 16), 16 (Based's), 32 (the largest: 16-wide Dv tiles, so several); Dv 1, 48 (no power of
# two), 64. One row: test_one_row.
SHAPES = [
    (1, 2, 17, 5, 1),
    (2, 1, 17, 1, 48),
    (1, 2, 150, 16, 48),
    (1, 1, 17, 32, 64),
    (1, 1, 150, 5, 64),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_based_fp32(shape, causal):
    check(based_case(*shape, causal=causal, final=True, seed=sum(shape)))


def test_one_row():
    """N = 1, with an initial state: without one o_0 = v_0 whatever q, and dq is a
    cancellation of rounding noise (see cases.fuzz)."""
    check(based_case(1, 2, 1, 16, 64, state=True, final=True, seed=2))
    check(based_case(1, 1, 1, 5, 3, dtype="bfloat16", state=True, final=True, seed=3))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_based_half(dtype, causal):
    check(based_case(1, 2, 70, 16, 24, dtype=dtype, causal=causal, final=True, seed=3))  # B > 1: test_initial_state


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_initial_state(dtype):
    """Gradients flow to the initial state and from the final state; a scale of one's own."""
    check(based_case(2, 1, 90, 5, 24, dtype=dtype, state=True, final=True, seed=5))
    check(based_case(1, 2, 40, 16, 8, dtype=dtype, state=True, final=True, scale=0.3, seed=6))


def test_step():
    check(based_step_case(2, 3, 16, 12, seed=7))
    check(based_step_case(1, 2, 5, 48, dtype="bfloat16", scale=0.5, seed=8))
    check(based_step_case(1, 1, 32, 40, seed=9))  # 16-wide Dv tiles: several


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_taylor_feature_map(dtype):
    check(taylor_case((3, 100, 16), dtype))
    check(taylor_case((7, 5), dtype, scale=2.0, seed=1))
    check(taylor_case((65, 32), dtype, seed=2))


def test_taylor_kernel_is_exp_to_second_order():
    """phi(q) . phi(k) from the op is 1 + s + s^2 / 2, and the layout is [1, x c, vec(x x^T) c^2 / sqrt(2)]."""
    ops, arr = frontend("torch")
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 6, 5)).astype(np.float32)
    fq, fk = (np.asarray(ops.taylor_feature_map(arr(x)), np.float64) for x in (q, k))
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / np.sqrt(5)
    np.testing.assert_allclose(fq @ fk.T, 1 + s + s * s / 2, rtol=1e-5)
    c = 5 ** -0.25
    np.testing.assert_allclose(fq[2, 1:6], q[2] * c, rtol=1e-6)
    np.testing.assert_allclose(fq[2, 6 + 3 * 5 + 4], q[2, 3] * q[2, 4] * c * c / np.sqrt(2), rtol=1e-6)


def test_reference_state_is_the_sum_the_quadratic_form_uses():
    """The reference's two views agree: o from the quadratic form with the state S of the
    first rows as initial state equals the quadratic form over all rows."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 30, n)) for n in (4, 4, 3))
    whole = ref.based_attention(q, k, v, causal=True)
    _, st = ref.based_attention(q[:, :, :11], k[:, :, :11], v[:, :, :11], output_final_state=True)
    rest = ref.based_attention(q[:, :, 11:], k[:, :, 11:], v[:, :, 11:], initial_state=st)
    np.testing.assert_allclose(rest, whole[:, :, 11:], rtol=1e-12)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prefill_split_and_steps(framework, dtype):
    """A prefill in two pieces (the second from the first's state) equals the whole; and a
    prefill of N rows then steps over the rest equals the whole too."""
    case = based_case(2, 2, 150, 16, 12, dtype=dtype)
    x = h.make_inputs(case)
    ops, arr = frontend(framework)
    q, k, v = ((h.to_torch if framework == "torch" else arr)(x[n]) for n in "qkv")
    o, (S, z) = ops.based_attention(q, k, v, output_final_state=True)
    cut = 61
    o1, st = ops.based_attention(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], output_final_state=True)
    o2, (S2, z2) = ops.based_attention(q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], initial_state=st,
                                       output_final_state=True)
    f = lambda t: np.asarray(t.float() if hasattr(t, "float") else t, np.float64)  # noqa: E731
    whole = f(o)
    # Both ways are roundings of one sum; bf16 outputs are compared at bf16's tolerance,
    # states (fp32 in every dtype) at fp32's.
    tol = h.TOLERANCE[dtype]
    assert h.rel_err(np.concatenate([f(o1), f(o2)], axis=2), whole) < tol
    assert h.rel_err(f(S2), f(S)) < 1e-5 and h.rel_err(f(z2), f(z)) < 1e-5
    n = 140
    _, st = ops.based_attention(q[:, :, :n], k[:, :, :n], v[:, :, :n], output_final_state=True)
    steps = []
    for i in range(n, 150):
        o_i, st = ops.based_step(q[:, :, i], k[:, :, i], v[:, :, i], st)
        steps.append(f(o_i))
    assert h.rel_err(np.stack(steps, axis=2), whole[:, :, n:]) < tol
    assert h.rel_err(f(st[0]), f(S)) < 1e-5 and h.rel_err(f(st[1]), f(z)) < 1e-5


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_asymmetric_initial_state(framework):
    """Inside, states keep one row per pair (a, b) and (b, a) (phi(x) x^T is symmetric), so an
    initial state's antisymmetric part meets no query: o is what it is without the state. The
    final state keeps it: each of the pair's rows is its own S0 entry (+-1e6) plus the
    prefill's sum, to fp32's rounding of the 1e6 (nothing of the other row leaks in)."""
    d, Dv, F = 16, 8, based_core.features(16)
    ops, arr = frontend(framework)
    rng = np.random.default_rng(11)
    q, k = (rng.standard_normal((1, 2, 70, d)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((1, 2, 70, Dv)).astype(np.float32)
    S0 = np.zeros((1, 2, F, Dv), np.float32)
    ab, ba = 1 + d + 2 * d + 9, 1 + d + 9 * d + 2  # (a, b) = (2, 9) and (9, 2)
    S0[:, :, ab], S0[:, :, ba] = 1e6, -1e6
    z0 = np.zeros((1, 2, F), np.float32)
    o, (S, _) = ops.based_attention(arr(q), arr(k), arr(v), output_final_state=True)
    o0, (S_0, _) = ops.based_attention(arr(q), arr(k), arr(v), initial_state=(arr(S0), arr(z0)),
                                       output_final_state=True)
    o, S, o0, S_0 = (np.asarray(t, np.float64) for t in (o, S, o0, S_0))
    np.testing.assert_array_equal(o0, o)
    rows = [r for r in range(F) if r not in (ab, ba)]
    np.testing.assert_array_equal(S_0[:, :, rows], S[:, :, rows])
    # a few roundings at 1e6 (ulp 0.0625) and S's own fp32 error
    np.testing.assert_allclose(S_0[:, :, ab], 1e6 + S[:, :, ab], rtol=0, atol=0.5)
    np.testing.assert_allclose(S_0[:, :, ba], -1e6 + S[:, :, ba], rtol=0, atol=0.5)
    assert np.abs(S[:, :, ab]).max() > 2  # the sums are not lost in the tolerance


def test_packed_layout():
    """Fp = 1 + d + d (d // 2 + 1) rows (one per unordered pair): d 16 -> 161 (F 273); in
    tiles of 64 (the block kernels' at d 16) two and one of 16 for the rest."""
    for d, fp in ((1, 3), (2, 7), (5, 21), (16, 161), (17, 171), (32, 577)):
        assert based_core.packed_features(d) == fp and fp <= based_core.features(d), d
    assert based_core.quad_tiles(16, 64) == (2, 16) and based_core.quad_tiles(32, 32) == (17, 0)
    assert based_core.quad_tiles(5, 16) == (0, 16) and based_core.quad_tiles(1, 16) == (0, 16)


def test_fp16_large_scores_do_not_overflow():
    """fp16 inputs whose w = 1 + s + s^2/2 and normaliser pass fp16's 65504 many times over:
    everything past the inputs is fp32, so o is finite and right."""
    case = based_case(1, 1, 200, 16, 16, dtype="float16", seed=4)
    x = h.make_inputs(case)
    x["q"], x["k"] = (np.abs(x[n]) * np.float16(8) for n in "qk")
    s = (x["q"][0, 0].astype(np.float64) @ x["k"][0, 0].T.astype(np.float64)) / 4
    assert (1 + s + s * s / 2).sum(axis=1).max() > 1e6
    t, _, _ = check(case, x)
    assert all(np.isfinite(a).all() for a in t.outputs)


BAD_INPUTS = [
    ("d too large", lambda x: dict(x, q=x["q_wide"], k=x["q_wide"]), ValueError, "q.shape[3] (d): expected in [1, 32]"),
    ("d mismatch", lambda x: dict(x, k=x["k"][..., :3]), ValueError, "k: expected size 4 on axis 3"),
    ("N mismatch", lambda x: dict(x, v=x["v"][:, :, :5]), ValueError, "v: expected size 9 on axis 2"),
    ("q rank 3", lambda x: dict(x, q=x["q"][0]), ValueError, "q: expected rank 4"),
    ("integer q", lambda x: dict(x, q=x["q_int"]), TypeError, "q: expected a floating dtype"),
    ("bad scale", lambda x: dict(x, scale=-1.0), ValueError, "scale: expected None or a positive finite float"),
    ("bad eps", lambda x: dict(x, eps=-1.0), ValueError, "eps: expected a non-negative float"),
    ("state S shape", lambda x: dict(x, initial_state=(x["state"][0][:, :, :20], x["state"][1])), ValueError,
     "initial_state[0] (S): expected shape (2, 3, 21, 5) ([B, H, F, Dv])"),
    ("state z shape", lambda x: dict(x, initial_state=(x["state"][0], x["state"][1][..., :4])), ValueError,
     "initial_state[1] (z): expected shape (2, 3, 21) ([B, H, F])"),
    ("state dtype", lambda x: dict(x, initial_state=(x["state_half"], x["state"][1])), TypeError,
     "initial_state[0] (S): expected dtype float32"),
    ("state when bidirectional", lambda x: dict(x, causal=False, initial_state=x["state"]), ValueError,
     "initial_state: expected None when causal=False"),
    ("state not a pair", lambda x: dict(x, initial_state=x["state"][0]), TypeError, "initial_state: expected a pair"),
]


def _bad_input_args(framework):
    x = bad_input_arrays(framework, {"q": (2, 3, 9, 4), "k": (2, 3, 9, 4), "v": (2, 3, 9, 5), "S": (2, 3, 21, 5),
                                     "z": (2, 3, 21), "q_wide": (2, 3, 9, 33)})
    x["state"] = (x.pop("S"), x.pop("z"))
    x["state_half"] = frontend(framework)[1](np.asarray(x["state"][0]).astype(np.float16))
    return x


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("desc,mutate,exc,fragment", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs(framework, desc, mutate, exc, fragment):
    ops = frontend(framework)[0]
    kw = mutate(_bad_input_args(framework))
    raises_naming(exc, fragment, ops.based_attention, kw["q"], kw["k"], kw["v"], causal=kw.get("causal", True),
                  scale=kw.get("scale"), eps=kw.get("eps", 1e-6), initial_state=kw.get("initial_state"))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_step_and_feature_map_bad_inputs(framework):
    ops, arr = frontend(framework)
    q = arr(np.ones((2, 3, 4), np.float32))
    v = arr(np.ones((2, 3, 5), np.float32))
    S, z = arr(np.ones((2, 3, 21, 6), np.float32)), arr(np.ones((2, 3, 21), np.float32))
    with pytest.raises(ValueError, match=r"state\[0\] \(S\): expected shape \(2, 3, 21, 5\)"):
        ops.based_step(q, q, v, (S, z))
    with pytest.raises(TypeError, match="state: expected a pair"):
        ops.based_step(q, q, v, None)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] \(d\): expected in \[1, 32\]"):
        ops.taylor_feature_map(arr(np.ones((3, 40), np.float32)))


def test_state_memory():
    """Causal: one fp32 packed [Fp, Dv] state per segment of BLOCKS.seg_len rows, at d 16 and Dv
    64 less than the bytes of bf16 q, k and v. Bidirectional: linear_attention's split, O(B*H*F*Dv)
    whatever N."""
    from ato_core.ops.linear_attention.plans import SETTINGS

    gpu = h100()
    B, H, d, Dv = 8, 16, 16, 64
    for N in (4096, 65536, 1 << 20):
        cfg = based_core.config(B, H, N, d, Dv, "bfloat16", True, gpu)
        assert cfg.seg_len == based_core.BLOCKS.seg_len and cfg.nseg == -(-N // cfg.seg_len)
        assert cfg.nseg * cfg.Fp * Dv * 4 < N * (2 * d + Dv) * 2
        cfg = based_core.config(B, H, N, d, Dv, "bfloat16", False, gpu)
        assert cfg.nseg <= -(-SETTINGS.waves * 132 // (B * H)) and cfg.nseg * cfg.seg_len >= N


def test_tiles_summed_only_when_several():
    """dq and dk are written in place with one Dv tile, summed from fp32 partials with more."""
    spec = lambda *s: gpu_spec(s, "float32")  # noqa: E731
    for d, Dv, tiles in ((16, 64, 1), (32, 64, 4)):
        plan = based_core.backward_plan(spec(1, 1, 9, d), spec(1, 1, 9, d), spec(1, 1, 9, Dv), spec(1, 1, 9, Dv),
                                        causal=True, scale=None, eps=1e-6, has_dfinal=False, target=INTERPRETER)
        sums = [launch for launch in plan.launches if launch.name == "based_sum_tiles_kernel"]
        assert len(sums) == (0 if tiles == 1 else 2)
        assert all(launch.scalars[1] == tiles for launch in sums)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_exact_state_option(framework):
    """exact_state=False (the state pass rounds the features to the dot's operand type, on a
    GPU; tests/test_gpu.py measures it) runs in both families; on the CPU, where dots are
    fp32, it gives what the default gives. A non-bool is refused."""
    ops, arr = frontend(framework)
    rng = np.random.default_rng(3)
    q, k = (arr(rng.standard_normal((1, 2, 40, 5)).astype(np.float32)) for _ in range(2))
    v = arr(rng.standard_normal((1, 2, 40, 6)).astype(np.float32))
    for fn in (ops.based_attention, lambda *a, **kw: ops.linear_attention(*a, causal=True, feature_map="elu", **kw)):
        o, (S, _) = fn(q, k, v, output_final_state=True)
        o2, (S2, _) = fn(q, k, v, output_final_state=True, exact_state=False)
        assert h.rel_err(np.asarray(o2), np.asarray(o)) < 1e-6 and h.rel_err(np.asarray(S2), np.asarray(S)) < 1e-6
        with pytest.raises(TypeError, match="exact_state: expected a bool"):
            fn(q, k, v, exact_state=1)


@pytest.mark.parametrize("op", ["based_attention", "linear_attention"])
def test_exact_state_reaches_the_state_pass(op):
    """The option goes from the public signature to the state kernel's EXACT constexpr (which
    the CPU cannot tell apart by value: its dots are fp32 either way)."""
    from ato_core.ops import OPS

    decl = OPS[op]
    args = (gpu_spec((1, 2, 40, 5)),) * 2 + (gpu_spec((1, 2, 40, 6)),)
    for exact in (True, False):
        arrays, static = decl.signature(*args, causal=True, exact_state=exact)
        plan = decl.forward_plan(arrays, static, INTERPRETER)
        state = [launch for launch in plan.launches if launch.name.endswith("state_kernel")]
        assert len(state) == 1 and state[0].constexprs["EXACT"] is exact
    if op == "based_attention":  # the walk: the rests only for a final state (test_walk_final_state)
        args = (gpu_spec((2, 3, 300, 16)),) * 2 + (gpu_spec((2, 3, 300, 6)),)
        for exact in (True, False):
            for final in (True, False):
                arrays, static = decl.signature(*args, causal=True, exact_state=exact, output_final_state=final)
                walk = [launch for launch in decl.forward_plan(arrays, static, INTERPRETER).launches
                        if launch.name == "based_state_walk_kernel"]
                assert len(walk) == 1 and walk[0].constexprs["EXACT"] is (exact and final)


def _kernels(plan):
    return [launch.name for launch in plan.launches]


def test_walk_is_taken_with_enough_programs():
    """The causal passes walk the sequence (one launch for the state pass and the scan) when
    B*H * state tiles fill WALK_WAVES programs per SM (forward, backward); else segments and
    la_scan_kernel. d 16: 4 tiles."""
    gpu = h100()
    for target, (B, H, N), walks in ((gpu, (8, 16, 4096), (True, True)), (gpu, (2, 16, 16384), (True, False)),
                                     (gpu, (1, 16, 16384), (False, False)), (INTERPRETER, (2, 3, 300), (True, True)),
                                     (INTERPRETER, (1, 1, 300), (True, False)), (INTERPRETER, (1, 1, 30), (False, False))):
        q, v = gpu_spec((B, H, N, 16)), gpu_spec((B, H, N, 64))
        fwd, cfg = based_core.forward_plan(q, q, v, causal=True, scale=None, eps=1e-6, initial_state=None,
                                           target=target)
        bwd = based_core.backward_plan(q, q, v, v, causal=True, scale=None, eps=1e-6, has_dfinal=False, target=target)
        assert (cfg.walk is not None) == walks[0]
        assert ("based_state_walk_kernel" in _kernels(fwd)) == walks[0] == ("la_scan_kernel" not in _kernels(fwd))
        assert ("based_bwd_state_walk_kernel" in _kernels(bwd)) == walks[1] == ("la_scan_kernel" not in _kernels(bwd))
    assert math.prod(based_core.config(8, 16, 4096, 16, 64, "bfloat16", True, gpu).walk_grid) == 4 * 128


def test_block_kernels_register_cap():
    """On a GPU the block kernels (output, dq, dk/dv) are capped at BLOCKS.maxnreg registers
    for bf16 dots at d <= 16, where the cap was measured; other dtypes, d 32 and the
    interpreter take none, nor do the other kernels."""
    gpu = h100()
    blocks = {"based_fwd_kernel", "based_bwd_dq_kernel", "based_bwd_dkdv_kernel"}
    for target, dtype, d, capped in ((gpu, "bfloat16", 16, True), (gpu, "bfloat16", 5, True),
                                     (gpu, "float16", 16, False), (gpu, "bfloat16", 32, False),
                                     (INTERPRETER, "bfloat16", 16, False)):
        q, v = gpu_spec((8, 16, 1024, d), dtype), gpu_spec((8, 16, 1024, 64), dtype)
        fwd, _ = based_core.forward_plan(q, q, v, causal=True, scale=None, eps=1e-6, initial_state=None,
                                         target=target)
        bwd = based_core.backward_plan(q, q, v, v, causal=True, scale=None, eps=1e-6, has_dfinal=False, target=target)
        launches = fwd.launches + bwd.launches
        assert blocks <= {launch.name for launch in launches}
        for launch in launches:
            want = based_core.BLOCKS.maxnreg if capped and launch.name in blocks else None
            assert launch.maxnreg == want, (dtype, d, launch.name)


@pytest.mark.parametrize("on,dtype,shape,state", [pytest.param(True, "float32", (1, 2, 150, 16, 80), True, marks=SLOW),
                                                  (True, "bfloat16", (2, 2, 150, 5, 24), True),
                                                  pytest.param(True, "float16", (1, 1, 130, 32, 20), False, marks=SLOW),
                                                  (False, "bfloat16", (2, 2, 150, 5, 24), True),
                                                  ("forward", "float16", (1, 2, 150, 16, 24), True)],
                         ids=["walk-fp32-Dv80", "walk-bf16", "walk-fp16-d32", "segments-bf16", "walk-forward-fp16"])
def test_walk_and_segments(walk, on, dtype, shape, state):
    """Both forms of the causal passes, and the forward's walk before the backward's segments,
    against the float64 reference: outputs, the final state, every gradient (the initial
    state's too), torch and JAX bitwise equal (the other tests take one form or the other
    by B*H: test_walk_is_taken_with_enough_programs)."""
    walk(on)
    check(based_case(*shape, dtype=dtype, state=state, final=True, seed=sum(shape)))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_walk_final_state(walk, framework):
    """The walk's start states take the products rounded to the dots' operand type (as the
    block kernels read them) and the final state sums the rests beside them: o is the same
    bits with or without the final state and with exact_state=False, whose final state is
    the rounded sum (bf16 products: 2^-9 relative each), the default's the exact one."""
    walk(True)
    ops, arr = frontend(framework)
    if framework == "torch":
        arr, f64 = h.to_torch, lambda t: t.double().numpy()
    else:
        f64 = lambda t: np.asarray(t, np.float64)  # noqa: E731
    case = based_case(2, 2, 150, 16, 24, dtype="bfloat16", seed=9)
    x = h.make_inputs(case)
    q, k, v = (arr(x[n]) for n in "qkv")
    o = f64(ops.based_attention(q, k, v))
    o1, (S1, _) = ops.based_attention(q, k, v, output_final_state=True)
    o2, (S2, _) = ops.based_attention(q, k, v, output_final_state=True, exact_state=False)
    np.testing.assert_array_equal(f64(o1), o)
    np.testing.assert_array_equal(f64(o2), o)
    fk = ref.taylor_feature_map(x["k"].astype(np.float64))
    want = np.swapaxes(fk, -1, -2) @ x["v"].astype(np.float64)
    exact, rounded = h.rel_err(f64(S1), want), h.rel_err(f64(S2), want)
    assert exact < 1e-6 and 1e-4 < rounded < 1e-2, (exact, rounded)


@pytest.mark.parametrize("special", [np.inf, np.nan], ids=["inf", "nan"])
def test_walk_nonfinite_segment(walk, special):
    """A key row with an infinite or NaN entry in the second segment: the walk gathers that
    segment's products (a selector dot would spread inf * 0 to every feature), so o and the
    final state hold NaN and infinities exactly where the segments' form (its partial sums
    gathered too) holds them, and equal finite values elsewhere, to fp32's sums."""
    import ato_torch

    case = based_case(2, 2, 150, 16, 24, dtype="bfloat16", seed=10)
    x = h.make_inputs(case)
    x["k"][1, 0, 70, 3] = special
    got = {}
    for on in (True, False):
        walk(on)
        o, (S, z) = ato_torch.based_attention(*(h.to_torch(x[n]) for n in "qkv"), output_final_state=True)
        got[on] = [t.double().numpy() for t in (o, S, z)]
    for a, b in zip(got[True], got[False]):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
        assert np.isfinite(a).any() and not np.isfinite(a).all()
        fin = np.isfinite(a)
        assert h.rel_err(a[fin], b[fin]) < h.TOLERANCE["bfloat16"]
    # the state's rows away from k_3 are untouched: finite everywhere but row 3's pairs
    S = got[True][1][1, 0]
    assert np.isfinite(S[0]).all() and np.isfinite(S[1 + 16 * 0 + 16 + 0]).all()


@pytest.mark.parametrize("causal", [False, True])
def test_bnhd_layout(causal):
    """layout="bnhd": bitwise the bhnd results (output, gradients of q, k, v) in both
    frameworks, N across two segments (causal: the state walks, reading through strides)."""
    rng = np.random.default_rng(13)
    N = 70 if causal else 37
    q, k = ((0.3 * rng.standard_normal((2, 2, N, 8))).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((2, 2, N, 24)).astype(np.float32)
    assert_bnhd_is_bhnd("based_attention", q, k, v, rng.standard_normal(v.shape).astype(np.float32), causal=causal)
