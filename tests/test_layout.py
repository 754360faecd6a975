"""The source tree's own promises: a row of the op table without all its
rules does not compile, and the compiler names the missing rule; the Python
op surface generated from the table (tools/gen_ops.py: opsurface) is current;
csrc's folders are floors, each file including only its own floor's headers
and those below; only the modules of one private package (tapead/_c/) touch
the compiled library; and the package's run-time imports have no cycle."""
import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
CC = (sysconfig.get_config_var("CC") or "cc").split()[0]


def _inc(csrc):
    """-I for each of csrc's folders (its files include each other by bare name)."""
    return [f"-I{os.path.join(csrc, d)}" for d in sorted(os.listdir(csrc))]


@pytest.mark.skipif(not os.path.isdir(CSRC), reason="needs the source tree")
@pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")
def test_an_op_row_without_its_rules_is_a_compile_error_naming_them(tmp_path):
    src = tmp_path / "csrc"
    shutil.copytree(CSRC, src)
    with open(src / "api" / "ops.def", "a") as f:
        f.write('TA_OP(NEWOP, UN, "newop", "newop", "", MATH, "newop(x).", "0.0 -> (0.0, 1.0)")\n')
    out = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", *_inc(src), str(src / "diff" / "higher.c")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    for rule in ("fwd_NEWOP", "d_NEWOP", "e_NEWOP", "d2_NEWOP"):
        assert rule in out.stderr, out.stderr
    ok = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", *_inc(CSRC), os.path.join(CSRC, "diff", "higher.c")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


# csrc's floors, lowest first (build_ext.py: FLOORS), and the includes that
# go up a floor, each with its reason.
UPWARD = {("diff/subtape.c", "replay.h"): "ta_sub_replay adds the guards that bind a replay"}


@pytest.mark.skipif(not os.path.isdir(CSRC), reason="needs the source tree")
def test_each_c_file_includes_only_its_floor_and_those_below():
    """A file of one floor of csrc may include the headers of its own floor
    and of the floors below it (build_ext.py: FLOORS), never above: an
    include that goes up is a layer the tree no longer shows."""
    spec = importlib.util.spec_from_file_location("build_ext_floors", os.path.join(ROOT, "build_ext.py"))
    with open(spec.origin) as f:
        floors = eval(re.search(r"^FLOORS = (\(.*?\))$", f.read(), re.M).group(1))
    assert sorted(floors) == sorted(d for d in os.listdir(CSRC) if os.path.isdir(os.path.join(CSRC, d)))
    where = {}
    for d in floors:
        for name in os.listdir(os.path.join(CSRC, d)):
            assert name not in where, f"two files named {name}: csrc/{where.get(name)}, csrc/{d}"
            where[name] = d
    up = {}
    for name, d in where.items():
        with open(os.path.join(CSRC, d, name)) as f:
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M):
                assert inc in where, f"csrc/{d}/{name} includes {inc}, which csrc does not hold"
                if floors.index(where[inc]) > floors.index(d):
                    up[(f"{d}/{name}", inc)] = f"{d} -> {where[inc]}"
    assert set(up) == set(UPWARD), {k: v for k, v in up.items() if k not in UPWARD}


GEN_OPS = os.path.join(ROOT, "tools", "gen_ops.py")


def _gen_ops():
    """tools/gen_ops.py, the op surface's generator, as a module."""
    spec = importlib.util.spec_from_file_location("gen_ops", GEN_OPS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not os.path.isfile(GEN_OPS),
                    reason="needs the source tree")
def test_the_generated_op_surface_is_current():
    """A row added to csrc/api/ops.def without regenerating fails here, saying how."""
    stale = []
    for path, text in _gen_ops().opsurface().items():
        with open(os.path.join(ROOT, path)) as f:
            if f.read() != text:
                stale.append(path)
    assert not stale, (f"{', '.join(stale)} no longer match csrc/api/ops.def: run "
                       f"`python build_ext.py` (it regenerates them, then builds)")


@pytest.mark.skipif(not os.path.isfile(GEN_OPS),
                    reason="needs the source tree")
