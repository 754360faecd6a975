"""micrograd idioms beyond its operators, written as a
user would, each run through micrograd itself and through tapead.

numpy arrays meeting Values, graph walks that keep what the user put on
the nodes (identity, labels, attributes), and what `import tapead` costs."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from micrograd.engine import Value as MGValue

import tapead
from tapead import Value

OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
       "/": lambda x, y: x / y, "**": lambda x, y: x ** y}
ARRAYS = [np.array([1.0, 2.0, 3.0]), np.array([[0.5, -1.5], [2.0, 4.0]]), np.array([2, 3]),
          np.array([1.5], dtype=np.float32), np.array([True, False])]


# ------------------------------------------------------------ numpy arrays
@pytest.mark.parametrize("sym", sorted(OPS))
@pytest.mark.parametrize("k", range(len(ARRAYS)))
def test_array_op_value_is_micrograds_object_array(sym, k):
    arr, op = ARRAYS[k], OPS[sym]
    if sym == "**":
        arr = np.abs(arr) + 0.5      # micrograd: array ** Value raises (no __rpow__); see below
    if sym == "/" and arr.dtype == bool:
        arr = arr + 1
    t, m = Value(2.0), MGValue(2.0)
    got = op(arr, t)
    assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == arr.shape
    assert all(type(g) is Value for g in got.flat)
    if sym != "**":
        want = op(arr, m)
        assert want.dtype == object and want.shape == got.shape
        assert [g.data for g in got.flat] == [float(w.data) for w in want.flat]
    else:
        assert [g.data for g in got.flat] == [float(a) ** 2.0 for a in arr.flat]
    s = got.sum() if got.size > 1 else got.flat[0]
    s.backward()
    if sym != "**":
        ms = op(arr, m).sum() if got.size > 1 else op(arr, m).flat[0]
        ms.backward()
        assert t.grad == pytest.approx(m.grad, rel=1e-15)


@pytest.mark.parametrize("sym", sorted(OPS))
def test_value_op_array_is_an_object_array_elementwise(sym):
    """micrograd's `v * array` is one Value whose data is an array (and
    `v ** array` fails its assert); here it is the object array, elementwise,
    what `array * v` gives on both libraries."""
    arr, op = np.array([[1.0, 2.0], [0.5, 4.0]]), OPS[sym]
    v = Value(3.0)
    got = op(v, arr)
    assert got.dtype == object and got.shape == arr.shape
    assert [g.data for g in got.flat] == [op(3.0, float(a)) for a in arr.flat]
    m = MGValue(3.0)
    if sym != "**":
        mg = op(m, arr)
        assert isinstance(mg, MGValue) and isinstance(mg.data, np.ndarray)   # micrograd's
        assert [g.data for g in got.flat] == list(mg.data.flat)


def test_a_one_element_array_is_an_array_on_every_numpy():
    """An array of one element is an array, not a number, whatever numpy
    (numpy < 2.3 still converts one with float(), with a warning): both
    sides, both fronts, give the one-element object array micrograd's
    `array * v` gives."""
    for arr in (np.array([1.5]), np.array([[2]]), np.array([0.5], dtype=np.float32)):
        for op in OPS.values():
            for got in (op(arr, Value(2.0)), op(Value(2.0), arr)):
                assert type(got) is np.ndarray and got.dtype == object and got.shape == arr.shape
                assert type(got.flat[0]) is Value
        with pytest.raises(TypeError, match="needs a real number"):
            Value(arr)


def test_numpy_scalars_and_0d_arrays_still_give_a_value():
    v, m = Value(2.0), MGValue(2.0)
    for c in (np.float64(1.5), np.int64(3), np.float32(0.25), np.array(3.0)):
        for op in OPS.values():
            got, want = op(c, v), op(c, m) if op is not OPS["**"] else None
            assert type(got) is Value and type(op(v, c)) is Value
            if want is not None:
                assert got.data == float(want.data)


def test_summing_array_times_value_as_in_a_notebook():
    """A notebook's pattern: features as an array, weights as Values."""
    x = np.array([0.5, -1.0, 2.0])
    w, mw = [Value(v) for v in (0.1, 0.2, 0.3)], [MGValue(v) for v in (0.1, 0.2, 0.3)]
    b, mb = Value(0.5), MGValue(0.5)
    out = sum(x * np.array(w, dtype=object)) + b
    mout = sum(x * np.array(mw, dtype=object)) + mb
    y = sum(xi * wi for xi, wi in zip(x, w))          # numpy scalars times Values: Values
    assert type(y) is Value
    for o, mo in ((out.relu(), mout.relu()),):
        o.backward(); mo.backward()
        assert o.data == pytest.approx(mo.data, rel=1e-15)
        assert [p.grad for p in w + [b]] == pytest.approx([p.grad for p in mw + [mb]], rel=1e-15)


