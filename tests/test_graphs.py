"""Random expression graphs (hypothesis) run through micrograd and tapead:
every node's value and gradient must agree to 1e-12, relative to the scale
of the terms that produced it.

micrograd divides as a * b**-1 and computes tanh from exp; tapead divides
directly and calls tanh.  Both round differently by an ulp or so, and a
later subtraction can cancel most of the result, so "1e-12 relative" is
measured against an error scale carried along the graph (the usual
forward error bound: the sum of magnitudes of the terms combined), not
against a result that cancellation may have made tiny."""

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MG
from opcases import FORMS
from tapead import Value

REL = 1e-12
# and an absolute slack, negligible at every scale the graphs mean: among subnormals one
# rounding is 5e-324 whatever the scale (a / b and micrograd's a * b**-1 differ
# there by one such step, a relative error of 3e-10 at 1.5e-314)
TINY = 1e-300
# constants: c of a constant op, and the exponent of x ** c
CONSTS = [2.0, -1.5, 0.5, 3.0, -0.25, 1.0, 2, 3, -1, -2, 1.5]
# every spelling in the op cases that micrograd has, with its error scale
OPS = sorted(n for n, f in FORMS.items() if f.mg is not None and f.bound is not None)
EXACT = sorted(n for n in OPS if FORMS[n].exact)

leaf = st.floats(-3, 3, allow_nan=False, allow_infinity=False)
instr = st.tuples(st.sampled_from(OPS), st.integers(0, 10**6), st.integers(0, 10**6),
                  st.integers(0, len(CONSTS) - 1))


def build(leaves, program, max_uses=None):
    """Returns nodes: list of dicts with mg, ta, val, mag, ins [(idx, partial mag)].

    max_uses: skip an instruction that would give a node more users than this."""
    nodes = []
    uses = {}
    for x in leaves:
        nodes.append(dict(mg=MG(x), ta=Value(x), val=x, mag=abs(x), ins=[]))
    for op, i, j, k in program:
        f = FORMS[op]
        a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
        ia, ib = i % len(nodes), j % len(nodes)
        x, y, mx, my, c = a["val"], b["val"], a["mag"], b["mag"], CONSTS[k]
        unary = f.nargs == 1
        if max_uses is not None:
            if uses.get(ia, 0) + 1 + (ia == ib and not unary) > max_uses or \
                    (not unary and ia != ib and uses.get(ib, 0) + 1 > max_uses):
                continue
        bound = f.bound(x, y, c, mx, my)
        if bound is None:
            continue
        mag, pm = bound
        mg, ta = f.mg(a["mg"], b["mg"], c), f.ta(a["ta"], b["ta"], c)
        ins = list(zip((ia, ib), pm))
        v = mg.data
        if not abs(v) < 1e8 or mag > 1e10:
            continue
        nodes.append(dict(mg=mg, ta=ta, val=v, mag=mag, ins=ins))
        for i, _ in ins:
            uses[i] = uses.get(i, 0) + 1
    return nodes


def grad_scales(nodes):
    gm = [0.0] * len(nodes)
    gm[-1] = 1.0
    for k in range(len(nodes) - 1, -1, -1):
        for i, pm in nodes[k]["ins"]:
            gm[i] += pm * gm[k]
    return gm


@settings(max_examples=200, deadline=None)
@given(st.lists(leaf, min_size=1, max_size=4), st.lists(instr, min_size=1, max_size=30))
def test_random_graphs_match_micrograd(leaves, program):
    nodes = build(leaves, program)
    root = nodes[-1]
    root["mg"].backward()
    root["ta"].backward()
    gm = grad_scales(nodes)
    for k, nd in enumerate(nodes):
        mv, tv = nd["mg"].data, nd["ta"].data
        assert abs(mv - tv) <= REL * max(abs(mv), nd["mag"]) + TINY, (k, mv, tv)
        mgr, tgr = nd["mg"].grad, nd["ta"].grad
        assert abs(mgr - tgr) <= REL * max(abs(mgr), gm[k]) + TINY, (k, mgr, tgr, gm[k])


