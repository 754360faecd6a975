"""Custom nodes (micrograd's idiom) under what a program may do around them:
a Ctrl-C at any bytecode, a step called from another thread, a Value moved
to a new node by __init__.  Each fails the way a built-in node does, and
leaves nothing behind."""
import math
import sys
import threading

import pytest

import tapead
import tapead.custom as C
from tapead import Value

from conftest import STEP, collect_all, interrupt_at, on_fresh_tape

SEG = 1 << tapead._c.SHIFT


def softplus(x):
    out = Value(math.log1p(math.exp(x.data)), (x,), "softplus")

    def _backward():        # (three lines: where the interpreter sends line events only, three places)
        s = 1 + math.exp(-x.data)
        g = out.grad / s
        x.grad += g
    out._backward = _backward
    return out


def test_ctrl_c_anywhere_in_a_backward_through_a_rule():
    """backward() through a custom node, interrupted at each bytecode of
    tapead's Python and of the rule in turn (the cffi front's rule hook, the
    rule itself; the CPython front runs the rule straight from C): it raises
    that KeyboardInterrupt (never a TapeadError, never swallowed), or, past
    the last, gives micrograd's gradient."""
    def body():
        swallowed = []
        old_hook = sys.unraisablehook
        sys.unraisablehook = lambda u: swallowed.append(u.exc_type)
        try:
            k = 1
            while True:
                x = Value(0.5)
                y = softplus(x * 2.0) * 3.0
                hit, got = interrupt_at(k, y.backward, also=(__file__,))
                assert got is None or not isinstance(got, BaseException), (k, got)
                if not hit:
                    break
                k += 1
        finally:
            sys.unraisablehook = old_hook
        assert k > (8 if STEP == "opcode" else 3) and swallowed == []
        assert x.grad == pytest.approx(3.0 * 2.0 / (1 + math.exp(-1.0)), rel=1e-15)
        del x, y
        pad = [Value(0.0) for _ in range(2 * SEG)]   # (the segments of the loop: not current)
        del pad
        collect_all()
        return C.live_owners()
    assert on_fresh_tape(body) == 0      # nothing of the runs is kept: every owner freed


def test_a_custom_step_called_in_another_thread_raises():
    """out._backward taken in one thread and called in another raises
    TapeError, as a built-in node's step does; it never runs the other
    thread's node that has the same key."""
    def make():
        x = Value(1.0)
        out = Value(x.data * 2, (x,), "double")

        def _backward():
            x.grad += 2 * out.grad
        out._backward = _backward
        return x, out
    xa, outa = make()
    outa.grad = 1.0
    steps = {"custom": outa._backward, "built-in": (xa * 3.0)._backward}
    res = {}

    def worker():
        xb, outb = make()
        outb.grad = 1.0
        for name, f in steps.items():
            try:
                f()
                res[name] = "ran"
            except tapead.TapeError:
                res[name] = "TapeError"
        res["x"] = xb.grad
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert res == {"custom": "TapeError", "built-in": "TapeError", "x": 0.0}
    outa._backward()                     # in its own thread, it runs
    assert xa.grad == 2.0


def test_a_value_moved_by_init_never_shows_a_dead_nodes_label():
    """v.__init__ moves v to a new node; when that node reuses the id of a
    dead labelled node, v shows no label (the entry's stamp is checked)."""
    def so(i):
        return (i & 0xffffffff) >> 11, i & (SEG - 1)

    def body():
        pre = [Value(0.0) for _ in range(100)]
        v = Value(1.0, label="old")
        i = v._i
        del pre
        for _ in range(SEG):
            Value(0.0)
        v.__init__(2.0)
        cur = so(Value(0.0)._i)
        for _ in range(SEG - cur[1]):
            Value(0.0)
        tapead.collect()
        while True:
            s, o = so(Value(0.0)._i)
            if s == so(i)[0] and o == so(i)[1] - 1:
                break
            if s == so(i)[0] and o >= so(i)[1]:
                return None                # (the allocator did not reuse the slot)
        v.__init__(3.0)
        return v._i == i, v.label, v.data
    got = on_fresh_tape(body)
    if got is None:
        pytest.skip("the freed slot was not the next one reused")
    assert got == (True, "", 3.0)


# ------------------------------------------------------------ the smaller items
def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(_outcome(fn)))
    t.start()
    t.join()
    return out[0]


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared by the test
        return (type(e).__name__, None)


