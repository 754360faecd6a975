"""The modes (tapead/modes.py): no_grad (values as recorded, nothing on the
tape, per thread, left as entered even by a Ctrl-C) and detect_anomaly
(names the op and its inputs, changes nothing)."""
import math
import random
import sys
import threading

import pytest

import tapead
import tapead.nn
from tapead import Value
from tapead._c import lib
from conftest import release_garbage, same
from tapead._c import OP, OP_KINDS, OP_NAMES
from opcases import FORMS as FORMS_BY_NAME, KIND_CST, KIND_UN, form_cases

INF, NAN = math.inf, math.nan


def nodes():
    return tapead.tape_stats()["nodes"]


def f(ws):
    """A small recorded program used by several tests."""
    a, b, c = ws
    return ((a * b + c).tanh() * a - b / c + (a ** 2).exp() * 0.5).relu() + c.sigmoid()


# ================================================================ no_grad
def test_no_grad_context_values_equal_recorded_and_tape_does_not_grow():
    ws = [Value(0.3), Value(-1.2), Value(2.5)]
    want = f(ws).data
    n0 = nodes()
    with tapead.no_grad():
        got = f(ws)
    assert got.data == want
    assert nodes() == n0


def test_no_grad_decorator_and_nesting():
    ws = [Value(0.7), Value(0.1), Value(-0.4)]
    want = f(ws).data

    @tapead.no_grad()
    def evaluate():
        return f(ws)

    n0 = nodes()
    assert evaluate().data == want
    assert nodes() == n0
    assert evaluate.__name__ == "evaluate"
    with tapead.no_grad():
        with tapead.no_grad():
            a = f(ws)
        b = f(ws)          # still inside the outer no_grad
        c = evaluate()
    assert nodes() == n0
    assert a.data == b.data == c.data == want
    d = f(ws)              # recording again
    assert nodes() > n0
    d.backward()
    assert ws[0].grad != 0


def test_a_mode_entered_by_hand_or_reused_leaves_as_entered():
    """Each `with` leaves through the C __exit__ of its own token; one manager
    reused and nested, ExitStack and hand-called __enter__/__exit__ still
    pair up, so the mode ends exactly when the last block does."""
    import contextlib
    ng = tapead.no_grad()
    with ng:
        with ng:
            assert lib.ta_nograd(0) == 2
        assert lib.ta_nograd(0) == 1
    assert lib.ta_nograd(0) == 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(tapead.detect_anomaly())
        stack.enter_context(tapead.detect_anomaly())
        assert lib.ta_anomaly(0) == 2
    assert lib.ta_anomaly(0) == 0
    ng.__enter__()
    with ng:                                  # a with inside a hand-entered block
        assert lib.ta_nograd(0) == 2
    assert lib.ta_nograd(0) == 1
    assert ng.__exit__(None, None, None) is False
    assert lib.ta_nograd(0) == 0
    ng.__exit__(None, None, None)             # one exit too many changes nothing
    assert lib.ta_nograd(0) == 0


def test_no_grad_exits_on_exception():
    n0 = nodes()
    with pytest.raises(ZeroDivisionError):
        with tapead.no_grad():
            Value(1.0) / 0
    y = Value(2.0) * 3
    assert nodes() > n0
    y.backward()


def test_no_grad_evaluation_loop_keeps_tape_constant():
    random.seed(4)
    model = tapead.nn.MLP(2, [8, 8, 1])
    xs = [[random.uniform(-2, 2), random.uniform(-2, 2)] for _ in range(50)]
    want = [model(x).data for x in xs]
    tapead.collect()
    n0 = nodes()
    with tapead.no_grad():
        for _ in range(20):
            got = [model(x).data for x in xs]
            assert got == want
    assert nodes() == n0


