"""New ops: micrograd's idiom (Value(data, _children, _op) + out._backward),
tapead.precomputed, and v._backward() on built-in nodes (the lecture's
manual backprop).  Checked against micrograd itself, closed forms and
finite differences, on whichever front the suite runs."""
import gc
import math
import platform
import random
import sys
import threading

import pytest
from micrograd.engine import Value as MGValue

import tapead
from tapead import Value
from tapead import custom as _custom
from tapead import custom as C
from tapead._c import lib

from conftest import REFCOUNTED, collect_all, on_fresh_tape, release_garbage
from opcases import FORMS

SEG = 1 << lib.TA_SHIFT


def ext(base):
    """A Value subclass adding softplus, cube and a three-input fma, written
    exactly as micrograd's own ops are."""
    class ValueExt(base):
        def softplus(self):
            out = ValueExt(math.log1p(math.exp(self.data)), (self,), 'softplus')

            def _backward():
                self.grad += out.grad / (1 + math.exp(-self.data))
            out._backward = _backward
            return out

        def cube(self):
            out = ValueExt(self.data ** 3, (self,), 'cube')

            def _backward():
                self.grad += 3 * self.data ** 2 * out.grad
            out._backward = _backward
            return out

        def fma(self, b, c):   # self * b + c
            out = ValueExt(self.data * b.data + c.data, (self, b, c), 'fma')

            def _backward():
                self.grad += b.data * out.grad
                b.grad += self.data * out.grad
                c.grad += out.grad
            out._backward = _backward
            return out
    return ValueExt


TExt, MExt = ext(Value), ext(MGValue)


def program(V, xs):
    """The same program on either library; returns (output, leaves)."""
    a, b, c = (V(x) for x in xs)
    t = V(0.0) + a * b          # an intermediate (results of built-in ops are the base class)...
    u = V(t.data, (t,), 'id')   # ...made a custom node's child too

    def _backward():
        t.grad += u.grad
    u._backward = _backward
    f = a.fma(b, c)
    y = a.softplus().cube() * f + u * t + c.softplus()
    return y, (a, b, c)


@pytest.mark.parametrize("xs", [(0.5, -1.5, 2.0), (-2.0, 0.25, -0.75), (1.0, 1.0, 1.0)])
def test_micrograd_custom_ops_give_micrograds_values_and_grads(xs):
    yt, lt = program(TExt, xs)
    ym, lm = program(MExt, xs)
    yt.backward()
    ym.backward()
    assert yt.data == pytest.approx(ym.data, rel=1e-14)
    for p, q in zip(lt, lm):
        assert p.grad == pytest.approx(q.grad, rel=1e-12, abs=1e-14)


def test_custom_ops_match_finite_differences():
    def f(a, b, c):
        y, leaves = program(TExt, (a, b, c))
        return y, leaves
    x0 = [0.3, -0.7, 1.1]
    y, leaves = f(*x0)
    y.backward()
    h = 1e-6
    for k in range(3):
        up = list(x0); up[k] += h
        dn = list(x0); dn[k] -= h
        fd = (f(*up)[0].data - f(*dn)[0].data) / (2 * h)
        assert leaves[k].grad == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_a_custom_node_without_backward_propagates_nothing_as_micrograd():
    for V in (Value, MGValue):
        x = V(2.0)
        y = V(x.data * 3, (x,), 'noop') * 2 + x
        y.backward()
        assert x.grad == 1.0


def test_child_reached_through_custom_node_and_other_paths():
    """t is reached by the custom node's rule and by ordinary nodes: the
    rule's t.grad += ... lands in this pass's adjoint, whatever the order."""
    def run(V):
        x = V(1.5)
        t = x * x                       # intermediate, reached twice
        c = V(t.data * 2, (t,), 'dbl')

        def _backward():
            t.grad += 2 * c.grad
        c._backward = _backward
        y = c * t + t
        y.backward()
        return x.grad, t.grad, y.data
    assert run(Value) == pytest.approx(run(MGValue), rel=1e-15)
    # backward again: leaves accumulate, intermediates hold this pass's adjoint
    x = Value(1.5); t = x * x
    c = Value(t.data * 2, (t,), 'dbl')

    def _backward():
        t.grad += 2 * c.grad
    c._backward = _backward
    y = c * t + t
    y.backward(); g1, tg1 = x.grad, t.grad
    y.backward()
    assert (x.grad, t.grad) == (2 * g1, tg1)
    assert tg1 == 4 * t.data + 1        # d/dt (2t * t + t)


