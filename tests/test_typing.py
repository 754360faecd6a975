"""The package type-checks: `mypy --strict tapead` (inline annotations, py.typed,
and the stub of the compiled module, tapead/_tapead_c.pyi) reports nothing."""
import importlib.util
import os
import platform
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def NEEDS_MYPY(test):
    for mark in (
            pytest.mark.skipif(platform.python_implementation() != "CPython",
                               reason="mypy runs on CPython only (its runtime, librt, is compiled for "
                                      "CPython); the check is of the source, so the CPython run covers it"),
            pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed"),
            pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "tapead", "_tapead_c.pyi")),
                               reason="needs the source tree (runs from the repository root)")):
        test = mark(test)
    return test


@NEEDS_MYPY
def test_mypy_strict(mypy_cache):
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", mypy_cache,
                          "tapead"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """One mypy cache for this module's runs (the second reuses the package's)."""
    return str(tmp_path_factory.mktemp("mypy"))


@NEEDS_MYPY
def test_mypy_sees_every_public_name_with_its_type_and_refuses_a_misspelt_one(mypy_cache):
    """The lazily imported names (module __getattr__) are typed as what they
    are, not Any; a name tapead does not have is an error."""
    import tapead
    names = sorted(tapead.__all__) + ["nn", "optim", "__version__"]
    snippet = os.path.join(ROOT, f"_typing_snippet_{os.getpid()}.py")   # in the root: mypy finds the source
    with open(snippet, "w") as f:
        f.write("import tapead\nfrom tapead.nn import MLP\n")
        f.writelines(f"reveal_type(tapead.{n})\n" for n in names)
        f.write("tapead.no_such_name\nMLP(2, [3]).no_such_method\n")
    try:
        out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", mypy_cache,
                              os.path.basename(snippet)], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    finally:
        os.remove(snippet)
    lines = out.stdout.splitlines()
    revealed = [ln.split("Revealed type is ", 1)[1] for ln in lines if "Revealed type is" in ln]
    assert len(revealed) == len(names), out.stdout
    assert [n for n, t in zip(names, revealed) if t.strip('"') == "Any"] == [], out.stdout
    grad = revealed[names.index("grad")]
    assert grad.startswith('"Overload(def (outputs: ') and "create_graph: Literal[True]" in grad, grad
    assert revealed[names.index("no_grad")] == '"def () -> tapead.modes.no_grad"', out.stdout
    assert sum('has no attribute "no_such_name"' in ln for ln in lines) == 1, out.stdout
    assert sum('has no attribute "no_such_method"' in ln for ln in lines) == 1, out.stdout


USER_SCRIPT = """\
from typing import List, Union

import numpy as np
import tapead
from tapead import Value
from tapead.nn import MLP
from tapead.optim import SGD

ws = [Value(1.0), Value(2.0)]
xs: List[Union[Value, float]] = [Value(3.0), 4.0]
y = tapead.dot(ws, xs)
y.backward()
model = MLP(2, [3, 1])
opt = SGD(model.parameters(), lr=0.1)
opt.step()
prog = tapead.compile(y, [ws[0]], wrt=[ws[1]])
Y, G = prog.grad(np.zeros((4, 1)), per_sample=True)
reveal_type(y)
reveal_type(tapead.dot([1.0, 2.0], [3.0, 4.0]))
reveal_type(tapead.linear(xs, [ws, ws]))
reveal_type(tapead.grad(y, ws))
reveal_type(tapead.grad(y, ws, create_graph=True))
reveal_type(tapead.grad(y, ws[0]))
reveal_type(tapead.hessian(y, ws))
reveal_type(tapead.jacobian([y], ws))
reveal_type(y.data)
reveal_type(y < ws[0])
wrong: int = tapead.dot(ws, xs)
"""


@NEEDS_MYPY
def test_mypy_strict_on_a_user_script_outside_the_repository(tmp_path, mypy_cache):
    """mypy --strict on a user's script in a folder of its own finds tapead
    as installed (a wheel, or `pip install -e`, whose .pth file mypy follows:
    an import hook it could not) and sees what each call returns: dot and
    linear of Values are Values, grad gives floats (Values with
    create_graph=True), one for a single input.  Run from a source tree that
    was never installed, the tree is put on PYTHONPATH, as for any script."""
    import tapead
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import tapead; print(tapead.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True)
    if where.returncode != 0 or os.path.realpath(where.stdout.strip()) != os.path.realpath(tapead.__file__):
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(tapead.__file__)))
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", mypy_cache,
                          "--no-error-summary", "user.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    lines = out.stdout.splitlines()
    revealed = [ln.split("Revealed type is ", 1)[1].strip('"') for ln in lines if "Revealed type is" in ln]
    value = "tapead.engine.Value"
    f64 = "numpy.ndarray[tuple[Any, ...], numpy.dtype[numpy.float64]]"
    assert revealed[:6] == [value, "builtins.float", f"builtins.list[{value}]", "builtins.list[builtins.float]",
                            f"builtins.list[{value}]", "builtins.float"] or \
        revealed[:6] == [value, "float", f"list[{value}]", "list[float]", f"list[{value}]", "float"], out.stdout
    assert revealed[6:8] == [f64, f64] or all(r.startswith("numpy.ndarray[") and ("float64" in r or "_64Bit" in r)
                                              for r in revealed[6:8]), out.stdout   # (older numpy: floating[_64Bit])
    assert revealed[8] in ("builtins.float", "float") and revealed[9] in ("builtins.bool", "bool"), out.stdout
    errors = [ln for ln in lines if ": error:" in ln]
    assert len(errors) == 1 and "wrong: int" in USER_SCRIPT.splitlines()[int(errors[0].split(":")[1]) - 1] \
        and "Incompatible types in assignment" in errors[0], out.stdout + out.stderr


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
    with open(os.path.join(root, "csrc", "api", "cdef.h")) as f:
        names = set(re.findall(r"\b(ta_\w+)\s*\(", f.read()))
    with open(os.path.join(root, "tapead", "_tapead_c.pyi")) as f:
        stub = f.read()
    assert names and sorted(n for n in names if f"def {n}(" not in stub) == []