def test_a_label_read_in_another_thread_raises_as_setting_does():
    x = Value(2.0, label="x")
    w = Value(3.0)
    assert _in_thread(lambda: x.label) == ("TapeError", None)
    assert _in_thread(lambda: w.label) == ("TapeError", None)
    assert _in_thread(lambda: tapead.get_label(x)) == ("TapeError", None)
    assert _in_thread(lambda: setattr(x, "label", "y")) == ("TapeError", None)
    assert _in_thread(lambda: Value(1.0).label) == ("ok", "")
    assert x.label == "x"


def test_init_in_another_thread_makes_the_value_that_threads_alike_on_both_fronts():
    """v.__init__(x) makes v a new leaf of the calling thread's tape, as
    Value(x) there would (the same on both fronts); its first thread then
    refuses it as any other thread's Value."""
    v = Value(5.0)

    def there():
        v.__init__(6.0)
        return v.data
    assert _in_thread(there) == ("ok", 6.0)
    with pytest.raises(tapead.TapeError):
        v.data


class ValueExt(Value):
    def softplus(self):
        out = ValueExt(math.log1p(math.exp(self.data)), (self,), "softplus")

        def _backward():
            self.grad += out.grad / (1 + math.exp(-self.data))
        out._backward = _backward
        return out


def test_copy_and_pickle_keep_a_subclass():
    import copy
    import pickle
    e = ValueExt(0.5)
    e.grad = 0.25
    for c in (copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
        assert type(c) is ValueExt and (c.data, c.grad) == (0.5, 0.25)
        c.softplus().backward()
        assert c.grad == pytest.approx(0.25 + 1 / (1 + math.exp(-0.5)), rel=1e-15)
    assert type(pickle.loads(pickle.dumps(Value(1.0)))) is Value


def test_threads_out_of_range_is_a_value_error():
    np = pytest.importorskip("numpy")
    a, b = Value(0.0), Value(1.0)
    prog = tapead.compile(a * b, [a])
    for bad in (2 ** 40, 2 ** 31, 0, -1, True, 1.5):
        with pytest.raises(ValueError, match="threads must be"):
            prog(np.zeros((10, 1)), threads=bad)


def test_a_failing_row_of_a_chunk_of_unknown_place_is_named_in_its_chunk():
    from tapead._c.program import _run_error

    class F:
        row, op, x, y = 7, 0, 0.0, 0.0
    for row0 in (float("nan"), None):
        msg = str(_run_error(tapead._c.lib.TA_EDOMAIN, F(), row0))
        assert "row 7 of its chunk" in msg and "nan" not in msg
    assert "at row 107" in str(_run_error(tapead._c.lib.TA_EDOMAIN, F(), 100))


@pytest.mark.parametrize("where", ["leaf", "intermediate"])
def test_detect_anomaly_catches_a_rules_nan_naming_the_node(where):
    def mysqrt(x):
        out = Value(math.sqrt(x.data), (x,), "mysqrt")

        def _backward():
            x.grad += out.grad / (2 * out.data) if out.data else float("nan")
        out._backward = _backward
        return out
    x0 = Value(0.0)
    y = mysqrt(x0 if where == "leaf" else x0 * 1.0) * 2.0
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError, match="'mysqrt'"):
            y.backward()
    assert tapead._c.lib.ta_validate() == 0
    x1 = Value(4.0)
    z = mysqrt(x1) * 2.0
    with tapead.detect_anomaly():
        z.backward()                     # no nan: runs as ever
    assert x1.grad == 0.5


def test_a_precomputed_nan_is_named_too():
    x = Value(1.0)
    n = tapead.precomputed(1.0, [x], [math.inf], name="blowup") * 0.0
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError, match="'blowup'"):
            n.backward()


@pytest.mark.parametrize("captured", ["cells", "defaults"])
def test_a_rule_that_runs_its_own_step_again_gives_micrograds_grad(mg, captured):
    """out._backward() inside its own _backward (micrograd allows it: the
    step runs twice): the outer run keeps its captured Values."""
    def make(V):
        x = V(2.0)
        out = V(x.data * 3, (x,), "x3")
        depth = [0]
        if captured == "cells":
            def _backward():
                if depth[0] == 0:
                    depth[0] += 1
                    out._backward()
                    depth[0] -= 1
                x.grad += 3 * out.grad
        else:
            def _backward(x=x, out=out):
                if depth[0] == 0:
                    depth[0] += 1
                    out._backward()
                    depth[0] -= 1
                x.grad += 3 * out.grad
        out._backward = _backward
        return x, out
    x, out = make(Value)
    out.backward()
    mx, mout = make(mg)
    mout.backward()
    assert x.grad == mx.grad == 6.0
    x.grad = 0.0
    out.grad = 1.0
    out._backward()                      # by hand, the same
    assert x.grad == 6.0
