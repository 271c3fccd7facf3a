"""``ato check --op``: the families split the check's cases exactly (so a GPU check can be run
family by family, each within one device command)."""

import pytest

from ato_cli import check
from ato_cli.main import main

TRANSFORMER_OPS = {"layer_norm", "rms_norm", "dropout_residual_layer_norm", "softmax", "swiglu", "rope",
                   "cross_entropy"}


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-cases", "cuda-cases"])
def test_check_families_partition_the_cases(gpu):
    every = [c.label for c in check.cases(gpu, False)]
    parts = {f: check.cases(gpu, False, [f]) for f in check.FAMILIES}
    assert sorted(every) == sorted(c.label for cs in parts.values() for c in cs)
    assert {c.op for c in parts["transformer_ops"]} == TRANSFORMER_OPS
    assert {c.op for c in parts["flash_attention"]} == {"flash_attention"}
    assert {c.op for c in parts["linear_attention"]} == {"elu_plus_one", "linear_attention", "linear_attention_step"}
    two = check.cases(gpu, False, ["flash_attention", "transformer_ops"])
    assert len(two) == len(parts["flash_attention"]) + len(parts["transformer_ops"])


def test_check_rejects_an_unknown_family(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--op", "attention"])
    assert "invalid choice: 'attention'" in capsys.readouterr().err