def test_a_custom_node_only_the_rule_reaches():
    """The child of the custom node is an intermediate nothing else uses: it
    is reached only through the Python rule's write, and must still be swept."""
    x = Value(0.7)
    w = x.tanh()                         # reached only via the custom node
    c = Value(w.data ** 3, (w,), 'cube')

    def _backward():
        w.grad += 3 * w.data ** 2 * c.grad
    c._backward = _backward
    c.backward()
    th = math.tanh(0.7)
    assert x.grad == pytest.approx(3 * th ** 2 * (1 - th ** 2), rel=1e-14)


def test_an_error_in_backward_propagates_and_leaves_the_tape_unchanged():
    x = Value(2.0)
    ok = x * 3
    boom = Value(1.0, (x, ok), 'boom')

    def _backward():
        raise KeyError("from the rule")
    boom._backward = _backward
    y = boom * 2 + ok
    nodes = tapead.tape_stats()["nodes"]
    with pytest.raises(KeyError, match="from the rule"):
        y.backward()
    assert lib.ta_validate() == 0          # no stray marks, invariants hold
    assert tapead.tape_stats()["nodes"] == nodes
    assert (x.data, ok.data, y.data) == (2.0, 6.0, 8.0)
    boom._backward = lambda: None          # fixed: backward works again
    x.grad = 0.0
    y.backward()
    assert x.grad == 3.0


def test_the_function_that_sets_a_rule_keeps_its_own_values():
    """The rule kept is a private copy: the function the user wrote, and the
    frame that made it, still see their Values (not the copy's), and cells
    holding anything else stay shared with the rule."""
    x = Value(1.5)
    seen = {}

    def double(x):
        out = Value(2 * x.data, (x,), 'double')
        runs = 0

        def _backward():
            nonlocal runs
            runs += 1
            x.grad += 2 * out.grad
        out._backward = _backward
        seen['out'] = out                        # the frame's own `out`, after the rule is set
        y = out * 1.0                            # and it still records
        return y, _backward, lambda: runs
    y, fn, runs = double(x)
    assert seen['out'] is not None and type(seen['out']) is Value and seen['out'].data == 3.0
    assert any(c.cell_contents is seen['out'] for c in fn.__closure__)   # the user's function: untouched
    y.backward()
    assert (x.grad, runs()) == (2.0, 1)         # the rule's nonlocal counter is the frame's
    fn()                                        # the user's own function, run by hand, as in micrograd
    assert (x.grad, runs()) == (2.0 + 2 * seen['out'].grad, 2)


def _rule_shapes(x, y):
    """out = x * y made micrograd's way, its rule holding the graph's Values
    in the shapes a user writes: closure cells, defaults, keyword-only
    defaults, a list, a dict, functools.partial, a bound method, a callable
    object, a helper closure.  Returns (out, the rule)."""
    import functools

    def prod():
        return Value(x.data * y.data, (x, y), 'mul')

    def cells():             # self, other, out: micrograd's own shape
        out = prod()

        def _backward():
            x.grad += y.data * out.grad
            y.grad += x.data * out.grad
        return out, _backward

    def defaults():
        out = prod()

        def _backward(x=x, y=y, out=out):
            x.grad += y.data * out.grad
            y.grad += x.data * out.grad
        return out, _backward

    def kwonly():
        out = prod()

        def _backward(*, xs=(x, y), o=out):
            xs[0].grad += xs[1].data * o.grad
            xs[1].grad += xs[0].data * o.grad
        return out, _backward

    def in_a_list():
        out = prod()
        box = [x, y, out]

        def _backward():
            box[0].grad += box[1].data * box[2].grad
            box[1].grad += box[0].data * box[2].grad
        return out, _backward

    def in_a_dict():
        out = prod()
        d = {out: (x, y)}                        # a Value as a key: the user's own object

        def _backward():
            (a, b), = d.values()
            assert out in d and d[out] == (x, y)
            a.grad += b.data * out.grad
            b.grad += a.data * out.grad
        return out, _backward

    def partial():
        out = prod()

        def step(a, b, o):
            a.grad += b.data * o.grad
            b.grad += a.data * o.grad
        return out, functools.partial(step, x, y, out)

    class Op:
        def __init__(self, a, b):
            self.a, self.b = a, b
            self.out = Value(a.data * b.data, (a, b), 'mul')

        def backward(self):
            self.a.grad += self.b.data * self.out.grad
            self.b.grad += self.a.data * self.out.grad

        __call__ = backward

    def bound():
        op = Op(x, y)
        return op.out, op.backward

    def callable_object():
        op = Op(x, y)
        return op.out, op

    def helper():
        out = prod()

        def make():
            def _backward():
                x.grad += y.data * out.grad
                y.grad += x.data * out.grad
            return _backward
        return out, make()
    return cells, defaults, kwonly, in_a_list, in_a_dict, partial, bound, callable_object, helper


