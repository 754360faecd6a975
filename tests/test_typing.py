"""The package type-checks: `mypy --strict tapead` (inline annotations, py.typed,
and the stub of the compiled module, tapead/_tapead_c.pyi) reports nothing."""
import importlib.util
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(platform.python_implementation() != "CPython",
                    reason="mypy runs on CPython only (its runtime, librt, is compiled for CPython); "
                           "the check is of the source, so the CPython run covers it")
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
@pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "tapead", "_tapead_c.pyi")),
                    reason="needs the source tree (runs from the repository root)")
def test_mypy_strict(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path),
                          "tapead"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout


def test_typing_files_ship():
    """py.typed and the stub are package data, so wheels carry them."""
    pkg = os.path.join(ROOT, "tapead")
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    assert 'tapead = ["py.typed", "*.pyi"]' in text


def test_stub_declares_every_c_function():
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "csrc", "cdef.h")) as f:
        names = set(re.findall(r"\b(ta_\w+)\s*\(", f.read()))
    with open(os.path.join(root, "tapead", "_tapead_c.pyi")) as f:
        stub = f.read()
    assert names and sorted(n for n in names if f"def {n}(" not in stub) == []