def test_the_generator_reads_a_new_row_and_refuses_a_short_one(tmp_path, monkeypatch):
    be = _gen_ops()
    shutil.copytree(CSRC, tmp_path / "csrc")
    shutil.copytree(os.path.join(ROOT, "tapead"), tmp_path / "tapead",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    monkeypatch.setattr(be, "HERE", str(tmp_path))
    with open(tmp_path / "csrc" / "api" / "ops.def", "a") as f:
        f.write('TA_OP(NEWOP,   UN,   "newop", "newop", "", MATH,  /* r := newop x */\n'
                '      "newop(x), a test op.", "1.0 -> (2.0, 3.0)")\n')
    out = be.opsurface()
    assert "NEWOP = %d" % len(be.op_rows()[:-1]) in out["tapead/_opsurface.py"]
    assert "'newop({x})'" in out["tapead/_opsurface.py"]
    assert "def newop(self) -> Value:" in out["tapead/engine.py"]
    assert ">>> x = tapead.Value(1.0); y = tapead.newop(x)\n" in out["tapead/functions.py"]
    assert "    (2.0, 3.0)\n" in out["tapead/functions.py"]
    with open(tmp_path / "csrc" / "api" / "ops.def", "a") as f:
        f.write('TA_OP(SHORT,   UN,   "short")\n')
    with pytest.raises(ValueError, match="SHORT.*|columns"):
        be.op_rows()


# The FFI boundary is narrow: the modules of one private package
# (tapead/_c/) import the compiled library and touch its `lib` and `ffi`;
# every other module calls the typed wrappers and hot-path names they own.
BOUNDARY = "_c"


def modules():
    """{dotted name: path} of every Python module of the package, in every
    subpackage: tapead.engine, tapead._c, tapead._c.holds, ..."""
    out = {}
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, "tapead")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        pkg = os.path.relpath(dirpath, ROOT).replace(os.sep, ".")
        for name in sorted(files):
            if name.endswith(".py"):
                mod = pkg if name == "__init__.py" else f"{pkg}.{name[:-3]}"
                out[mod] = os.path.join(dirpath, name)
    return out


def in_boundary(mod):
    return mod == f"tapead.{BOUNDARY}" or mod.startswith(f"tapead.{BOUNDARY}.")


def ffi_reaches(source):
    """(line, what) for each place a module's source reaches the compiled
    module: imports _tapead_c, imports `lib`/`ffi` from anywhere, or reads
    an attribute `lib`/`ffi` (_c.lib, ...)."""
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


def test_only_the_boundary_modules_touch_the_compiled_library():
    mods = modules()
    bad, inside = [], []
    for mod, path in mods.items():
        with open(path) as f:
            found = ffi_reaches(f.read())
        if in_boundary(mod):
            inside.append(mod)
        else:
            bad += [f"{os.path.relpath(path, ROOT)}:{line}: {what}" for line, what in found]
    assert not bad, (f"only the modules of tapead/{BOUNDARY}/ may touch the compiled "
                     f"library:\n" + "\n".join(bad))
    assert {"tapead._c", "tapead._c.status", "tapead._c.holds"} <= set(inside)
    assert len(inside) < len(mods) // 2         # a small, named set
    with open(mods["tapead._c"]) as f:
        assert ffi_reaches(f.read())            # (the check sees the boundary's own reach)


def test_the_boundary_check_sees_every_kind_of_reach():
    assert ffi_reaches("from ._c import ffi, lib") == [(1, "from _c import ffi"),
                                                       (1, "from _c import lib")]
    assert ffi_reaches("from ._tapead_c import ffi")
    assert ffi_reaches("import tapead._tapead_c")
    assert ffi_reaches("_lib = _c.lib")
    assert ffi_reaches("x = tapead._c.ffi.NULL")
    assert ffi_reaches("import importlib; importlib.import_module('tapead._tapead_c')")
    assert not ffi_reaches("def f(lib: str):\n    return lib == 'micrograd'  # lib.x, ffi.new")


def runtime_imports(source, package="tapead"):
    """The tapead modules (dotted names) that the source of a module of
    `package` (a package's __init__ is its own) imports at run time, wherever (top level or inside a function); `if
    TYPE_CHECKING:` blocks are for the type checker only and do not count.
    `from P import n` counts both P and P.n (n may be a submodule), and a
    submodule counts its packages below tapead itself."""
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
        if isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")
                base = ".".join(up[:len(up) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == "tapead" or base.startswith("tapead."):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tapead."))
    for m in list(found):           # importing tapead._c.holds runs tapead._c first
        parts = m.split(".")
        found.update(".".join(parts[:k]) for k in range(2, len(parts)))
    return found - {"tapead"}



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
    layer that needs the front is told it: engine attaches itself).  A
    module's own packages are not among its imports: they are always
    imported before it (a package's __init__ may import its modules)."""
    mods = modules()
    graph = {}
    for mod, path in mods.items():
        package = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        parts = mod.split(".")
        ancestors = {".".join(parts[:k]) for k in range(1, len(parts))}
        with open(path) as f:
            graph[mod] = runtime_imports(f.read(), package) - {mod} - ancestors
    assert "tapead._c.holds" in graph["tapead.engine"]          # (the graph reaches into _c)
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_cycles():
    src = ("from . import engine\nif TYPE_CHECKING:\n    from .custom import x\n"
           "def f():\n    from .nodedata import y\n")
    assert runtime_imports(src) >= {"tapead.engine", "tapead.nodedata"}
    assert not runtime_imports(src) & {"tapead.custom", "tapead.custom.x"}
    assert runtime_imports("from .status import check\nfrom .. import errors\n",
                           "tapead._c") >= {"tapead._c.status", "tapead._c", "tapead.errors"}
    assert runtime_imports("from ._c import holds as h\n") >= {"tapead._c.holds"}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