@pytest.mark.parametrize("shape", range(9))
def test_every_shape_of_rule_is_the_users_own_and_its_graph_is_freed(shape):
    """The rule kept is the user's own object,
    holding the user's own Values (nothing copied, nothing released), in
    any shape; its gradients are micrograd's; and once the program drops the
    graph, the collector frees it all: rule, Values and tape segments."""
    import weakref
    x, y = Value(1.5), Value(-2.0)
    out, rule = _rule_shapes(x, y)[shape]()
    out._backward = rule
    assert C._owner(_custom.info(out)[2]).rule is rule
    (out * out).backward()                               # d(out^2) = 2 out d(out)
    assert (x.grad, y.grad) == (2 * -3.0 * -2.0, 2 * -3.0 * 1.5)
    out._backward()                                      # run by hand too: out.grad is 2 out
    assert (x.grad, y.grad) == (2 * (2 * -3.0 * -2.0), 2 * (2 * -3.0 * 1.5))
    gone = weakref.ref(out)
    del out, rule
    gc.collect()
    assert gone() is None and C.live_owners() == 0


def test_values_a_rule_captures_are_kept_alive_and_released():
    """A rule may capture Values that are not its inputs (earlier ones are
    kept alive with the node); nothing stays pinned once all is dropped."""
    def run():
        base = tapead.tape_stats()["nodes"]
        for _ in range(3):
            x = Value(2.0)

            def scaled(x):
                scale = x * 10                # captured, not an input
                c = Value(x.data, (x,), 'scaled')

                def _backward():
                    x.grad += scale.data * c.grad
                c._backward = _backward
                return c
            c = scaled(x)
            y = c * 1.0
            for _ in range(2050):             # fill a segment, so the collector can free it
                Value(0.0)
            collect_all()                     # `scale` has no other holder now: kept by c
            y.backward()
            assert x.grad == 20.0
            del x, c, y
        collect_all()
        return tapead.tape_stats()["nodes"] - base, C.live_owners()
    grown, recs = on_fresh_tape(run)
    assert grown <= 2048 and recs == 0


def test_calls_that_cannot_run_inside_a_rule_refuse():
    x = Value(2.0)
    other = x * 5
    seen = []
    c = Value(x.data, (x,), 'peek')

    def _backward():
        with pytest.raises(tapead.TapeadError, match="inside a custom node"):
            other.backward()
        with pytest.raises(tapead.TapeadError, match="inside a custom node"):
            other.recompute()
        seen.append(tapead.collect())       # the collector waits: nothing freed mid-sweep
        seen.append((x * 2).data)           # recording is fine
        x.grad += c.grad
    c._backward = _backward
    (c * 3).backward()
    assert x.grad == 3.0 and seen == [0, 4.0]


def refusals(y, leaves):
    x = leaves[0]
    return {
        "recompute": lambda: y.recompute(),
        "compile": lambda: tapead.compile([y], [x]),
        "jvp": lambda: tapead.jvp(y, [x], [1.0]),
        "grad": lambda: tapead.grad([y], [x]),
        "grad(create_graph)": lambda: tapead.grad([y], [x], create_graph=True),
        "hvp": lambda: tapead.hvp(y, [x], [1.0]),
        "hessian": lambda: tapead.hessian(y, [x]),
        "jacobian": lambda: tapead.jacobian([y], [x]),
        "wengert": lambda: tapead.wengert(y, [x], [1.0]),
    }


