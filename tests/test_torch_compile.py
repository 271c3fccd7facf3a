"""ato_torch under torch.compile (CPU, the interpreter): every op is one torch.library custom
op (ato_torch.library), so Dynamo traces a call with no graph break (fullgraph=True), and the
compiled forward and backward give the eager call's bits (the same plans and kernels)."""

import pytest

from ato_cli import harness as h
from helpers import first_cases, slow_variants

CASES = first_cases(False, "float32")  # one fp32 CPU case an op


def _compiled(fn, graphs=None):
    """fn compiled (fullgraph: a graph break raises); the graphs Dynamo captured appended to
    ``graphs``."""
    import torch
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    if graphs is not None:
        graphs.append(counter)
    return torch.compile(fn, backend=counter, fullgraph=True)


def _ato_calls(counter) -> list:
    """The ato custom ops in the graphs a counter saw."""
    return [str(n.target).removesuffix(".default") for g in counter.graphs for n in g.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("ato.")]


@pytest.mark.parametrize("op", slow_variants(sorted(CASES), {"cab_attention"}))  # its two ops' run every time
def test_compiled_is_eager(op):
    """fullgraph=True fails on any graph break; one frame compiled, holding the op's custom op;
    outputs and gradients bitwise the eager call's."""
    case = CASES[op]
    inputs = h.make_inputs(case)
    eager = h.run_torch(case, inputs)
    seen = []
    compiled = h.run_torch(case, inputs, wrap=lambda fn: _compiled(fn, seen))
    assert seen[0].frame_count == 1 and _ato_calls(seen[0]) == [f"ato.{op}"], _ato_calls(seen[0])
    assert h.bitwise_equal(eager, compiled), f"{op}: compiled differs from eager"


def test_compiled_traced_temperature_is_eager():
    """softmax with a temperature tensor, whose backward alone keeps x (Op.unsaved): the
    compiled call's output and gradients are the eager call's bits."""
    from ato_core.ops.softmax.cases import softmax_case

    case = softmax_case((3, 100), temperature="traced", seed=7)
    inputs = h.make_inputs(case)
    seen = []
    compiled = h.run_torch(case, inputs, wrap=lambda fn: _compiled(fn, seen))
    assert seen[0].frame_count == 1 and _ato_calls(seen[0]) == ["ato.softmax"], _ato_calls(seen[0])
    assert set(compiled.grads) == {"x", "temperature"}
    assert h.bitwise_equal(h.run_torch(case, inputs), compiled), "compiled differs from eager"


def test_new_shapes_recompile():
    """A compiled function called at three shapes (torch.compile marks the changing size
    dynamic after the first): each result the eager call's bits."""
    import torch

    import ato_torch

    def f(x, w, b):
        return ato_torch.layer_norm(x, w, b)

    seen = []
    cf = _compiled(f, seen)
    for n in (8, 12, 16):
        x, w, b = torch.randn(n, 40), torch.randn(40), torch.randn(40)
        assert torch.equal(cf(x, w, b), f(x, w, b)), n
    assert seen[0].frame_count >= 1 and set(_ato_calls(seen[0])) == {"ato.layer_norm"}


def test_export():
    """torch.export of a module calling ato ops: one node per op, the same bits when run."""
    import torch

    import ato_torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32))
            self.b = torch.nn.Parameter(torch.randn(32))

        def forward(self, x):
            return ato_torch.softmax(ato_torch.layer_norm(x, self.w, self.b))

    m, x = Block(), torch.randn(8, 32)
    ep = torch.export.export(m, (x,))
    calls = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.ato.layer_norm.default in calls and torch.ops.ato.softmax.default in calls, calls
    assert torch.equal(ep.module()(x), m(x))


def test_static_round_trip():
    """The custom ops' static string reads back to an equal value, of the same types."""
    from ato_core.ops.block_sparse import Cab, Curvature, Sparse
    from ato_torch.library import decode, encode

    values = [(), (None,), (False, 1e-05, 0.0, 0), (-100, "mean", 0.1), (float("inf"), -3, -2.5e-300, 1e300),
              Cab(Curvature(64, 0.1, 0.5, True, 1), Sparse(64, True, None, False)), ((1, (2, ("x", None))),)]
    for value in values:
        back = decode(encode(value))
        assert back == value and type(back) is type(value), (value, back)
        assert [type(v) for v in back] == [type(v) for v in value], (value, back)
