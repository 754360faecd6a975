"""Custom nodes (micrograd's idiom) under what a program may do around them:
a Ctrl-C at any bytecode, a step called from another thread, a Value moved
to a new node by __init__.  Each fails the way a built-in node does, and
leaves nothing behind."""
import math
import os
import sys
import threading

import pytest

import tapead
import tapead.custom as C
from tapead import Value

from conftest import collect_all, on_fresh_tape

SEG = 1 << tapead._c.SHIFT
TAPEAD_DIR = os.path.dirname(tapead.__file__)


def _interrupt_at(k, fn):
    """fn() with a KeyboardInterrupt raised at the k-th bytecode run in
    tapead's own Python code (where a real Ctrl-C may land): (raised?, what fn
    raised or returned)."""
    seen = [0]

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(TAPEAD_DIR):
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            seen[0] += 1
            if seen[0] == k:
                raise KeyboardInterrupt
        return tracer
    sys.settrace(tracer)
    try:
        got = fn()
    except KeyboardInterrupt:
        return True, None
    except BaseException as e:  # noqa: BLE001 - returned to the test
        return seen[0] >= k, e
    finally:
        sys.settrace(None)
    return seen[0] >= k, got


def softplus(x):
    out = Value(math.log1p(math.exp(x.data)), (x,), "softplus")

    def _backward():
        x.grad += out.grad / (1 + math.exp(-x.data))
    out._backward = _backward
    return out


def test_ctrl_c_anywhere_in_drain_loses_no_record():
    """The records of reclaimed custom nodes are dropped by drain(); a Ctrl-C
    at each of its bytecodes in turn leaves none behind for good (C forgets
    a dead node's key only once its record is gone)."""
    def body():
        w = Value(0.3)
        pad = [Value(0.0) for _ in range(SEG)]          # (w's segment: no custom node in it)
        k = 1
        while True:
            ys = [softplus(w * float(j)) for j in range(12)]
            pad = [Value(0.0) for _ in range(SEG)]      # (their segment is reclaimable now)
            del ys, pad
            tapead._c.lib.ta_collect()                  # their keys wait on C's dead list
            hit, _ = _interrupt_at(k, C.drain)
            if not hit:
                break
            k += 1
        collect_all()
        C.drain()
        return k, len(C._state().recs)
    k, left = on_fresh_tape(body)
    assert k > 20                        # drain's bytecodes were each hit
    assert left == 0


def test_ctrl_c_anywhere_in_a_backward_through_a_rule():
    """backward() through a custom node, interrupted at each bytecode of
    tapead's Python in turn (the rule hook, the rule's run): it raises that
    KeyboardInterrupt (never a TapeadError, never swallowed), or, past the
    last, gives micrograd's gradient."""
    swallowed = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: swallowed.append(u.exc_type)
    try:
        k = 1
        while True:
            x = Value(0.5)
            y = softplus(x * 2.0) * 3.0
            hit, got = _interrupt_at(k, y.backward)
            assert got is None or not isinstance(got, BaseException), (k, got)
            if not hit:
                break
            k += 1
    finally:
        sys.unraisablehook = old_hook
    assert k > 3 and swallowed == []
    assert x.grad == pytest.approx(3.0 * 2.0 / (1 + math.exp(-1.0)), rel=1e-15)


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
