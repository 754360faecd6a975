"""Every docstring example in every tapead module runs and gives what it shows."""
import contextlib
import doctest
import importlib
import inspect
import io
import math
import os
import pkgutil
import pydoc
import re

import pytest

import tapead
from tapead._opsurface import UNARY

# every module, in subpackages too (tapead._c holds tape_stats' and set_limit's examples)
MODULES = sorted(["tapead"] + [m.name for m in pkgutil.walk_packages(tapead.__path__, "tapead.")
                               if not m.name.startswith("tapead._tapead_c")])
# modules of optional extras: their examples run when the extra is installed
EXTRAS = {"tapead.dask": "dask.array"}


def _import(name):
    if name in EXTRAS:
        pytest.importorskip(EXTRAS[name])
    return importlib.import_module(name)


def test_every_module_is_listed():
    assert {"tapead.engine", "tapead.nn", "tapead.optim", "tapead.modes", "tapead.arrays",
            "tapead.draw", "tapead.forward", "tapead.wengert", "tapead.demo",
            "tapead._c", "tapead._c.holds"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    if name == "tapead.__main__":
        pytest.skip("runs the benchmark on import")
    mod = _import(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                          verbose=False)
    assert res.failed == 0, f"{res.failed} of {res.attempted} doctest examples failed in {name}"


def test_there_are_examples_to_run():
    total = 0
    for name in MODULES:
        if name != "tapead.__main__" and name not in EXTRAS:
            total += doctest.testmod(importlib.import_module(name)).attempted
    assert total >= 25


@pytest.mark.parametrize("name", tapead.__all__)
def test_every_public_name_has_an_example(name):
    doc = inspect.getdoc(getattr(tapead, name)) or ""
    assert ">>>" in doc, f"tapead.{name} has no >>> example in its docstring"


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
API, MICROGRAD = (os.path.join(ROOT, "docs", f) for f in ("api.md", "micrograd.md"))
OPS = {name for name, _ in UNARY} | {"maximum", "minimum"}   # the unary table's, and the two binary functions


@pytest.mark.skipif(not os.path.isfile(README), reason="needs the source tree")
def test_the_docs_op_lists_match_the_op_table():
    """docs/api.md's API row lists every op's method, and the migration tables
    (docs/micrograd.md's and the README's short one) every op micrograd lacks
    (micrograd's engine has relu; its lecture's tanh): an op added to
    csrc/api/ops.def fails here until the docs name it."""
    with open(API) as f:
        api = re.search(r"ops `\+ - \* / \*\* abs\(\)`, `([a-z0-9 ]+)` \(methods, and functions", f.read())
    assert api and set(api.group(1).split()) == OPS, api and set(api.group(1).split()) ^ OPS
    with open(MICROGRAD) as f:
        also = re.search(r"\| — \| also ((?:`\w+`, )+`\w+`) \|", f.read())
    assert also and set(re.findall(r"`(\w+)`", also.group(1))) | {"relu", "tanh"} == OPS
    with open(README) as f:
        more = re.search(r"\| — \| more ops: `([a-z0-9 ]+)`", f.read())
    assert more and set(more.group(1).split()) | {"relu", "tanh"} == OPS


@pytest.mark.skipif(not os.path.isfile(README), reason="needs the source tree")
def test_the_readme_first_example_prints_what_it_says():
    with open(README) as f:
        code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})
    c, da, db = (float(x) for x in out.getvalue().split())
    t = math.tanh(2.0)
    assert (c, da, db) == (3.0 + t, -3.0 + (1 - t * t), -4.0)   # relu(2*-3 + 9) + tanh(2), by hand


def test_help_shows_the_constructor_and_what_data_and_grad_are():
    """help(tapead.Value) and inspect.signature on either front: the
    constructor's arguments (the C type's come from its doc's first
    line), and docstrings for data and grad."""
    from tapead import Value
    params = list(inspect.signature(Value).parameters)
    assert params == ["data", "_children", "_op", "label", "local_grads"], params
    assert "d(root)/d(this node)" in Value.grad.__doc__
    assert "value" in Value.data.__doc__
    text = pydoc.render_doc(Value, renderer=pydoc.plaintext)
    sig = text[text.index(" |  Value(data"):].split("\n", 1)[0]   # the constructor's line
    assert all(p in sig for p in params), sig