@pytest.mark.parametrize("kind", ["rule", "partials"])
def test_replay_and_higher_order_refuse_naming_the_op(kind):
    x = Value(0.4)
    sig = 1 / (1 + math.exp(-x.data))
    if kind == "rule":
        s = x.sigmoid()
        sp = Value(math.log1p(math.exp(x.data)), (x,), 'softplus')
        sp._backward = lambda: None
    else:
        sp = tapead.precomputed(math.log1p(math.exp(x.data)), [x], [sig], name='softplus')
        s = x
    y = sp * 2 + s
    before = tapead.tape_stats()["nodes"]
    for what, call in refusals(y, [x]).items():
        with pytest.raises(tapead.TapeadError, match="'softplus'.*built-in ops") as e:
            call()
        assert "backward() can" in str(e.value), what
    assert tapead.tape_stats()["nodes"] == before and lib.ta_validate() == 0
    # the same program with built-in ops replays
    z = (1 + x.exp()).log() * 2 + s
    ds = sig * (1 - sig) if kind == "rule" else 1.0
    assert tapead.grad([z], [x])[0] == pytest.approx(2 * sig + ds, rel=1e-14)


def test_graphs_without_custom_nodes_still_replay_beside_one():
    x = Value(0.5)
    sp = Value(1.0, (x,), 'c')
    sp._backward = lambda: None
    y = x * x + 1                      # does not depend on the custom node
    y.recompute()
    assert tapead.grad([y], [x])[0] == 1.0
    assert tapead.hvp(y, [x], [1.0])[0] == 2.0
    del sp


def test_lecture_manual_backprop_gives_backward_results():
    """micrograd's lecture: L = ((a*b) + c) * f, then tanh neuron, by hand."""
    def build(V):
        a, b, c, f = V(2.0), V(-3.0), V(10.0), V(-2.0)
        e = a * b; d = e + c; L = d * f
        return [a, b, c, f], [L, d, e]
    for V in (Value, MGValue):
        leaves, order = build(V)
        order[0].grad = 1.0
        for n in order:
            n._backward()
        man = [v.grad for v in leaves]
        leaves2, order2 = build(V)
        order2[0].backward()
        assert man == [v.grad for v in leaves2] == [6.0, -4.0, -2.0, 4.0]


def neuron(V):
    x1, x2, w1, w2, b = V(2.0), V(0.0), V(-3.0), V(1.0), V(6.8813735870195432)
    n = x1 * w1 + x2 * w2 + b
    e = (2 * n).exp() if hasattr(V, "exp") else None
    o = n.tanh()
    return [x1, x2, w1, w2, b], o, e


def topo(root):
    """The lecture's build_topo, through _prev."""
    out, seen = [], set()

    def build(v):
        if v not in seen:
            seen.add(v)
            for c in v._prev:
                build(c)
            out.append(v)
    build(root)
    return out


@pytest.mark.parametrize("ops", ["builtin", "mixed"])
def test_hand_run_topological_backprop_equals_backward(ops):
    """Every node's _backward in reverse topological order (found through
    _prev, as the lecture does) gives backward()'s gradients."""
    def build():
        x = Value(0.8); w = Value(-1.3); b = Value(0.4)
        h = x * w + b
        if ops == "mixed":
            h = TExt(h.data, (h,), 'id')
            inner = h._prev
            assert len(inner) == 1
            src = next(iter(inner))

            def _backward():
                src.grad += h.grad
            h._backward = _backward
            h = h.softplus()
        y = (h.tanh() * x + w ** 2).relu() + h.sigmoid() / (1 + x * x)
        return y, (x, w, b)
    y, leaves = build()
    order = topo(y)
    y.grad = 1.0
    for v in reversed(order):
        v._backward()
    manual = [v.grad for v in leaves]
    y2, leaves2 = build()
    y2.backward()
    assert manual == pytest.approx([v.grad for v in leaves2], rel=1e-14)


