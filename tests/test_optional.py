"""The optional dependencies (tapead/_install.py): without one, the feature
that needs it raises an ImportError naming what to install from the package
index (tapead itself is not on one: its extras work only from a clone)."""
import os
import subprocess
import sys

import pytest

import tapead
from tapead import Value
from conftest import this_tapead

def test_import_tapead_dask_without_dask_says_what_to_install():
    code = ("import sys; sys.modules['dask'] = None\n"      # import dask raises ImportError
            "try:\n    import tapead.dask\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=this_tapead())
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('tapead.dask needs Dask: pip install "dask[array,distributed]"'), out.stdout
    assert 'pip install -e ".[dask]"' in out.stdout


def test_draw_dot_without_graphviz_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(ImportError) as info:
        tapead.draw_dot(Value(2.0) * 3)
    msg = str(info.value)
    assert msg.startswith("draw_dot needs the graphviz package: pip install graphviz"), msg
    assert "Graphviz's dot program" in msg and "to_dot" in msg


def test_no_message_names_an_extra_of_an_index_tapead_is_not_on():
    """`pip install "tapead[cuda]"` works nowhere (tapead installs from a
    clone): messages and docstrings name the package itself."""
    bad = []
    for dirpath, _, files in os.walk(os.path.dirname(os.path.abspath(tapead.__file__))):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    bad += [f"{path}:{i}" for i, line in enumerate(f, 1) if "tapead[" in line]
    assert bad == []
