"""numpy interop (values, data, grads) against Python loops, and the graph
drawing (to_dot source, draw_dot's graphviz.Digraph)."""
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import tapead
from tapead import Value

# ------------------------------------------------------------ numpy interop


@pytest.mark.parametrize("arr", [
    np.array([1.0, -2.5, 3.25]),
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.array([[0.5, -0.0], [np.inf, np.nan]], dtype=np.float32),
    np.linspace(-1, 1, 5000),
    [1, 2.5, True],
    np.array([], dtype=np.float64),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.arange(10.0)[::3],
])
def test_values_match_a_loop_of_leaves(arr):
    flat = np.asarray(arr, dtype=np.float64).ravel()   # C order, as documented
    xs = tapead.values(arr)
    loop = [Value(float(x)) for x in flat]
    assert len(xs) == len(loop) == flat.size
    assert all(type(v) is Value for v in xs)
    got, want = [v.data for v in xs], [v.data for v in loop]
    assert np.array_equal(np.array(got), np.array(want), equal_nan=True)
    assert all(v.grad == 0.0 for v in xs)
    assert len({id(v) for v in xs}) == len(xs)
    assert np.array_equal(tapead.data(xs), np.array(got), equal_nan=True)
    assert tapead.data(xs).dtype == np.float64 and tapead.grads(xs).dtype == np.float64


def test_data_and_grads_match_python_loops():
    rng = np.random.default_rng(0)
    xs = tapead.values(rng.normal(size=200))
    ys = [x * x + 3 * x for x in xs] + [Value(7.0)]
    loss = sum(y.tanh() for y in ys)
    loss.backward()
    everything = xs + ys + [loss]
    assert np.array_equal(tapead.data(everything), np.array([v.data for v in everything]))
    assert np.array_equal(tapead.grads(everything), np.array([v.grad for v in everything]))
    # each x's grad in closed form
    for x in xs:
        t = np.tanh(x.data * x.data + 3 * x.data)
        assert x.grad == pytest.approx((1 - t * t) * (2 * x.data + 3), rel=1e-12, abs=1e-14)
    # any iterable, repeated Values, and empty input
    assert list(tapead.data(v for v in [xs[0], xs[0], loss])) == [xs[0].data, xs[0].data, loss.data]
    assert tapead.grads([]).shape == (0,)


def test_values_are_independent_leaves_usable_with_micrograd_style_code():
    xs = tapead.values(np.array([1.0, 2.0]))
    a, b = xs
    (a * b).backward()
    assert (a.grad, b.grad) == (2.0, 1.0)
    a.data = 10.0
    assert list(tapead.data(xs)) == [10.0, 2.0]
    a.grad = 0
    assert list(tapead.grads(xs)) == [0.0, 1.0]


def test_gather_errors():
    with pytest.raises(TypeError):
        tapead.data([Value(1.0), 2.0])
    with pytest.raises(TypeError):
        tapead.grads(["x"])
    out = []
    t = threading.Thread(target=lambda: out.extend(tapead.values([1.0, 2.0])))
    t.start()
    t.join()
    mine = Value(3.0)
    with pytest.raises(tapead.TapeError):
        tapead.data([mine] + out)
    with pytest.raises(tapead.TapeError):
        tapead.grads(out)
    with pytest.raises((TypeError, ValueError)):
        tapead.values(["a", "b"])


def test_values_in_no_grad_still_are_leaves():
    with tapead.no_grad():
        xs = tapead.values([1.0, 2.0])
    y = xs[0] * xs[1]
    y.backward()
    assert list(tapead.grads(xs)) == [2.0, 1.0]


# ---------------------------------------------------------------- to_dot
RECORD = re.compile(r'^  (\w+) \[label="\{ (.*) \| data (\S+) \| grad (\S+) \}" shape=record\]$')
OPNODE = re.compile(r'^  (\w+) \[label="(.*)" shape=ellipse\]$')
EDGE = re.compile(r"^  (\w+) -> (\w+)$")


def parse_dot(src):
    lines = src.splitlines()
    assert lines[0] == "digraph {" and lines[-1] == "}"
    records, ops, edges = {}, {}, []
    for line in lines[2:-1]:
        if m := RECORD.match(line):
            records[m[1]] = (m[2], m[3], m[4])
        elif m := OPNODE.match(line):
            ops[m[1]] = m[2]
        elif m := EDGE.match(line):
            edges.append((m[1], m[2]))
        else:
            raise AssertionError(f"unexpected DOT line {line!r}")
    return lines[1], records, ops, edges