def test_backward_of_builtin_uses_the_same_partials_as_the_sweep():
    """Every spelling in the op cases: its node's _backward() gives the
    inputs what backward() does."""
    random.seed(5)
    for name, f in sorted(FORMS.items()):
        for c in (2.0, 3.5):
            a, b = Value(random.uniform(0.5, 2)), Value(random.uniform(0.5, 2))
            y = f.ta(a, b, c)
            y.grad = 1.0
            y._backward()
            ga, gb = a.grad, b.grad
            a.grad = b.grad = 0.0
            y.backward()
            assert (ga, gb) == (a.grad, b.grad), (name, c)


def test_setting_backward_on_a_builtin_or_bad_children_is_refused():
    x = Value(1.0)
    y = x * 2
    with pytest.raises(AttributeError, match="built-in op"):
        y._backward = lambda: None
    with pytest.raises(TypeError, match="callable"):
        Value(1.0, (x,), 'c')._backward = 3
    with pytest.raises(TypeError, match="must be a Value"):
        Value(1.0, (x, 2.0), 'c')
    nodes = tapead.tape_stats()["nodes"]
    with pytest.raises(TypeError, match="must be a Value"):
        Value(1.0, (x, "no"), 'c')
    assert tapead.tape_stats()["nodes"] == nodes
    leaf = Value(3.0, (), 'in')        # no children: a leaf, as before
    leaf._backward = lambda: None      # accepted (micrograd would call it; nothing to do)
    assert leaf._op == '' and leaf._prev == set()
    assert callable(x._backward) and x._backward() is None


def test_custom_node_prev_op_and_repr():
    a, b = Value(1.0, label='a'), Value(2.0)
    c = Value(3.0, (a, b, a), 'fma', label='c')
    assert c._op == 'fma'
    assert {v.data for v in c._prev} == {1.0, 2.0} and len(c._prev) == 2
    assert repr(c) == "Value(data=3.0, grad=0.0)"
    assert c.label == 'c'


def test_to_dot_draws_a_graph_with_custom_nodes():
    a = Value(1.0, label='a')
    c = Value(3.0, (a, a * 2), 'fma', label='c')
    src = tapead.to_dot(c * 2)
    assert "fma" in src and "| data 3.0000 |" in src and src.count("->") == 7


def test_precomputed_gives_closed_form_grads_and_a_c_only_sweep():
    x, y = Value(3.0), Value(4.0)
    r = math.hypot(3.0, 4.0)
    h = tapead.precomputed(r, [x, y], [x.data / r, y.data / r], name="hypot")
    z = h * h + x
    z.backward()
    assert (h.data, h._op) == (5.0, "hypot")
    assert (x.grad, y.grad) == pytest.approx((2 * 3.0 + 1, 2 * 4.0))
    assert {v.data for v in h._prev} == {3.0, 4.0}
    # manual step too
    x.grad = y.grad = 0.0
    h.grad = 1.0
    h._backward()
    assert (x.grad, y.grad) == (0.6, 0.8)
    with pytest.raises(AttributeError, match="precomputed"):
        h._backward = lambda: None


def test_precomputed_checks_its_arguments():
    x = Value(1.0)
    nodes = tapead.tape_stats()["nodes"]
    with pytest.raises(ValueError, match="one partial per input"):
        tapead.precomputed(1.0, [x], [1.0, 2.0])
    with pytest.raises(TypeError):
        tapead.precomputed(1.0, [x, 2.0], [1.0, 2.0])
    with pytest.raises(TypeError):
        tapead.precomputed("a", [x], [1.0])
    with pytest.raises(TypeError):
        tapead.precomputed(1.0, [x], ["z"])
    with pytest.raises(TypeError):
        tapead.precomputed(1.0, [x], [1.0], name=3)
    assert tapead.tape_stats()["nodes"] == nodes
    assert tapead.precomputed(2.0, [], [], name="const").data == 2.0
    assert tapead.precomputed(2.0, x, [5.0]).data == 2.0


