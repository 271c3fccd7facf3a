"""decode_attention and merge_attention_states on the CPU (the interpreter): both frameworks
against the float64 reference (each sequence's keys gathered from its table, plain softmax),
bitwise torch == JAX, ragged lengths, GQA and MQA, splits and their merge, bad inputs.

Tolerances: ato_cli.harness.TOLERANCE (fp32 1e-4: a softmax over at most a few hundred keys
in fp32; bf16 2e-2: the bf16 output rounding, 2^-8, plus p rounded to bf16 for the p v dot)."""

import numpy as np
import pytest

from ato_cli import harness as h
from ato_core.ops.decode.cases import decode_case, merge_case
from helpers import check, frontend, raises_naming


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
    raises_naming(NotImplementedError, "schedule", call, q, kc, kc, table, lens, schedule=object())
    o = arr(rng.random((3, 8), np.float32))
    raises_naming(ValueError, "lse_b", ops.merge_attention_states, o, arr(np.zeros(3, np.float32)), o,
                  arr(np.zeros(4, np.float32)))