def test_no_grad_results_enter_recorded_code_as_constants():
    x, w = Value(1.5), Value(-0.5)
    with tapead.no_grad():
        s = (x * w).exp()      # depends on x and w, but as a constant
    y = s * x + w * w + s
    y.backward()
    sv = math.exp(1.5 * -0.5)
    assert y.data == sv * 1.5 + 0.25 + sv
    assert x.grad == sv        # only through the recorded s * x
    assert w.grad == 2 * -0.5  # only through w * w
    assert s.grad == 0.0       # nothing flowed into the arena node
    y2 = s * s                 # the same arena node twice
    y2.backward()
    assert y2.data == sv * sv
    assert lib.ta_validate() == 0


def test_backward_on_a_no_grad_result_raises():
    x = Value(2.0)
    with tapead.no_grad():
        y = x * x
    with pytest.raises(tapead.TapeadError):
        y.backward()
    assert y.data == 4.0
    y.data = 5.0                # data and grad stay readable and writable
    assert y.data == 5.0


def test_no_grad_arena_is_reclaimed():
    release_garbage()
    tapead.collect()                 # earlier tests' no_grad results are gone
    x = Value(0.5)
    with tapead.no_grad():
        peak = 0
        for i in range(30000):
            y = (x * i + 1).tanh()
            peak = max(peak, lib.ta_nograd_nodes())
            release_garbage(every=2048)
    assert y.data == math.tanh(0.5 * 29999 + 1)
    assert peak < 8 * 2048, peak     # 60000 results made, a few segments held
    del y


def test_no_grad_results_compare_and_go_through_bulk_apis():
    """An evaluation loop's scores (computed under no_grad) can be compared,
    ranked and read in bulk: nothing there differentiates or replays.  A
    comparison records a guard only on an operand that is recorded."""
    import numpy as np
    w = Value(0.5)
    xs = [0.3, -1.2, 2.5, 0.9]
    with tapead.no_grad():
        scores = [w * x for x in xs]
    want = [0.5 * x for x in xs]
    g0 = tapead.guard_count()
    assert [s > 0 for s in scores] == [x > 0 for x in want]
    assert [s <= 0.45 for s in scores] == [x <= 0.45 for x in want]
    assert [0.45 < s for s in scores] == [0.45 < x for x in want]
    assert max(scores) is scores[2] and min(scores) is scores[1]
    assert [s.data for s in sorted(scores)] == sorted(want)
    assert tapead.guard_count() == g0                 # nothing recorded, no guard
    assert tapead.data(scores).tolist() == want
    assert tapead.grads(scores).tolist() == [0.0] * 4
    tapead.set_data(scores[:1], np.array([7.0]))
    assert scores[0].data == 7.0
    # a recorded operand against a no_grad one: its guard holds the value as a constant
    r = w * 2.0                                         # 1.0, recorded
    assert (r > scores[2]) is False and (scores[2] > r) is True and (scores[1] < r) is True
    assert tapead.guard_count() == g0 + 3
    w.data = 1.0
    with pytest.raises(tapead.GuardError):              # r = 2.0 > 1.25 now
        r.recompute()
    tapead.clear_guards()


def test_no_grad_is_per_thread():
    entered, done = threading.Event(), threading.Event()
    out = {}

    def other():
        with tapead.no_grad():
            entered.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert entered.wait(10)
        n0 = nodes()
        x = Value(3.0)
        y = x * x + x      # this thread records normally
        assert nodes() > n0
        y.backward()
        out["grad"] = x.grad
    finally:
        done.set()
        t.join()
    assert out["grad"] == 7.0

    def records_in_thread():    # and no_grad here does not reach other threads
        x = Value(2.0)
        y = x * x
        y.backward()
        return x.grad
    res = []
    with tapead.no_grad():
        th = threading.Thread(target=lambda: res.append(records_in_thread()))
        th.start()
        th.join()
    assert res == [4.0]


def interrupted_at(k, block):
    """Run block() with a KeyboardInterrupt injected at the k-th profiler
    event inside it: right after a C function returns (which is where Python
    handles a pending SIGINT) or as a Python function starts (where it does
    too).  Returns whether the injection happened (k within the events)."""
    count = [0]

    def prof(frame, event, arg):
        if event in ("call", "c_return"):
            count[0] += 1
            if count[0] == k:
                raise KeyboardInterrupt

    sys.setprofile(prof)
    try:
        block()
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    return count[0] >= k


