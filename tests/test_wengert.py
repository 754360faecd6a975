"""tapead.wengert: the rows behind a Value, against the recorded ops
(read node by node through ta_node) and the textbook example by hand."""
import gc
import math
import subprocess
import sys
import os

import pytest

import tapead
from tapead import Value, wengert
from tapead._c import ffi, lib, OP_NAMES
from conftest import release_garbage, this_tapead

HERE = os.path.dirname(os.path.abspath(__file__))


def textbook():
    x1, x2 = Value(2.0, label="x1"), Value(5.0, label="x2")
    y = tapead.log(x1) + x1 * x2 - tapead.sin(x2)
    return x1, x2, y


def test_textbook_rows_by_hand():
    x1, x2, y = textbook()
    t = wengert(y, [x1, x2], [1.0, 0.0])
    v = {}
    v[-1], v[0] = 2.0, 5.0
    v[1] = math.log(v[-1])
    v[2] = v[-1] * v[0]
    v[3] = v[1] + v[2]
    v[4] = math.sin(v[0])
    v[5] = v[3] - v[4]
    d = {-1: 1.0, 0: 0.0}                     # tangents, seeded on x1
    d[1] = d[-1] / v[-1]
    d[2] = d[-1] * v[0] + v[-1] * d[0]
    d[3] = d[1] + d[2]
    d[4] = math.cos(v[0]) * d[0]
    d[5] = d[3] - d[4]
    a = {5: 1.0}                              # adjoints
    a[4] = -a[5]; a[3] = a[5]
    a[2] = a[3]; a[1] = a[3]
    a[0] = v[-1] * a[2] + math.cos(v[0]) * a[4]
    a[-1] = a[1] / v[-1] + v[0] * a[2]
    expect = [("v-1", "leaf", (), "x1"), ("v0", "leaf", (), "x2"), ("v1", "log", (0,), ""),
              ("v2", "*", (0, 1), ""), ("v3", "+", (2, 3), ""), ("v4", "sin", (1,), ""),
              ("v5", "-", (4, 5), "")]
    assert len(t) == 7
    for k, (row, (name, op, args, label)) in enumerate(zip(t.rows, expect)):
        j = k - 1
        assert (row["index"], row["name"], row["op"], row["args"], row["label"]) == \
            (k, name, op, args, label)
        assert row["value"] == pytest.approx(v[j], rel=1e-15, abs=1e-15)
        assert row["tangent"] == pytest.approx(d[j], rel=1e-15, abs=1e-15)
        assert row["adjoint"] == pytest.approx(a[j], rel=1e-15, abs=1e-15)
    assert round(t.rows[-1]["value"], 3) == 11.652
    assert t.rows[-1]["tangent"] == 5.5
    assert t.rows[0]["adjoint"] == 5.5 and round(t.rows[1]["adjoint"], 3) == 1.716


EXAMPLE = os.path.join(HERE, "..", "examples", "wengert.py")


@pytest.mark.skipif(not os.path.isfile(EXAMPLE), reason="needs the source tree (examples/)")
def test_textbook_example_script():
    out = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, check=True,
                         env=this_tapead()).stdout
    assert "y       = 11.652" in out
    assert "dy/dx1  = 5.500" in out
    assert "dy/dx1 = 5.500, dy/dx2 = 1.716" in out
    assert "v-1" in out and "x1" in out and "sin(v0)" in out


def node(i):
    op, x, y, c = ffi.new("int *"), ffi.new("int64_t *"), ffi.new("int64_t *"), ffi.new("double *")
    assert lib.ta_node(i, op, x, y, c) == 0
    return op[0], x[0], y[0], c[0]


def reachable(root):
    """Node ids behind root, by a plain Python walk over ta_node (the reference)."""
    seen, stack = set(), [root]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        _, x, y, _ = node(i)
        stack += [j for j in (x, y) if j >= 0]
    return seen


def test_rows_equal_recorded_ops_in_order():
    a, b = Value(1.5, label="a"), Value(-0.25)
    made = [a, b]
    unrelated = []
    s = a
    for k in range(3000):                       # spans more than one segment
        s = (s * b + 0.5).tanh() if k % 2 else s - b.sin() * 0.1
        made.append(s)
        unrelated.append(a * 3.0)               # recorded, but not behind s
    out = tapead.maximum(s, 2.0 - s) ** 2
    t = wengert(out)
    ids = [r["node"] for r in t.rows]
    assert set(ids) == reachable(out._i)
    assert len(ids) == len(set(ids))
    # tape order: every argument row comes before its user; recording order preserved
    pos = {i: k for k, i in enumerate(ids)}
    rec = [v._i for v in made if v._i in pos]
    assert [pos[i] for i in rec] == sorted(pos[i] for i in rec)
    assert ids[-1] == out._i
    for r in t.rows:
        op, x, y, c = node(r["node"])
        assert r["op"] == OP_NAMES[op]
        assert r["args"] == tuple(pos[j] for j in (x, y) if j >= 0)
        assert all(j < r["index"] for j in r["args"])
        if r["const"] is not None:
            assert r["const"] == c
        assert r["value"] == lib.ta_val(r["node"])
    assert t.rows[0]["label"] == "a" and t.rows[0]["name"].startswith("v")