def test_precomputed_in_detect_anomaly_and_no_grad():
    x = Value(1.0)
    with tapead.no_grad():
        v = tapead.precomputed(2.0, [x], [1.0])
        c = Value(2.0, (x,), 'c')
        c._backward = lambda: None          # fine: a no_grad value has no graph
    for w in (v, c):
        with pytest.raises(tapead.TapeadError, match="no_grad"):
            w.backward()
    n = tapead.precomputed(1.0, [x], [math.inf]) * 0.0
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError):
            n.backward()
    assert lib.ta_validate() == 0


def train(steps):
    """A small model with custom nodes, trained op by op; returns losses and
    the tape size after each step."""
    rng = random.Random(0)      # (not the shared generator: threads run this at once)
    w = [TExt(rng.uniform(-1, 1)) for _ in range(3)]
    xs = [[rng.uniform(-1, 1) for _ in range(3)] for _ in range(8)]
    losses, sizes = [], []
    for _ in range(steps):
        loss = Value(0.0)
        for x in xs:
            s = w[0] * x[0] + w[1] * x[1] + w[2] * x[2]
            s = TExt(s.data, (s,), 'id')
            inner = next(iter(s._prev))

            def _backward(s=s, inner=inner):
                inner.grad += s.grad
            s._backward = _backward
            loss = loss + s.softplus().cube()
        for p in w:
            p.grad = 0.0
        loss.backward()
        for p in w:
            p.data -= 0.01 * p.grad
        losses.append(loss.data)
        sizes.append(tapead.tape_stats()["nodes"])
        release_garbage(every=2048)    # (PyPy: this step's graph is garbage now)
    return losses, sizes


def _object_array(xs):
    np = pytest.importorskip("numpy")
    return np.array(xs, dtype=object)


@pytest.mark.parametrize("data", [1.5, 3, "np"])
@pytest.mark.parametrize("kids", [tuple, list, iter, _object_array])
def test_every_spelling_of_a_custom_node_makes_the_same_node(data, kids):
    """Value(x, children, name): a float and a tuple or list (the CPython
    front's shortcut past argument parsing), other numbers and iterables
    (the ordinary route: a numpy array of Values among them, which has no
    truth value), and keywords make the same node, run the same rule, and
    refuse the same bad child in the same words."""
    if data == "np":
        np = pytest.importorskip("numpy")
        data = np.float64(1.5)
    a, b = Value(2.0), Value(-3.0)
    for out in (Value(data, kids([a, b]), "f"), Value(data, _children=kids([a, b]), _op="f")):
        def _backward(out=out):
            a.grad += b.data * out.grad
            b.grad += a.data * out.grad
        out._backward = _backward
        a.grad = b.grad = 0.0
        (out * 2.0).backward()
        assert (out.data, out._op, a.grad, b.grad) == (float(data), "f", -6.0, 4.0)
        assert {v.data for v in out._prev} == {2.0, -3.0}
    for bad in (kids([a, 3.0]), kids([a, None])):
        with pytest.raises(TypeError, match="each child must be a Value, not"):
            Value(data, bad, "f")


def test_a_subclass_gets_the_idiom_and_keeps_its_own_attributes():
    """micrograd's way to add an op is a subclass (class ValueExt(Value));
    its out._backward = rule and its rules' x.grad += ... take the same
    path as on Value, and a subclass that defines grad, data or _backward
    again gets its own."""
    Ext = TExt                                # ext(Value): micrograd's ValueExt on tapead's Value

    class Logged(Ext):
        log = []

        @property
        def grad(self):
            return Value.grad.__get__(self)

        @grad.setter
        def grad(self, x):
            Logged.log.append(("grad", x))
            Value.grad.__set__(self, x)

        @property
        def _backward(self):
            return Value._backward.__get__(self)

        @_backward.setter
        def _backward(self, fn):
            Logged.log.append(("_backward", fn.__name__))
            Value._backward.__set__(self, fn)

    g = 3.0 / (1 + math.exp(-0.5))
    for cls in (Ext, Logged):
        x = cls(0.5)
        y = x.softplus() * 3.0
        out = cls(y.data, (y,), "id")

        def _backward(y=y, out=out):
            y.grad += out.grad
        out._backward = _backward
        out.backward()
        assert x.grad == g and (y.data, out.data) == (3.0 * math.log1p(math.exp(0.5)),) * 2
        x.grad = 0.25
        assert x.grad == 0.25
    assert Logged.log == [("_backward", "_backward"), ("grad", g), ("grad", 0.25)]