def test_to_dot_of_a_small_graph():
    a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    c = a * b                  # -6
    d = c + a                  # -4
    d.label = "d"
    L = d * d + 1.5            # 17.5
    unrelated = a * 100        # not behind L: not drawn
    L.backward()               # dL/dd = 2d = -8, dL/dc = -8, da = -8*b + -8 = 16, db = -8*a = -16
    graph, records, ops, edges = parse_dot(tapead.to_dot(L))
    assert graph == "  graph [rankdir=LR]"
    assert len(records) == 6 and len(ops) == 4
    by_label = {lab: (name, data, grad) for name, (lab, data, grad) in records.items()}
    assert by_label["a"][1:] == ("2.0000", "16.0000")
    assert by_label["b"][1:] == ("-3.0000", "-16.0000")
    assert by_label["d"][1:] == ("-4.0000", "-8.0000")
    data = sorted(float(d_) for _, d_, _ in records.values())
    assert data == sorted([2.0, -3.0, -6.0, -4.0, 16.0, 17.5])
    assert sorted(ops.values()) == sorted(["*", "+", "*", "+1.5"])
    # every op node has one edge out to its record, and edges in from its inputs
    outs = {t: h for t, h in edges if t in ops}
    assert set(outs) == set(ops)
    ins = {}
    for t, h in edges:
        if h in ops:
            ins.setdefault(h, []).append(t)
    n = {lab: name for lab, (name, _, _) in by_label.items()}
    cname = next(name for name, (_, dv, _) in records.items() if dv == "-6.0000")
    d_op = next(o for o, r in outs.items() if r == n["d"])
    assert sorted(ins[d_op]) == sorted([cname, n["a"]])
    c_op = next(o for o, r in outs.items() if r == cname)
    assert sorted(ins[c_op]) == sorted([n["a"], n["b"]]) and ops[c_op] == "*"
    assert len(edges) == len(ops) + sum(len(v) for v in ins.values())
    dd = next(name for name, (_, dv, _) in records.items() if dv == "16.0000")
    dd_op = next(o for o, r in outs.items() if r == dd)
    assert ins[dd_op] == [n["d"], n["d"]] and records[dd][2] == "1.0000"
    assert "200.0000" not in tapead.to_dot(L) and unrelated.data == 200.0
    # leaves get no op node; the root is a record with grad 1
    assert not {n["a"], n["b"]} & set(outs.values())
    root = next(name for name, (_, dv, _) in records.items() if dv == "17.5000")
    assert records[root][2] == "1.0000"
    assert tapead.to_dot(L, rankdir="TB").splitlines()[1] == "  graph [rankdir=TB]"


def test_to_dot_of_a_leaf_and_of_repeated_inputs():
    x = Value(3.0, label="x")
    graph, records, ops, edges = parse_dot(tapead.to_dot(x))
    assert list(records.values()) == [("x", "3.0000", "0.0000")] and not ops and not edges
    y = x * x
    _, records, ops, edges = parse_dot(tapead.to_dot(y))
    assert len(records) == 2 and list(ops.values()) == ["*"]
    xn = next(k for k, v in records.items() if v[0] == "x")
    assert edges.count((xn, next(iter(ops)))) == 2


def test_to_dot_escapes_labels():
    x = Value(1.0, label='w{0}|"q"<>')
    src = tapead.to_dot(x * 2)
    assert r'w\{0\}\|\"q\"\<\>' in src


# ---------------------------------------------------------------- draw_dot
def test_draw_dot_returns_a_digraph_with_the_same_graph():
    graphviz = pytest.importorskip("graphviz")
    a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    L = (a * b + a).relu()
    L.backward()
    dot = tapead.draw_dot(L)
    assert isinstance(dot, graphviz.Digraph)
    assert dot.format == "svg"
    body = dot.source
    assert body.count("shape=record") == 5 and body.count("shape=ellipse") == 3
    assert body.count("->") == 3 + 2 + 2 + 1
    assert "data 2.0000" in body and "grad 0.0000" in body
    assert 'rankdir=TB' in tapead.draw_dot(L, format="png", rankdir="TB").source


def test_draw_dot_renders_when_graphviz_is_installed():
    graphviz = pytest.importorskip("graphviz")
    import shutil
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    a = Value(2.0, label="a")
    L = (a * a).relu()
    L.backward()
    svg = tapead.draw_dot(L).pipe(format="svg").decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "data 4.0000" in svg and "grad 4.0000" in svg and ">a<" in svg.replace(" ", "")
    del graphviz


def test_import_tapead_does_not_import_numpy():
    """numpy loads on first use of an array function, not with `import tapead`
    (or tapead.nn / tapead.optim): micrograd code that never touches an array
    does not pay numpy's import or start OpenBLAS's threads."""
    code = ("import sys, tapead, tapead.nn, tapead.optim\n"
            "v = tapead.Value(2.0) ** 2; v.backward()\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n"
            "tapead.data([v])\n"
            "assert 'numpy' in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