@settings(max_examples=150, deadline=None)
@given(st.lists(leaf, min_size=2, max_size=5),
       st.lists(st.tuples(st.sampled_from(EXACT),
                          st.integers(0, 10**6), st.integers(0, 10**6),
                          st.integers(0, len(CONSTS) - 1)),
                min_size=1, max_size=30))
def test_graphs_without_division_match_micrograd_exactly(leaves, program):
    """+, -, *, relu and constants (the spellings flagged exact) round
    identically in both, so values are ==;
    adjoints are == too where no node has more than two users (with three
    or more, the two sweeps may sum the contributions in different orders)."""
    nodes = build(leaves, program, max_uses=2)
    nodes[-1]["mg"].backward()
    nodes[-1]["ta"].backward()
    for nd in nodes:
        assert nd["ta"].data == nd["mg"].data
        assert nd["ta"].grad == nd["mg"].grad


# ---------------------------------------------- micrograd's graph attributes
def trace(root):
    """micrograd's trace_graph notebook: every node and edge reachable through
    _prev, with a set of visited Values (so it relies on one object per node)."""
    nodes, edges = set(), set()

    def walk(v):
        if v not in nodes:
            nodes.add(v)
            for child in v._prev:
                edges.add((child, v))
                walk(child)
    walk(root)
    return nodes, edges


def test_trace_graph_notebook_walks_the_tape():
    x = Value(1.0)
    y = (x * 2 + 1).relu()
    y.backward()
    nodes, edges = trace(y)
    # constants are part of their op on the tape: x, x*2, +1, relu
    assert sorted(n._op for n in nodes) == ["", "*2", "+1", "ReLU"]
    assert len(edges) == 3
    leaf, = [n for n in nodes if not n._op]
    assert (leaf.data, leaf.grad) == (1.0, 2.0)
    graphviz = __import__("pytest").importorskip("graphviz")
    dot = graphviz.Digraph(format="svg", graph_attr={"rankdir": "LR"})
    for n in nodes:                      # the notebook's draw_dot, verbatim in substance
        dot.node(name=str(id(n)), label="{ data %.4f | grad %.4f }" % (n.data, n.grad), shape="record")
        if n._op:
            dot.node(name=str(id(n)) + n._op, label=n._op)
            dot.edge(str(id(n)) + n._op, str(id(n)))
    for n1, n2 in edges:
        dot.edge(str(id(n1)), str(id(n2)) + n2._op)
    assert dot.source.count("->") == 3 + 3 and "grad 2.0000" in dot.source


@settings(max_examples=60, deadline=None)
@given(st.lists(leaf, min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from(["add", "mul", "relu"]), st.integers(0, 10**6),
                          st.integers(0, 10**6)), min_size=1, max_size=25))
def test_prev_and_op_give_micrographs_graph(leaves, program):
    """With no constants (which micrograd makes leaves of), micrograd and
    tapead give the same graph through _prev/_op: same nodes, ops and edges."""
    def run(V):
        vs = [V(x) for x in leaves]
        for op, i, j in program:
            a, b = vs[i % len(vs)], vs[j % len(vs)]
            vs.append(a + b if op == "add" else a * b if op == "mul" else a.relu())
        return vs[-1]

    def shape(root):
        nodes, edges = trace(root)
        ops = {"": "", "+": "+", "*": "*", "ReLU": "ReLU"}
        return (sorted(ops[n._op] for n in nodes),
                sorted((c._op, round(c.data, 9), p._op, round(p.data, 9)) for c, p in edges))
    assert shape(run(Value)) == shape(run(MG))


def test_prev_gives_one_object_per_node_so_shared_graphs_stay_linear():
    x = Value(1.5)
    v = x
    for _ in range(40):                  # 2**40 paths, 41 nodes
        v = v * v
    nodes, edges = trace(v)
    assert len(nodes) == 41 and len(edges) == 40
    n = next(iter(v._prev))
    assert next(iter(v._prev)) is n      # asked again: the same object


def test_no_grad_values_are_leaves_to_prev():
    import tapead
    x = Value(2.0)
    with tapead.no_grad():
        y = x * 3
    assert y._prev == set() and y._op == ""
