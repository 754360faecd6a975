"""Shared helpers: micrograd as the reference, extended with the tanh and exp
that micrograd's lecture version has (0.1.0 ships without them); a
function run on a thread of its own (so on a tape of its own);
release_garbage() and collect_all(), for tests that mean "once the garbage
is gone"; lonely() and move_and_reclaim(), for tests of what keeps node
ids while Values move to new nodes; and this_tapead(), the environment in
which a subprocess imports the tapead under test."""
import gc
import math
import os
import platform
import sys
import threading

import tapead

import pytest
from hypothesis import settings
from micrograd.engine import Value as _MG

settings.register_profile("tapead", max_examples=150, deadline=None)
settings.load_profile("tapead")


class MG(_MG):
    """micrograd 0.1.0 plus tanh and exp written as in micrograd's lecture."""

    def __init__(self, data, _children=(), _op=""):
        super().__init__(data, _children, _op)

    def _lift(self, out):
        out.__class__ = MG
        return out

    def __add__(self, o): return self._lift(super().__add__(o if isinstance(o, _MG) else MG(o)))
    def __mul__(self, o): return self._lift(super().__mul__(o if isinstance(o, _MG) else MG(o)))
    def __pow__(self, o): return self._lift(super().__pow__(o))
    def relu(self): return self._lift(super().relu())

    def tanh(self):
        x = self.data
        t = (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1)
        out = MG(t, (self,), "tanh")

        def _backward():
            self.grad += (1 - t ** 2) * out.grad
        out._backward = _backward
        return out

    def exp(self):
        out = MG(math.exp(self.data), (self,), "exp")

        def _backward():
            self.grad += out.data * out.grad
        out._backward = _backward
        return out


def this_tapead(**extra):
    """os.environ plus extra, with the folder of the tapead this process
    imported first on PYTHONPATH: a subprocess then runs the same tapead
    (the source tree's, or the installed one under test), never another one
    its own sys.path would find first (a script's folder, an install elsewhere)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(tapead.__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}


def same(a, b):
    """Bitwise-equal floats (the sign of zero included), or both nan."""
    if a != a or b != b:
        return a != a and b != b
    return a == b and math.copysign(1, a) == math.copysign(1, b)


@pytest.fixture
def mg():
    return MG


REFCOUNTED = platform.python_implementation() == "CPython"
_since = threading.local()


def release_garbage(every=0):
    """Drop the holds of Values that are garbage now, as CPython's reference
    counting does the moment they die (so a no-op there).  On PyPy they go
    only when its collector runs: run it.  In a loop, every=n runs it only
    once this thread's tape and no_grad arena have taken n more nodes since
    it last ran (the growth seen between calls, so the tape's own
    collections in between do not hide it; a full collection per step would
    take minutes on PyPy); the tape's own reclamation, under test, does the
    rest."""
    if REFCOUNTED:
        return
    if every:
        from tapead._c import lib
        n = tapead.tape_stats()["nodes"] + lib.ta_nograd_nodes()
        grown = getattr(_since, "grown", 0) + max(0, n - getattr(_since, "nodes", n))
        _since.nodes = n
        _since.grown = grown if grown < every else 0
        if grown < every:
            return
    gc.collect()


def collect_all():
    """Python's collector, then the tape's, until neither frees anything
    twice running: all that garbage held on the tape is gone (on PyPy a
    Value's hold goes at a collection after the one that found it dead)."""
    idle = 0
    while idle < 2:
        gc.collect()
        idle = idle + 1 if tapead.collect() == 0 else 0


def lonely(xs):
    """New leaf Values of data xs, in a segment nothing else will hold once
    they move (the Values made around them are gone)."""
    pad = [tapead.Value(0.0) for _ in range(5000)]
    del pad
    collect_all()
    return [tapead.Value(x) for x in xs]


def move_and_reclaim(vals, data, n=20000):
    """v.__init__(data) for each Value v (a new leaf, away from its old
    node), then the old nodes reclaimed and their slots filled: n new
    Values, of data 0.0, 1.0, ... and grad 1.0, returned.  An id of an old
    node now names one of them (ids carry no generation)."""
    pad = [tapead.Value(0.0) for _ in range(5000)]
    for v in vals:
        v.__init__(data)
    del pad
    collect_all()
    others = [tapead.Value(float(k)) for k in range(n)]
    for v in others:
        v.grad = 1.0
    return others


def untouched(others):
    """Whether the Values move_and_reclaim made still have their data and grad."""
    return all(v.data == k and v.grad == 1.0 for k, v in enumerate(others))


def on_fresh_tape(fn):
    """fn() run in a new thread, so on a tape of its own that earlier tests
    left nothing on; its exception, if any, re-raised here."""
    out, err = [], []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            err.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]


def assert_every_use_refused(v, ok, exc):
    """Every way of using Value v (read or write data and grad, backward,
    every spelling of every op in tests/opcases.py with v as each input, with
    another Value ok or a number, repr) raises exc, and ok is left as it was."""
    from opcases import FORMS
    before = (ok.data, ok.grad)
    uses = [lambda: v.data, lambda: v.grad, lambda: setattr(v, "data", 3.0),
            lambda: setattr(v, "grad", 0), lambda: v.backward(), lambda: repr(v)]
    for f in FORMS.values():
        uses.append(lambda f=f: f.ta(v, ok, 2))
        if f.nargs == 2:
            uses.append(lambda f=f: f.ta(ok, v, 2))
    for use in uses:
        with pytest.raises(exc):
            use()
    assert (ok.data, ok.grad) == before


TAPEAD_DIR = os.path.dirname(tapead.__file__) + os.sep   # tapead's own Python code, not the tests'


def _opcode_events():
    """Whether a tracer that sets f_trace_opcodes gets opcode events here
    (CPython 3.12.0-3.12.1 send none: there the finest grain is a line)."""
    got = []

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        got.append(event)
        return tracer

    def probe():
        return 1
    sys.settrace(tracer)
    try:
        probe()
    finally:
        sys.settrace(None)
    return "opcode" in got


STEP = "opcode" if _opcode_events() else "line"   # where interrupt_at may interrupt


def interrupt_at(k, fn, also=()):
    """fn() with a KeyboardInterrupt raised at the k-th bytecode that runs in
    tapead's own Python code, or in the files named in also (where a real
    Ctrl-C could land; at the k-th line where the interpreter sends no
    opcode events, STEP): (whether the k-th was reached, what fn raised or
    returned)."""
    seen = [0]
    where = (TAPEAD_DIR, *also)

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(where):
            return None
        frame.f_trace_opcodes = True
        if event == STEP:
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
