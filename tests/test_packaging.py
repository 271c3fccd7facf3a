"""Packaging: a wheel built from the tree holds every module of the four packages (the op
families' folders included) and the ``ato`` console script; ``ato --version`` names the
version."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_wheel_holds_every_module(tmp_path):
    src = tmp_path / "src"  # a copy: setuptools builds in the tree, leaving build/ behind
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("ato_core", "ato_torch", "ato_jax", "ato_cli"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(src)], check=True, cwd=tmp_path)
    wheel, = tmp_path.glob("ato-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(ROOT)) for pkg in ("ato_core", "ato_torch", "ato_jax", "ato_cli")
               for p in (ROOT / pkg).rglob("*.py")}
    assert sources - names == set(), f"missing from the wheel: {sorted(sources - names)}"
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "ato = ato_cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_version():
    out = subprocess.run([sys.executable, "-m", "ato_cli.main", "--version"], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    assert out.startswith("ato ") and len(out.split()) == 2, out
