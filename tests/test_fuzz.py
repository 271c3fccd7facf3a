"""The fuzzing tier: property-based tests of every declared op on the CPU (the interpreter).

Each family's cases.fuzz draws one random case per op (shapes, dtypes, options, values);
hypothesis drives the draws with a fixed seed and a few examples per op (2; 3 in the slow tier),
so CI sees the same cases every run, whatever the tests' source (derandomize would hash it: an
edit to a test would change its draws). ATO_FUZZ_EXAMPLES=N runs N examples per op (e.g. 200 for
a long run), ATO_FUZZ_SEED=N other draws. The properties, for every op and every draw:

- outputs and gradients within the dtype's tolerance of the float64 reference
  (ato_cli.harness.TOLERANCE), torch and JAX bitwise equal (tests/helpers.check);
- torch on strided views of the inputs gives the bits it gives on contiguous ones;
- one NaN in one input: NaN in exactly the outputs and gradients where the float64 reference
  has it (tests/helpers.check_special), torch and JAX bitwise equal; one infinity: the
  outputs' NaN and infinities exactly the reference's;
- each magnitude the family declares (cases.MAGNITUDES, from 1e-30 up to half the dtype's
  largest value): finite where the reference is, within tolerance relative to the size.

With its fix reverted, test_fuzz_nan finds ELU+1 dropping NaN and test_fuzz_magnitude the
cross-entropy overflow at huge logits (issue 27).
"""

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ato_cli import harness as h
from ato_core.ops import OPS
from ato_core.testing import HALF_MAX
import numpy as np

from helpers import RUN_SLOW, cases_of, causal_masked, check, check_special, declared, slow_variants

EXAMPLES = int(os.environ.get("ATO_FUZZ_EXAMPLES", "3" if RUN_SLOW else "2"))
SEED = int(os.environ.get("ATO_FUZZ_SEED", "0"))
CASES = {name: cases_of(name) for name in OPS}
FUZZ = {name: cases.fuzz for name, cases in CASES.items()}
MAGNITUDES = {name: cases.MAGNITUDES[name] for name, cases in CASES.items()}
CANCELLING = {name: declared(name, "CANCELLING") for name in OPS}


class _Pick:
    """ato_core.testing.Pick over a hypothesis data object."""

    def __init__(self, data):
        self.data = data

    def int(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.data.draw(st.sampled_from(tuple(seq)))


def test_every_op_has_a_fuzz_strategy():
    assert set(FUZZ) == set(OPS) == set(MAGNITUDES)


@pytest.mark.parametrize("op", slow_variants(sorted(OPS), {"cab_attention"}))  # its parts fuzzed alone
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(SEED)
@given(data=st.data())
def test_fuzz(op, data):
    case = FUZZ[op](_Pick(data))[op]
    inputs = h.make_inputs(case)
    t, _, _ = check(case, inputs)
    strided = h.run_torch(case, inputs, strided=True)
    assert h.bitwise_equal(strided, t), f"{case.label}: strided views differ from contiguous inputs"


@pytest.mark.parametrize("special", ["nan", "inf"])
@pytest.mark.parametrize("op", sorted(OPS))
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(SEED)
@given(data=st.data())
def test_fuzz_nan(op, special, data):
    """One NaN in one float input: NaN in exactly the outputs and gradients where the float64
    reference has it (a diverging run must look diverged), the rest as usual. One infinity
    instead: the outputs' NaN and infinities exactly the reference's; the gradients are
    compared between the frameworks only (the reference's autograd sums products such as
    sigmoid * inf - gate * sigmoid' * inf into NaN where the derivative is an infinity)."""
    case = FUZZ[op](_Pick(data))[op]
    inputs = h.make_inputs(case)
    ints = {n for n, _, _, _ in case.int_inputs}
    name = data.draw(st.sampled_from(sorted(n for n in inputs if n not in ints)))
    a = inputs[name].copy()
    value = np.nan if special == "nan" else data.draw(st.sampled_from((np.inf, -np.inf)))
    a.reshape(-1)[data.draw(st.integers(0, a.size - 1))] = value
    inputs[name] = a
    check_special(case, inputs, masked=causal_masked(case), grads=bool(np.isnan(value)),
                  inf_as_nan=bool(np.isinf(value)) and name in declared(op, "INF_AS_NAN"))


@pytest.mark.parametrize("op,magnitude", [(op, m) for op in sorted(OPS) for m in MAGNITUDES[op]], ids=str)
@settings(max_examples=max(1, EXAMPLES // 3), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@seed(SEED)
@given(data=st.data())
def test_fuzz_magnitude(op, magnitude, data):
    """Inputs of each magnitude the op's family declares (cases.MAGNITUDES: from 1e-30 up to
    half the dtype's largest value for cross_entropy): finite where the reference is, and
    within tolerance of it relative to their size. One draw per magnitude (a third of
    ATO_FUZZ_EXAMPLES when set)."""
    case = FUZZ[op](_Pick(data))[op]
    case = dataclasses.replace(case, options=case.options + (("magnitude", magnitude),))
    huge = magnitude == HALF_MAX or magnitude > 1
    check_special(case, h.make_inputs(case), cancelling=CANCELLING[op] if huge else ())
