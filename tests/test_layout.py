"""The source tree's own promises: a row of the op table without all its
rules does not compile, and the compiler names the missing rule; the Python
op surface generated from the table (build_ext.py: opsurface) is current;
and one module (tapead/_core.py) touches the compiled library."""
import importlib.util
import os
import shutil
import subprocess
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
CC = (sysconfig.get_config_var("CC") or "cc").split()[0]


@pytest.mark.skipif(not os.path.isdir(CSRC), reason="needs the source tree")
@pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")
def test_an_op_row_without_its_rules_is_a_compile_error_naming_them(tmp_path):
    src = tmp_path / "csrc"
    shutil.copytree(CSRC, src)
    with open(src / "ops.def", "a") as f:
        f.write('TA_OP(NEWOP, UN, "newop", "newop", "", MATH, "newop(x).", "0.0 -> (0.0, 1.0)")\n')
    out = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", str(src / "higher.c")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    for rule in ("fwd_NEWOP", "d_NEWOP", "e_NEWOP", "d2_NEWOP"):
        assert rule in out.stderr, out.stderr
    ok = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", os.path.join(CSRC, "higher.c")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def _build_ext():
    spec = importlib.util.spec_from_file_location("build_ext", os.path.join(ROOT, "build_ext.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "build_ext.py")),
                    reason="needs the source tree")
def test_the_generated_op_surface_is_current():
    """A row added to csrc/ops.def without regenerating fails here, saying how."""
    stale = []
    for path, text in _build_ext().opsurface().items():
        with open(os.path.join(ROOT, path)) as f:
            if f.read() != text:
                stale.append(path)
    assert not stale, (f"{', '.join(stale)} no longer match csrc/ops.def: run "
                       f"`python build_ext.py` (it regenerates them, then builds)")


@pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "build_ext.py")),
                    reason="needs the source tree")
def test_the_generator_reads_a_new_row_and_refuses_a_short_one(tmp_path, monkeypatch):
    be = _build_ext()
    shutil.copytree(CSRC, tmp_path / "csrc")
    shutil.copytree(os.path.join(ROOT, "tapead"), tmp_path / "tapead",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    monkeypatch.setattr(be, "HERE", str(tmp_path))
    with open(tmp_path / "csrc" / "ops.def", "a") as f:
        f.write('TA_OP(NEWOP,   UN,   "newop", "newop", "", MATH,  /* r := newop x */\n'
                '      "newop(x), a test op.", "1.0 -> (2.0, 3.0)")\n')
    out = be.opsurface()
    assert "NEWOP = %d" % len(be.op_rows()[:-1]) in out["tapead/_opsurface.py"]
    assert "'newop({x})'" in out["tapead/_opsurface.py"]
    assert "def newop(self) -> Value:" in out["tapead/engine.py"]
    assert ">>> x = tapead.Value(1.0); y = tapead.newop(x)\n" in out["tapead/functions.py"]
    assert "    (2.0, 3.0)\n" in out["tapead/functions.py"]
    with open(tmp_path / "csrc" / "ops.def", "a") as f:
        f.write('TA_OP(SHORT,   UN,   "short")\n')
    with pytest.raises(ValueError, match="SHORT.*|columns"):
        be.op_rows()


# The FFI boundary is narrow: one module (tapead/_core.py) imports the
# compiled library and touches its `lib` and `ffi`; every other module calls
# the typed wrappers and hot-path names _core exports.
BOUNDARY = "_core.py"


def ffi_reaches(source):
    """(line, what) for each place a module's source reaches the compiled
    module: imports _tapead_c, imports `lib`/`ffi` from anywhere, or reads
    an attribute `lib`/`ffi` (_core.lib, ...)."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if "_tapead_c" in a.name]
        elif isinstance(node, ast.ImportFrom):
            if "_tapead_c" in (node.module or ""):
                found.append((node.lineno, f"from {node.module} import"))
            found += [(node.lineno, f"from {node.module or '.'} import {a.name}")
                      for a in node.names if a.name in ("lib", "ffi", "_tapead_c")]
        elif isinstance(node, ast.Attribute) and node.attr in ("lib", "ffi", "_tapead_c"):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.endswith("_tapead_c"):   # importlib.import_module("tapead._tapead_c")
            found.append((node.lineno, repr(node.value)))
    return sorted(found)


def test_only_the_boundary_module_touches_the_compiled_library():
    pkg = os.path.join(ROOT, "tapead")
    bad = []
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != BOUNDARY:
            with open(os.path.join(pkg, name)) as f:
                bad += [f"tapead/{name}:{line}: {what}" for line, what in ffi_reaches(f.read())]
    assert not bad, "only tapead/_core.py may touch the compiled library:\n" + "\n".join(bad)
    with open(os.path.join(pkg, BOUNDARY)) as f:
        assert ffi_reaches(f.read())            # (the check sees the boundary's own reach)


def test_the_boundary_check_sees_every_kind_of_reach():
    assert ffi_reaches("from ._core import ffi, lib") == [(1, "from _core import ffi"),
                                                          (1, "from _core import lib")]
    assert ffi_reaches("from ._tapead_c import ffi")
    assert ffi_reaches("import tapead._tapead_c")
    assert ffi_reaches("_lib = _core.lib")
    assert ffi_reaches("x = tapead._core.ffi.NULL")
    assert ffi_reaches("import importlib; importlib.import_module('tapead._tapead_c')")
    assert not ffi_reaches("def f(lib: str):\n    return lib == 'micrograd'  # lib.x, ffi.new")


def runtime_imports(source):
    """The tapead modules a module's source imports at run time, wherever
    (top level or inside a function); `if TYPE_CHECKING:` blocks are for the
    type checker only and do not count."""
    import ast
    tree = ast.parse(source)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tapead."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tapead."))
    return found


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop(); on.discard(w); comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """Each module imports only modules below it, at run time too (a lower
    layer that needs the front is told it: engine attaches itself)."""
    pkg = os.path.join(ROOT, "tapead")
    graph = {}
    for name in os.listdir(pkg):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name)) as f:
                graph[name[:-3]] = runtime_imports(f.read()) - {"__init__"}
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_cycles():
    assert runtime_imports("from . import engine\nif TYPE_CHECKING:\n    from .custom import x\n"
                           "def f():\n    from .nodedata import y\n") == {"engine", "nodedata"}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