@pytest.mark.parametrize("mode,depth", [(tapead.no_grad, lib.ta_nograd),
                                        (tapead.detect_anomaly, lib.ta_anomaly)])
def test_ctrl_c_anywhere_in_a_mode_block_leaves_no_mode_behind(mode, depth):
    """A Ctrl-C just after no_grad.__enter__'s C call, or as __exit__ starts,
    left the thread in the mode for good: every later backward() failed.
    Interrupt each point of entering, running and leaving in turn."""
    w = Value(0.5)

    def block():
        with mode():
            (w * 2.0).data

    @mode()
    def decorated():
        return (w * 2.0).data

    for body in (block, decorated):
        k = 1
        while interrupted_at(k, body):
            assert depth(0) == 0, (body.__name__, k)
            k += 1
        assert k > 5
    loss = (w * 3.0 - 1.0) ** 2
    loss.backward()
    assert w.grad == 3.0


# ========================================================= detect_anomaly
# (form, x, y, c): every op's `anomaly` entries in the op cases
ANOMALIES = form_cases("anomaly")


@pytest.mark.parametrize("case", ANOMALIES, ids=[f"{e[0]}-{e[1]}-{e[2]}-{e[3]}" for e in ANOMALIES])
def test_anomaly_raises_names_op_and_inputs_and_changes_nothing(case):
    form, x, y, c = case
    f = FORMS_BY_NAME[form]
    kind = OP_KINDS[OP[f.op]]
    name = OP_NAMES[OP[f.op]]
    inputs = {KIND_UN: (x,), KIND_CST: (x, c)}.get(kind, (x, y))
    v = dict(x=Value(3.0), zero=Value(0.0), big=Value(1e308), nbig=Value(-1e308),
             tiny=Value(5e-324), inf=Value(INF), ninf=Value(-INF), nan=Value(NAN))
    a, b = Value(x), Value(0.0 if y is None else y)
    v.update(a=a, b=b)
    y_ = v["x"] * v["x"]
    y_.backward()
    before = nodes(), [(u.data, u.grad) for u in v.values()]
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError) as ei:
            f.ta(a, b, c)
    msg = str(ei.value)
    assert repr(name) in msg
    for i in inputs:
        assert repr(float(i)) in msg
    assert isinstance(ei.value, FloatingPointError)
    assert nodes() == before[0]
    after = [(u.data, u.grad) for u in v.values()]
    assert all(same(p, r) and same(q, s) for (p, q), (r, s) in zip(before[1], after))
    assert lib.ta_validate() == 0
    # outside the context the same op just returns inf or nan
    r = f.ta(a, b, c).data
    assert not math.isfinite(r)


def test_anomaly_mode_lets_finite_work_through_and_nests():
    x = Value(2.0)

    @tapead.detect_anomaly()
    def g(x):
        return (x * x).log()

    with tapead.detect_anomaly():
        with tapead.detect_anomaly():
            y = g(x) + x.exp()
        y.backward()
        with pytest.raises(tapead.AnomalyError):
            x * INF
    assert y.data == math.log(4.0) + math.exp(2.0)
    assert x.grad == pytest.approx(1.0 + math.exp(2.0))
    assert not math.isfinite((x * INF).data)   # mode is off again


def test_anomaly_in_backward_nan_adjoint():
    x = Value(0.0)
    y = x.sqrt() * 0.0     # finite forward; backward: (0.5 / 0) * 0 = inf * 0 = nan
    assert y.data == 0.0
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError) as ei:
            y.backward()
    assert "'sqrt'" in str(ei.value)
    assert lib.ta_validate() == 0
    y.backward()           # outside: IEEE, nan gradient
    assert math.isnan(x.grad)