def test_the_map_of_owners_holds_the_live_ones_and_a_bounded_rest():
    """Each owner is registered in its tape's map (key -> weak reference),
    where the sweep finds it.  A dead one leaves the map when it dies on the
    CPython front (its dealloc: so the map holds exactly the live owners),
    and when the map has doubled on the cffi front (a purge): either way
    the map stays bounded over a long run, and nothing raises while owners
    die in the middle of a purge or a count."""
    softplus = ext(Value).softplus

    def run():
        x = Value(0.3)
        over, peak = [], 0
        for step in range(300):
            loss = sum(softplus(x * (k % 5 - 2)) for k in range(40))
            x.grad = 0.0
            loss.backward()
            ref = sum((k % 5 - 2) / (1 + math.exp(-x.data * (k % 5 - 2))) for k in range(40))
            assert math.isclose(x.grad, ref, rel_tol=1e-12)
            live, n = C.live_owners(), len(tapead._c.tape().owners)
            if tapead.FRONT == "cpython":
                assert n == live, (step, n, live)
            peak = max(peak, live)
            over.append(n - max(256, 2 * peak))
            del loss
            if step % 50 == 49:
                gc.collect()
        return max(over), peak
    over, peak = on_fresh_tape(run)
    assert over <= 64 and peak < 2000     # (a graph holds 40; the rest waits for the collector)


def test_the_tape_is_looked_at_every_64_owners_made():
    """The nudge (custom._every, then _pressure when the tape is over its
    limit) comes with every 64th owner made on a thread, however many are
    alive: here each dies at once (no rule holds its graph), so the map
    never holds more than one, and the nudge still comes."""
    import tapead.engine as E
    calls = []
    every = C._every

    def spy(t, nodes=-1):
        calls.append(nodes)
        every(t, nodes)

    def run():
        x = Value(0.3)
        for k in range(64 * 10):
            Value(0.5, (x,), "f")           # (an owner, dropped at once)
        return len(tapead._c.tape().owners)
    front = sys.modules.get("tapead._cpython") if E.FRONT == "cpython" else None
    C._every = spy
    if front is not None:
        front.bind(**{**E.cpython_hooks(), "every": spy})
    try:
        left = on_fresh_tape(run)
    finally:
        C._every = every
        if front is not None:
            front.bind(**E.cpython_hooks())
    assert len(calls) == 10
    # the map: the live owner (CPython front: the dead leave it), or a purged rest (cffi)
    assert left <= (1 if front is not None else 256 + 64 if REFCOUNTED else 640)


@pytest.mark.skipif(not REFCOUNTED, reason="PyPy's collector is not CPython's generations")
def test_the_tape_reclaims_cyclic_custom_graphs_even_with_the_collector_off():
    """A graph with custom nodes is cyclic garbage once dropped; with the
    automatic collector off (or slow to reach the oldest generation) only
    the tape's nudge frees it: every 64th owner made, a tape over its limit
    runs the collector (custom._pressure).  A training loop whose step makes
    fewer owners than 64 and drops the last step's must stay bounded."""
    softplus = ext(Value).softplus

    def run():
        x = Value(0.3)
        sizes = []
        gc.disable()
        try:
            for step in range(1500):
                loss = sum(softplus(x * (k % 5 - 2)) for k in range(24))
                loss.backward()
                del loss
                sizes.append(tapead.tape_stats()["nodes"])
        finally:
            gc.enable()
        return sizes
    sizes = on_fresh_tape(run)
    # a step is ~120 nodes: 1,500 steps kept would be 180k
    assert max(sizes) <= 16 * 2048, max(sizes)