def test_an_array_error_leaves_values_unchanged_and_other_types_still_refused():
    v = Value(2.0)
    with pytest.raises(ZeroDivisionError):
        v / np.array([1.0, 0.0])
    assert v.data == 2.0 and v.grad == 0.0
    with pytest.raises(TypeError):
        v + "x"
    with pytest.raises(TypeError):
        [1.0, 2.0] * v


def test_import_tapead_and_arithmetic_do_not_import_numpy():
    code = ("import sys, tapead\n"
            "v = tapead.Value(2.0); w = (v * 3 + 1) ** 2 / v - 1; w.backward()\n"
            "try:\n    v + 'x'\nexcept TypeError:\n    pass\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ------------------------------------------- identity, labels, attributes
def test_prev_gives_the_labelled_values_themselves():
    a = Value(2.0, label="a")
    b = Value(-3.0, label="b")
    c = a * b
    assert a in c._prev and b in c._prev
    assert sorted(v.label for v in c._prev) == ["a", "b"]
    e = a * b; e.label = "e"
    d = e + Value(10.0, label="c"); d.label = "d"
    assert e in d._prev and {v.label for v in d._prev} == {"e", "c"}


def test_a_walk_returns_one_object_per_node_and_every_walk_the_same_one():
    x = Value(1.5, label="x")
    y = (x * x + x).tanh()

    def walk(v, seen):
        for p in v._prev:
            seen.append(p)
            walk(p, seen)
        return seen
    first = walk(y, [])
    again = walk(y, [])                       # while the first walk's Values live
    assert len(first) == len(again) and {id(v) for v in first} == {id(v) for v in again}
    assert x in first                         # the labelled leaf itself, not a copy


def test_labels_and_attributes_live_with_the_node():
    """The lecture labels nodes inside helper code and draws the graph later,
    after the helper's Values are gone."""
    def neuron(x):
        h = x * 2.0
        h.label = "h"
        h.name = "hidden"
        h.layer = 1
        return h.tanh()

    x = Value(0.3, label="x")
    out = neuron(x)
    gc.collect()
    (h,) = out._prev
    assert (h.label, h.name, h.layer) == ("h", "hidden", 1)
    rows = tapead.wengert(out).rows
    assert [r["label"] for r in rows] == ["x", "h", ""]
    dot = tapead.to_dot(out)
    assert "{ h |" in dot and "{ x |" in dot
    h.name = "renamed"
    (again,) = out._prev
    assert again is h and again.name == "renamed"
    del h.layer
    assert not hasattr(h, "layer")


def test_user_attributes_as_on_micrograds_value():
    m = MGValue(1.0)
    m.name = "x1"                   # micrograd's Value has a __dict__
    v = Value(1.0)
    v.name = "x1"
    v.grad_norm = 0.5
    assert (v.name, v.grad_norm) == (m.name, 0.5)
    assert getattr(Value(2.0), "name", None) is None          # another Value has none
    with pytest.raises(AttributeError, match="name"):
        Value(2.0).name
    if tapead.FRONT == "cpython":    # the type's own names stay read-only (no per-Value dict)
        with pytest.raises(AttributeError):
            v.relu = 1
        with pytest.raises(AttributeError):
            v.__foo__ = 1
    v.data = 4.0; v.grad = 1.0      # data and grad are the node's numbers, as before
    assert (v.data, v.grad) == (4.0, 1.0)


def test_distinct_attribute_names_do_not_grow_the_type():
    """setattr(v, f'feature{k}', ...) over many Values: a name leaves the
    C type once no node has it, and the names of live nodes keep working
    across those sweeps."""
    keep = []
    tp = type(Value(0.0))
    t0 = len(tp.__dict__)
    for k in range(100000):
        v = Value(float(k))
        setattr(v, f"feature{k}", k)
        if k % 25000 == 1:
            keep.append(v)
    del v
    assert len(tp.__dict__) - t0 < 50000           # (every name kept: 100,000)
    assert [getattr(v, f"feature{int(v.data)}") for v in keep] == [int(v.data) for v in keep]
    with pytest.raises(AttributeError, match="feature2"):
        keep[1].feature2                             # another node's name
    keep[1].feature2 = "now"
    assert keep[1].feature2 == "now" and not hasattr(keep[2], "feature2")


@pytest.mark.skipif(tapead.FRONT != "cpython", reason="the C type's size")
def test_attributes_keep_the_c_value_small():
    """Attributes live with the node, not in a per-Value dict: a C
    Value stays 40 bytes (plus the collector's header) whatever is set."""
    v = Value(1.0)
    v.name = "x1"
    v.label = "x"
    assert sys.getsizeof(v) <= 56 and sys.getsizeof(Value(2.0)) <= 56


def test_node_data_dies_with_the_node_not_a_reused_slot():
    N = sys.modules["tapead.nodedata"]
    olds = []
    for k in range(3):
        v = Value(float(k), label=f"old{k}")
        v.mine = k
        olds.append(v._i)
        del v
    for _ in range(20):
        gc.collect()
        tapead.collect()
        fresh = [Value(0.0) * 2 for _ in range(3000)]
        for f in fresh:
            assert f.label == "" and getattr(f, "mine", None) is None
            for p in f._prev:
                assert p.label == "" and getattr(p, "mine", None) is None
        if any(f._i in olds for f in fresh):
            break
    else:
        pytest.fail("no id was reused")
    for i in olds:                            # a reused id's entry, if any, is the new node's
        e = N.entry(i)
        assert e is None or (e.label == "" and not e.attrs)


def test_node_table_is_per_thread_and_bounded():
    N = sys.modules["tapead.nodedata"]
    main = Value(1.0, label="main")
    mine = N._table()
    box = []

    def other():
        w = Value(1.0, label="other")
        w.k = 1
        try:
            theirs = main.label
        except tapead.TapeError:     # another thread's Value: its node's data is not here
            theirs = "TapeError"
        box.append((w.label, w.k, N._table() is not mine, theirs))
    t = threading.Thread(target=other)
    t.start(); t.join()
    assert box[0] == ("other", 1, True, "TapeError")    # another thread's table
    assert main.label == "main"
    gc.collect()
    tapead.collect()
    before = len(N._table().entries)      # earlier tests' (PyPy: garbage its collector has yet to find)
    for _ in range(20):                                         # labelled temporaries:
        for k in range(2000):                                  # the table stays bounded
            y = Value(float(k)) * 2
            y.label = "t"
        gc.collect()
        tapead.collect()
    assert len(N._table().entries) < before + 10000


# ------------------------------------------------------------- import cost
def test_import_tapead_loads_only_the_core_and_every_name_works():
    code = ("import sys, tapead\n"
            "mods = sorted(m for m in sys.modules if m.startswith('tapead'))\n"
            "print(' '.join(mods))\n"
            "for n in tapead.__all__: getattr(tapead, n)\n"
            "import tapead.nn, tapead.optim\n"
            "assert tapead.nn.MLP and tapead.optim.SGD and tapead.replay.compile\n"
            "print(tapead.FRONT)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    mods = out.stdout.split("\n")[0].split()
    assert "tapead.nn" not in mods and "tapead.replay" not in mods and "tapead.wengert" not in mods
    assert set(dir(tapead)) >= set(tapead.__all__)
    env = {**os.environ, "TAPEAD_FRONT": "cffi"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.split("\n")[1] == "cffi", out.stderr


def test_an_attribute_holding_values_of_its_own_graph_is_freed():
    """A user attribute that holds Values of its own
    graph (`b.inputs = (w, a)`, as graph-drawing code does) is a cycle the
    collector sees: the node data is carried by the Value, not held by a
    table, so once the program drops the graph all of it goes, tape
    segments included, over a loop of many steps."""
    import weakref
    w = Value(0.5)
    gc.collect()
    tapead.collect()
    base = tapead.tape_stats()["nodes"]
    gone = []
    for step in range(3000):
        a = Value(float(step))
        b = w * a + 1.0
        b.inputs = (w, a)               # the node's own inputs: its own graph
        b.label = f"b{step}"
        assert b.inputs[1] is a and b.label == f"b{step}"
        if step % 500 == 0:
            gone.append(weakref.ref(b))
        del a, b
    gc.collect()
    tapead.collect()
    assert all(r() is None for r in gone)
    assert tapead.tape_stats()["nodes"] - base <= 2 * 2048   # (w's segment and the current one)
