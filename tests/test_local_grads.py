"""microgpt's way of adding an op: Value(data, children, local_grads), and
the _children / _local_grads every node has, against a plain-Python
reference autograd written here in microgpt's style (a node keeps its
children and their local gradients; backward() walks a topological order)."""
import gc
import math
import random
import threading

import pytest

import tapead
from tapead import Value

from conftest import on_fresh_tape, release_garbage


def _topo(root):
    """microgpt's topological order of root's graph, through _children."""
    topo, seen = [], set()

    def build(v):
        if v not in seen:
            seen.add(v)
            for c in v._children:
                build(c)
            topo.append(v)
    build(root)
    return topo


class Ref:
    """microgpt's Value: data, its children and their local gradients."""
    __slots__ = ("data", "grad", "_children", "_local_grads")

    def __init__(self, data, children=(), local_grads=()):
        self.data = data
        self.grad = 0
        self._children = children
        self._local_grads = local_grads

    def __add__(self, other):
        other = other if isinstance(other, Ref) else Ref(other)
        return Ref(self.data + other.data, (self, other), (1, 1))

    def __mul__(self, other):
        other = other if isinstance(other, Ref) else Ref(other)
        return Ref(self.data * other.data, (self, other), (other.data, self.data))

    def backward(self):
        topo = _topo(self)
        self.grad = 1
        for v in reversed(topo):
            for c, g in zip(v._children, v._local_grads):
                c.grad += g * v.grad


# New ops written microgpt's way, for both classes alike (V: Value or Ref).
def tanh(V, x):
    t = math.tanh(x.data)
    return V(t, (x,), (1 - t ** 2,))


def exp(V, x):
    e = math.exp(x.data)
    return V(e, (x,), (e,))


def wsum(V, xs, ws):
    """sum(w * x): one node of len(xs) children."""
    return V(sum(w * x.data for w, x in zip(ws, xs)), tuple(xs), tuple(ws))


def _graph(V, seed, nleaves=4, nops=30):
    """A random graph of built-in ops (+, *) and new ops (tanh, exp, wsum),
    the same for both classes given the same seed: (leaves, output)."""
    rnd = random.Random(seed)
    leaves = [V(rnd.uniform(-1, 1)) for _ in range(nleaves)]
    nodes = list(leaves)
    for _ in range(nops):
        k = rnd.randrange(5)
        a, b = rnd.choice(nodes), rnd.choice(nodes)
        if k == 0:
            r = a + b
        elif k == 1:
            r = a * b
        elif k == 2:
            r = tanh(V, a)
        elif k == 3:
            r = exp(V, a * 0.1)
        else:
            xs = rnd.sample(nodes, min(len(nodes), rnd.randint(1, 5)))
            r = wsum(V, xs, [rnd.uniform(-1, 1) for _ in xs])
        nodes.append(r)
    out = nodes[-1]
    for v in nodes[-6:-1]:
        out = out + v
    return leaves, out


def _same(a, b):
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-14)


def _check_against_reference(seed):
    tl, to = _graph(Value, seed)
    rl, ro = _graph(Ref, seed)
    to.backward()
    ro.backward()
    assert _same(to.data, ro.data)
    for t, r in zip(tl, rl):
        assert _same(t.grad, r.grad), (seed, t.grad, r.grad)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_the_reference(seed):
    _check_against_reference(seed)


def test_one_child_propagates():
    """microgpt's tanh: the node propagates its local gradient (it used to take
    the tuple as the op's name and propagate nothing)."""
    x = Value(0.5)
    t = math.tanh(x.data)
    y = Value(t, (x,), (1 - t ** 2,))
    (y * 3).backward()
    assert y.data == t
    assert x.grad == 3 * (1 - t ** 2)


def test_several_children_and_a_repeated_child():
    a, b = Value(2.0), Value(-3.0)
    c = Value(a.data * b.data, (a, b), (b.data, a.data))
    d = Value(c.data + a.data * a.data, [c, a, a], [1.0, a.data, a.data])
    d.backward()
    ra, rb = Ref(2.0), Ref(-3.0)
    rc = Ref(ra.data * rb.data, (ra, rb), (rb.data, ra.data))
    rd = Ref(rc.data + ra.data * ra.data, (rc, ra, ra), (1.0, ra.data, ra.data))
    rd.backward()
    assert (d.data, a.grad, b.grad) == (rd.data, ra.grad, rb.grad) == (-2.0, 1.0, 2.0)