def test_a_sweep_lets_go_of_the_segments_its_rules_used():
    """Rules keep no Value of their graph, run or not: once backward()
    returns nothing of its rule runs is kept, and the graph, dropped,
    leaves what it leaves without a backward()."""
    softplus = ext(Value).softplus     # (micrograd's idiom; it needs only .data and .grad)

    def left(sweep):
        collect_all()
        base = tapead.tape_stats()["nodes"]
        x = Value(0.3)
        loss = sum(softplus(x * (k % 7 - 3)) for k in range(3000))   # ~4 segments
        assert C.live_owners() == 3000                      # an owner per custom node, held by loss
        if sweep:
            loss.backward()
            ref = sum((k % 7 - 3) / (1 + math.exp(-x.data * (k % 7 - 3))) for k in range(3000))
            assert math.isclose(x.grad, ref, rel_tol=1e-12)
        del loss
        collect_all()
        return tapead.tape_stats()["nodes"] - base
    without, with_ = on_fresh_tape(lambda: (left(False), left(True)))
    assert without == with_ <= 2 * 2048   # (x's segment and the current one)


def test_training_with_custom_nodes_runs_in_bounded_memory():
    def run():
        _, sizes = train(300)
        recs = C.live_owners()
        collect_all()
        return sizes, recs, tapead.tape_stats()["nodes"], C.live_owners()
    sizes, recs, after, recs_after = on_fresh_tape(run)
    # 73 nodes a step: the tape reclaims as it grows (a sawtooth), it does not grow
    assert max(sizes[200:]) <= max(sizes[100:200]) + 2048 and max(sizes) <= 8 * 2048
    assert recs < 8 * 3 * 300 // 2   # owners die with the Values that carry them
    assert after <= 2048 and recs_after == 0   # only the current segment is kept


def test_op_names_live_and_die_with_their_nodes():
    """A custom node's op name is kept with its node
    (in C) and freed with it, not interned for the process.  micrograd's
    own __pow__ names its node f'**{other}', so an exponent annealed per
    step made a new name every step, all kept.  The names of nodes kept
    across the churn still read back right (lone surrogates too)."""
    def custom_pow(x, k):
        out = Value(x.data ** k, (x,), f"**{k}")

        def _backward():
            x.grad += k * x.data ** (k - 1) * out.grad
        out._backward = _backward
        return out

    def run(first):
        w = Value(1.5)
        kept = []
        for step in range(first, first + 10000):
            k = 2.0 + step * 1e-6
            y = custom_pow(w, k)
            if step % 1000 == 1:
                w.grad = 0.0
                y.backward()
                assert math.isclose(w.grad, k * 1.5 ** (k - 1), rel_tol=1e-12)   # closed form
                kept.append((y, f"**{k}"))
        odd = tapead.precomputed(1.0, [w], [2.0], name="h\udc80\u00e9")
        collect_all()
        assert [y._op for y, _ in kept] == [nm for _, nm in kept]
        assert odd._op == "h\udc80\u00e9"

    if platform.python_implementation() != "CPython":
        on_fresh_tape(lambda: run(0))
        return
    import tracemalloc
    tracemalloc.start()
    try:
        on_fresh_tape(lambda: run(0))      # (warms the caches and the tables)
        collect_all()
        before = tracemalloc.get_traced_memory()[0]
        on_fresh_tape(lambda: run(10000))  # (10,000 other names)
        collect_all()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024              # 10,000 names kept would be ~1.3 MB


def test_custom_nodes_in_threads_match_sequential():
    seq = [on_fresh_tape(lambda: train(20)[0]) for _ in range(2)]
    out = [None] * 4

    def work(k):
        out[k] = train(20)[0]
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(o == seq[0] for o in out) and seq[0] == seq[1]


def test_a_custom_value_of_another_thread_is_refused():
    v = on_fresh_tape(lambda: [Value(1.0)])[0]
    with pytest.raises(tapead.TapeError):
        Value(1.0, (v,), 'c')


def test_nodes_made_under_no_grad_hold_their_own_segment():
    """A custom node or precomputed made under no_grad is a no_grad value:
    its hold must be on its no_grad arena segment (one held on a tape
    segment instead let the arena reuse the value's slot, or crashed)."""
    x = Value(1.0)
    with tapead.no_grad():
        kept = [tapead.precomputed(2.0 + k, [x], [1.0]) for k in range(3)]
        kept += [Value(5.0 + k, (x,), 'c') for k in range(3)]
    for _ in range(3):
        release_garbage()
        tapead.collect()
        with tapead.no_grad():
            junk = [Value(-1.0) * 3.0 for _ in range(3 * SEG)]
        del junk
    assert [v.data for v in kept] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert lib.ta_validate() == 0
