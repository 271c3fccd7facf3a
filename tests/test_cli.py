"""``ato check --op``: the families split the check's cases exactly (so a GPU check can be run
family by family, each within one device command), and every declared op is checked."""

import pytest

from ato_cli import check
from ato_cli.main import main
from ato_core.ops import OPS

TRANSFORMER_OPS = {"layer_norm", "rms_norm", "dropout_residual_layer_norm", "softmax", "swiglu", "rope",
                   "cross_entropy"}


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-cases", "cuda-cases"])
def test_check_families_partition_the_cases(gpu):
    every = [c.label for c in check.cases(gpu, False)]
    parts = {f: check.cases(gpu, False, [f]) for f in check.families()}
    assert sorted(every) == sorted(c.label for cs in parts.values() for c in cs)
    for family, cs in parts.items():
        assert cs and {OPS[c.op].family for c in cs} == {family}
    assert {c.op for c in check.cases(gpu, False)} == set(OPS)
    assert {c.op for c in check.cases(gpu, False, ["transformer_ops"])} == TRANSFORMER_OPS
    two = check.cases(gpu, False, ["flash_attention", "transformer_ops"])
    assert len(two) == len(parts["flash_attention"]) + sum(len(parts[f]) for f in
                                                           ("norms", "softmax", "rope", "swiglu", "cross_entropy"))


def test_check_rejects_an_unknown_family(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--op", "attention"])
    assert "invalid choice: 'attention'" in capsys.readouterr().err


def test_every_family_has_a_bench_table():
    from ato_cli import bench

    for family in check.families():
        assert bench.table_of(family) in bench.TABLES
    assert bench.tables(["norms", "rope", "flash_attention"]) == ["transformer_ops", "flash_attention"]
    assert bench.tables() == list(bench.TABLES)


def test_help_without_a_command(capsys):
    """``ato`` alone prints its help (exit 0); the help says what each command needs, with no
    reStructuredText markup."""
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "ato check" in out and "needs a CUDA GPU" in out and "interpreter" in out
    for argv in (["--help"], ["bench", "--help"], ["check", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        text = capsys.readouterr().out
        assert exit_.value.code == 0 and "``" not in text
        if argv[0] == "bench":
            assert "Needs a CUDA GPU" in text
        if argv[0] == "check":
            assert "interpreter" in text


def test_bench_without_a_gpu_says_so(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--op", "rope"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_failure_log_keeps_each_failure_reason(tmp_path):
    """conftest's ATO_FAILURE_LOG (the GPU tier's shards): a failing test's id and first "E"
    line are in the file when pytest ends, a passing test's not."""
    import os
    import shutil
    import subprocess
    import sys

    shutil.copy(os.path.join(os.path.dirname(__file__), "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text("def test_bad():\n    assert 1 == 2, 'boom'\n\n\ndef test_good():\n    pass\n")
    log = tmp_path / "failures.txt"
    env = {**os.environ, "ATO_FAILURE_LOG": str(log)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    str(tmp_path / "test_x.py")], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "test_bad (call)" in lines[0] and "AssertionError: boom" in lines[0], lines