def test_local_grads_as_a_keyword_and_with_a_name():
    x = Value(3.0)
    y = Value(9.0, (x,), local_grads=(6.0,))
    z = Value(9.0, (x,), "square", local_grads=[6.0])
    (y + z).backward()
    assert x.grad == 12.0
    assert z._op == "square" and y._op == ""
    with pytest.raises(TypeError, match="twice"):
        Value(9.0, (x,), (6.0,), local_grads=(6.0,))


def test_numbers_of_any_kind_and_any_sequence():
    np = pytest.importorskip("numpy")
    x, y = Value(1.0), Value(2.0)
    z = Value(0.0, (x, y), np.array([2.0, 3.0]))
    w = Value(0.0, iter([x]), (np.float32(0.5),))
    v = Value(0.0, (x,), [True])
    (z + w + v).backward()
    assert (x.grad, y.grad) == (2.0 + 0.5 + 1.0, 3.0)


def test_children_in_a_numpy_array():
    """A numpy object array of Values is children as a list is (it has no
    truth value; its length decides, as a list's does)."""
    np = pytest.importorskip("numpy")
    x, y = Value(1.0), Value(2.0)
    z = Value(0.5, np.array([x, y], dtype=object), (3.0, -4.0))
    (z * 2.0).backward()
    assert (z.data, x.grad, y.grad) == (0.5, 6.0, -8.0)
    assert [c.data for c in z._children] == [1.0, 2.0]
    e = Value(1.5, np.array([], dtype=object), ())
    assert (e.data, e._op, e._children) == (1.5, "", ())
    with pytest.raises(TypeError, match="children must be an iterable of Values"):
        Value(1.0, np.array(x, dtype=object), (1.0,))      # a 0-d array: no items to iterate


def test_micrograds_name_still_works():
    x = Value(2.0)
    out = Value(x.data ** 3, (x,), "cube")

    def _backward():
        x.grad += 3 * x.data ** 2 * out.grad
    out._backward = _backward
    out.backward()
    assert (out._op, x.grad) == ("cube", 12.0)


@pytest.mark.parametrize("third", [5, 2.5, object(), b"ab", {1: 2.0}, {1.0}, Value(1.0)],
                         ids=["int", "float", "object", "bytes", "dict", "set", "Value"])
def test_any_other_third_argument_is_a_type_error(third):
    x = Value(1.0)
    with pytest.raises(TypeError, match="op's name .* or the local gradients"):
        Value(2.0, (x,), third)
    x.grad = 0.0


def test_bad_local_grads_are_refused_and_change_nothing():
    x, y = Value(1.0), Value(2.0)
    before = tapead.tape_stats()["nodes"]
    with pytest.raises(ValueError, match="one local gradient per child: 2 children, 1"):
        Value(3.0, (x, y), (1.0,))
    with pytest.raises(ValueError, match="one local gradient per child: 1 children, 2"):
        Value(3.0, (x,), (1.0, 2.0))
    with pytest.raises(TypeError, match="local_grads must be real numbers"):
        Value(3.0, (x,), ("a",))
    with pytest.raises(TypeError, match="local_grads must be real numbers"):
        Value(3.0, (x,), (1 + 2j,))
    with pytest.raises(TypeError, match="each child must be a Value"):
        Value(3.0, (x, 2.0), (1.0, 1.0))
    with pytest.raises(TypeError, match="not a set"):
        Value(3.0, {x, y}, (1.0, 1.0))
    assert tapead.tape_stats()["nodes"] == before
    assert (x.data, x.grad, y.data, y.grad) == (1.0, 0.0, 2.0, 0.0)


def test_reinit_takes_the_new_node():
    x = Value(2.0)
    v = Value(1.0)
    v.__init__(4.0, (x,), (4.0,))
    v.backward()
    assert (v.data, x.grad) == (4.0, 4.0)


def test_no_children_is_a_leaf():
    v = Value(1.5, (), ())
    assert (v.data, v._op, v._children, v._local_grads) == (1.5, "", (), ())


