"""Every docstring example in every tapead module runs and gives what it shows."""
import doctest
import importlib
import inspect
import pkgutil

import pytest

import tapead

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