def test_adjoints_equal_backward_and_leave_grads_alone():
    x, y = Value(0.8), Value(-1.3)
    z = (x * y).sin() + x ** 3 / (y * y + 1.0) - tapead.exp(y) * 2.0
    x.grad, y.grad = 10.0, 20.0
    t = wengert(z)
    assert (x.grad, y.grad) == (10.0, 20.0)
    x.grad = y.grad = 0.0
    z.backward()
    by_id = {r["node"]: r["adjoint"] for r in t.rows}
    assert by_id[x._i] == pytest.approx(x.grad, rel=1e-14)
    assert by_id[y._i] == pytest.approx(y.grad, rel=1e-14)
    assert "tangent" not in t.rows[0]
    t2 = wengert(z, adjoints=False)
    assert "adjoint" not in t2.rows[0] and t2.format().splitlines()[0].split()[-1] == "value"


def test_tangent_column_equals_jvp():
    x, y = Value(0.3), Value(0.9)
    mid = x * y
    z = mid.tanh() + y.cos()
    t = wengert(z, [x, y], [2.0, -1.0])
    by_id = {r["node"]: r["tangent"] for r in t.rows}
    assert by_id[z._i] == tapead.jvp(z, [x, y], [2.0, -1.0])
    assert by_id[mid._i] == tapead.jvp(mid, [x, y], [2.0, -1.0])


def test_constants_and_names():
    x = Value(3.0, label="x")
    c = Value(4.0)                              # an unlabelled leaf
    z = (2.0 - x) * c / 5.0 + 2 ** x
    t = wengert(z)
    names = [r["name"] for r in t.rows]
    leaves = [r for r in t.rows if r["op"] == "leaf"]
    assert [r["name"] for r in leaves] == ["v-1", "v0"]
    assert [r["expr"] for r in leaves] == ["x", "input"]
    assert names[len(leaves):] == [f"v{k}" for k in range(1, len(t) - 1)]
    exprs = [r["expr"] for r in t.rows]
    assert "2.0 - v-1" in exprs and "2.0 ** v-1" in exprs
    assert t.rows[-1]["value"] == pytest.approx((2.0 - 3.0) * 4.0 / 5.0 + 8.0)


def test_str_is_aligned_table():
    x1, x2, y = textbook()
    s = str(wengert(y, [x1, x2], [1.0, 0.0]))
    lines = s.splitlines()
    assert lines[0].split() == ["row", "label", "op", "expression", "value", "tangent", "adjoint"]
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 2 + 7
    # numeric columns are right-aligned: every row ends at the same column
    assert len({len(line) for line in lines[2:]}) == 1
    assert lines[2].split()[:3] == ["v-1", "x1", "leaf"]
    assert "11.6521" in lines[-1]
    cols = wengert(y).columns
    assert cols["name"] == ["v-1", "v0", "v1", "v2", "v3", "v4", "v5"]
    assert repr(wengert(y)).startswith("<Wengert list: 7 rows>")


def test_html_for_jupyter_is_the_same_table():
    """_repr_html_ (what Jupyter shows) holds the plain-text table's header
    and cells, escaped."""
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data
    x1, x2, y = textbook()
    x1.label = "<x1 & co>"
    t = wengert(y, [x1, x2], [1.0, 0.0])
    html = t._repr_html_()
    assert "<x1 &" not in html and "&lt;x1 &amp; co&gt;" in html
    p = Cells()
    p.feed(html)
    text = [line.split("  ") for line in str(t).splitlines()]
    assert p.rows[0] == ["row", "label", "op", "expression", "value", "tangent", "adjoint"]
    assert len(p.rows) == len(t) + 1
    for cells, r in zip(p.rows[1:], t.rows):
        assert cells[:4] == [r["name"], r["label"], r["op"], r["expr"]]
        assert [float(c) for c in cells[4:]] == pytest.approx([r["value"], r["tangent"], r["adjoint"]],
                                                              rel=1e-5)
    assert p.rows[1][1] == "<x1 & co>" and len(text) == len(p.rows) + 1


def test_labels_follow_the_value():
    x = Value(1.0, label="x1")
    assert x.label == "x1" and tapead.get_label(x) == "x1"
    x.label = "renamed"
    assert x.label == "renamed"
    x.label = ""
    assert x.label == ""
    y = Value(2.0)
    assert y.label == ""
    tapead.set_label(y, "y")
    z = y * 2.0
    assert wengert(z).rows[0]["label"] == "y"
    assert z.label == ""
    del y
    gc.collect()
    # z still holds the leaf node: the label lives with the node, not the Value
    assert wengert(z).rows[0]["label"] == "y"
    (leaf,) = z._prev
    assert leaf.label == "y"


def test_label_not_inherited_by_a_reused_node_id():
    N = sys.modules["tapead.nodedata"]
    v = Value(1.0, label="old")
    v.mine = "old"
    key = v._i
    del v
    # fill the rest of v's segment with garbage, so the tape's current
    # segment moves on and v's can be reclaimed whole
    filler = [Value(0.0) for _ in range(2 << lib.TA_SHIFT)]
    del filler
    release_garbage()
    gc.collect()
    tapead.collect()
    # Freed slots are handed out last-freed first, and on PyPy the first
    # collection here frees earlier tests' garbage along with v's segment:
    # keep every new Value, so each round takes slots deeper in that list
    # until a new node gets the old node's id.
    kept, reused = [], []
    for _ in range(100):
        fresh = [Value(float(k)) for k in range(5000)]
        assert all(f.label == "" and not hasattr(f, "mine") for f in fresh)
        reused = [f for f in fresh if f._i == key]
        kept.append(fresh)
        if reused:
            break
    assert reused, "the test needs the old node's id to be given to a new node"
    assert N.entry(key) is None


def test_wengert_errors():
    x = Value(1.0)
    with pytest.raises(ValueError):
        wengert(x * 2.0, [x], None)
    with pytest.raises(TypeError):
        wengert(3.0)
    with pytest.raises(TypeError):
        tapead.set_label(3.0, "x")