def test_under_no_grad():
    x = Value(0.5)
    with tapead.no_grad():
        t = math.tanh(x.data)
        y = Value(t, (x,), (1 - t ** 2,))
    assert y.data == t
    assert y._children == () and y._local_grads == ()
    z = y * x          # y is a constant to the graph
    z.backward()
    assert x.grad == t


def test_in_threads():
    """Each thread records on its own tape: the same graphs give the
    reference's numbers in every thread at once."""
    errs = []

    def work(k):
        try:
            for seed in range(k * 10, k * 10 + 10):
                _check_against_reference(seed)
        except BaseException as e:   # noqa: BLE001 - reported below
            errs.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs[0]


def test_a_long_loop_keeps_memory_bounded():
    def run():
        w = [Value(0.1 * k) for k in range(4)]
        most = 0
        for step in range(3000):
            h = wsum(Value, w, [1.0, -1.0, 0.5, 2.0])
            loss = tanh(Value, h) * tanh(Value, w[0] * h)
            for p in w:
                p.grad = 0.0
            loss.backward()
            for p in w:
                p.data -= 0.01 * p.grad
            release_garbage(every=20_000)
            most = max(most, tapead.tape_stats()["nodes"])
        return most
    assert on_fresh_tape(run) < 30_000    # ~8 nodes a step: 24,000 if none were reclaimed


# ------------------------------------------------ _children, _local_grads
def test_children_and_local_grads_of_built_in_nodes():
    a, b = Value(2.0), Value(-3.0)
    ra, rb = Ref(2.0), Ref(-3.0)
    for t, r in ((a * b, ra * rb), (a + b, ra + rb)):
        assert t._local_grads == tuple(float(g) for g in r._local_grads)
        assert [c.data for c in t._children] == [c.data for c in r._children]
    m = a * a
    assert m._local_grads == (2.0, 2.0)
    assert m._children[0] is m._children[1]
    assert (a * 3)._local_grads == (3.0,)
    assert (a ** 3)._local_grads == (3 * 2.0 ** 2,)
    assert a.tanh()._local_grads == pytest.approx((1 - math.tanh(2.0) ** 2,), rel=1e-15)
    assert a._children == () and a._local_grads == ()


def test_children_and_local_grads_of_new_nodes():
    x, y = Value(1.0), Value(2.0)
    z = Value(5.0, (x, y, x), (0.5, 0.25, 2.0))
    assert z._local_grads == (0.5, 0.25, 2.0)
    assert [c.data for c in z._children] == [1.0, 2.0, 1.0]
    assert z._children[0] is z._children[2]
    p = tapead.precomputed(1.0, [y, x], [3.0, 4.0])
    assert p._local_grads == (3.0, 4.0) and [c.data for c in p._children] == [2.0, 1.0]


def test_a_micrograd_rule_node_has_no_local_grads():
    x = Value(1.0)
    out = Value(2.0, (x,), "double")
    assert [c.data for c in out._children] == [1.0]
    with pytest.raises(tapead.TapeadError, match="no local gradients"):
        out._local_grads


@pytest.mark.parametrize("seed", range(5))
def test_walking_children_and_local_grads_gives_backwards_grads(seed):
    """microgpt's backward, run over tapead's own _children and _local_grads,
    gives what backward() gives."""
    leaves, out = _graph(Value, seed)
    topo = _topo(out)
    grads = {out: 1.0}
    for v in reversed(topo):
        for c, g in zip(v._children, v._local_grads):
            grads[c] = grads.get(c, 0.0) + g * grads.get(v, 0.0)
    walked = [v for v in topo if not v._children]     # the Values the walk gave for the leaves
    assert walked and all(any(v.data == leaf.data for leaf in leaves) for v in walked)
    out.backward()
    for v in walked:
        assert _same(grads[v], v.grad)
    del topo, grads, walked
    gc.collect()


def test_replay_refuses_it_as_precomputed_nodes():
    """Its partials hold only at the recorded point: recompute and the other
    sweeps that run the tape at new points refuse it, naming it."""
    x = Value(0.5)
    y = Value(math.tanh(0.5), (x,), "mytanh", local_grads=(1 - math.tanh(0.5) ** 2,)) * 2
    with pytest.raises(tapead.TapeadError, match="'mytanh' .*local_grads"):
        y.recompute()
    with pytest.raises(tapead.TapeadError, match="'mytanh'"):
        tapead.grad(y, [x])
