"""The fuzzing tier: property-based tests of every declared op on the CPU (the interpreter).

Each family's cases.fuzz draws one random case per op (shapes, dtypes, options, values);
hypothesis drives the draws with a fixed seed and a few examples per op, so CI sees the same
cases every run. ATO_FUZZ_EXAMPLES=N runs N examples per op (e.g. 200 for a long run). The
properties, for every op and every draw:

- outputs and gradients within the dtype's tolerance of the float64 reference
  (ato_cli.harness.TOLERANCE), torch and JAX bitwise equal (tests/helpers.check);
- torch on strided views of the inputs gives the bits it gives on contiguous ones.

Values are finite here (N(0, 1), logits up to 10x that); NaN, infinities and extreme magnitudes
are the next properties to come (issue 27), with the kernel fixes they need.
"""

import importlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ato_cli import harness as h
from ato_core.ops import FAMILIES, OPS
from helpers import check

EXAMPLES = int(os.environ.get("ATO_FUZZ_EXAMPLES", "3"))
FUZZ = {name: importlib.import_module(f.__name__ + ".cases").fuzz for f in FAMILIES for name in
        (op.name for op in f.OPS)}


class _Pick:
    """ato_core.testing.Pick over a hypothesis data object."""

    def __init__(self, data):
        self.data = data

    def int(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.data.draw(st.sampled_from(tuple(seq)))


def test_every_op_has_a_fuzz_strategy():
    assert set(FUZZ) == set(OPS)


@pytest.mark.parametrize("op", sorted(OPS))
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz(op, data):
    case = FUZZ[op](_Pick(data))[op]
    inputs = h.make_inputs(case)
    t, _, _ = check(case, inputs)
    strided = h.run_torch(case, inputs, strided=True)
    assert h.bitwise_equal(strided, t), f"{case.label}: strided views differ from contiguous inputs"
