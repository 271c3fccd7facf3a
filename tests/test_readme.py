"""The README's Python examples run as pasted (CPU-sized, each block with its own imports and
inputs), so that an example cannot rot unnoticed."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 9


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(code):
    exec(compile(code, "README.md python block", "exec"), {"__name__": "readme"})
