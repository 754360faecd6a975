"""Replay (tapead/replay.py, csrc/replay.c): recompute against fresh recordings,
guards, batched Programs against per-row replays and backward(), bounded memory."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapead
from tapead import Value, GuardError
from conftest import release_garbage


# ------------------------------------------------------- random graphs
# A program is a list of steps (op, i, j, c) over a growing list of nodes;
# the same program is run on Values and re-run to record afresh.
UN = ["tanh", "relu", "sin", "exp", "log", "sqrt", "neg", "sigmoid"]
BIN = ["add", "sub", "mul", "div", "max"]
CST = ["addc", "mulc", "rsubc", "powc", "rdivc"]


def apply(op, a, b, c):
    if op == "tanh": return a.tanh()
    if op == "relu": return a.relu()
    if op == "sin": return a.sin()
    if op == "exp": return (a * 0.1).exp()
    if op == "log": return a.log()
    if op == "sqrt": return a.sqrt()
    if op == "neg": return -a
    if op == "sigmoid": return a.sigmoid()
    if op == "add": return a + b
    if op == "sub": return a - b
    if op == "mul": return a * b
    if op == "div": return a / b
    if op == "max": return a.maximum(b)
    if op == "addc": return a + c
    if op == "mulc": return c * a
    if op == "rsubc": return c - a
    if op == "powc": return a ** 2
    if op == "rdivc": return c / a
    raise AssertionError(op)


steps_st = st.lists(st.tuples(st.sampled_from(UN + BIN + CST), st.integers(0, 10 ** 6),
                              st.integers(0, 10 ** 6),
                              st.floats(-3, 3, allow_nan=False).filter(lambda c: c != 0)),
                    min_size=1, max_size=25)
vals_st = st.lists(st.floats(-3, 3, allow_nan=False), min_size=3, max_size=3)


def record(leafvals, steps):
    leaves = [Value(x) for x in leafvals]
    nodes = list(leaves)
    for op, i, j, c in steps:
        nodes.append(apply(op, nodes[i % len(nodes)], nodes[j % len(nodes)], c))
    root = sum(nodes[len(leaves):], Value(0.0))
    return leaves, nodes, root


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


@settings(max_examples=150, deadline=None)
@given(steps_st, vals_st, vals_st)
def test_recompute_equals_fresh_recording(steps, v0, v1):
    try:
        leaves, nodes, root = record(v0, steps)
    except (ValueError, ZeroDivisionError, OverflowError):
        return
    before = [n.data for n in nodes]
    for leaf, x in zip(leaves, v1):
        leaf.data = x
    try:
        _, fresh, froot = record(v1, steps)
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        with pytest.raises(type(e)):
            root.recompute()
        # a failed recompute leaves every intermediate as it was
        assert all(same(n.data, b) for n, b in zip(nodes[3:], before[3:]))
        return
    root.recompute()
    assert all(same(n.data, f.data) for n, f in zip(nodes, fresh))
    assert same(root.data, froot.data)
    # backward over the recompute plan == the tape sweep of a fresh recording,
    # bit for bit, for leaves (accumulating over two passes) and intermediates
    root.backward(); froot.backward()
    root.backward(); froot.backward()
    assert all(same(n.grad, f.grad) for n, f in zip(nodes, fresh))
    assert root.grad == 1.0


def test_recompute_then_backward_gives_new_gradient():
    x = Value(2.0)
    y = x * x * x + 3 * x
    x.data = 1.5
    y.recompute()
    assert y.data == 1.5 ** 3 + 4.5
    y.backward()
    assert x.grad == pytest.approx(3 * 1.5 ** 2 + 3)


def test_recompute_domain_error_leaves_values():
    x = Value(4.0)
    a = x * 2
    b = (x - 1).log()
    y = a + b
    old = (a.data, b.data, y.data)
    x.data = 0.5
    with pytest.raises(ValueError, match="log"):
        y.recompute()
    assert (a.data, b.data, y.data) == old
    x.data = 5.0
    y.recompute()
    assert y.data == 10.0 + math.log(4.0)


# ---------------------------------------------------------------- guards
def test_comparisons_return_bools_and_eq_stays_identity():
    a, b = Value(1.0), Value(2.0)
    assert (a < b) is True and (a <= b) is True and (a > b) is False and (a >= b) is False
    assert (a < 3) is True and (3 < a) is False and (a >= 1) is True
    assert a != Value(1.0) and a == a and len({a, b}) == 2


def test_guard_flip_detected_on_input():
    tapead.clear_guards()
    x = Value(2.0)
    y = x * 2 if x > 0 else x * 3
    x.data = 5.0
    y.recompute()
    assert y.data == 10.0
    x.data = -1.0
    with pytest.raises(GuardError, match=">"):
        y.recompute()
    assert y.data == 10.0          # untouched by the failed call
    assert isinstance(GuardError("x"), tapead.TapeadError)


def test_guard_on_node_not_in_root_graph():
    # z is not an input of y, yet it decided which y was recorded
    tapead.clear_guards()
    x = Value(2.0)
    z = x * x
    y = x * 1.0 if z > 1 else -x
    x.data = 3.0
    y.recompute()
    assert y.data == 3.0 and z.data == 9.0   # z is re-evaluated too
    x.data = 0.5
    with pytest.raises(GuardError):
        y.recompute()
    assert y.data == 3.0 and z.data == 9.0


def test_guard_between_two_values_and_after_root_ignored():
    tapead.clear_guards()
    a, b = Value(1.0), Value(2.0)
    y = (a + b) if a < b else (a - b)
    if y > 100:  # recorded after y: cannot have shaped y
        pass
    a.data = 5.0
    with pytest.raises(GuardError, match="<"):
        y.recompute()
    tapead.clear_guards()
    y.recompute()
    assert y.data == 7.0


def test_guards_reclaimed_with_their_nodes():
    tapead.clear_guards()
    x = Value(1.0)
    for _ in range(20000):
        t = x * 1.5
        _ = t > 1.0
    del t
    release_garbage()
    tapead.collect()
    # reclaimed per segment (2048 nodes): at most x's segment and the current one remain
    assert tapead.guard_count() <= 2 * 2048
    tapead.clear_guards()


# --------------------------------------------------------------- memory
def test_replayed_loop_memory_is_flat():
    from tapead.nn import MLP
    import random
    random.seed(0)
    model = MLP(3, [8, 1])
    xs = [[Value(0.1 * i), Value(-0.2 * i), Value(0.3)] for i in range(10)]
    loss = sum(((model(x) - 1) ** 2 for x in xs), Value(0.0))
    tapead.collect()
    n0 = tapead.tape_stats()["nodes"]
    for k in range(200):
        loss.recompute()
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            p.data -= 0.01 * p.grad
    assert tapead.tape_stats()["nodes"] == n0


# ------------------------------------------------------------- programs
def small_model():
    w = [Value(0.5), Value(-1.5), Value(0.25)]
    x0, x1 = Value(0.0), Value(0.0)
    h = (w[0] * x0 + w[1] * x1).tanh()
    o1 = (h * w[2] + x0 * x1).relu() + h.exp()
    o2 = (x0 - w[0]) ** 2 / (1 + h * h)
    return w, [x0, x1], [o1, o2]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(-2, 2), st.floats(-2, 2)), min_size=1, max_size=300))
def test_batched_equals_separate_replays(rows):
    w, ins, outs = small_model()
    prog = tapead.compile(outs, ins, wrt=w + ins)
    X = np.array(rows, dtype=np.float64)
    seed = np.array([1.0, -0.5])
    Y, G = prog.grad(X, seed=seed, per_sample=True)
    Ys, Gs = prog.grad(X, seed=seed)
    total = np.zeros(5)
    for b, (a0, a1) in enumerate(rows):
        ins[0].data, ins[1].data = a0, a1
        for v in w + ins:
            v.grad = 0.0
        outs[0].recompute(); outs[1].recompute()
        assert Y[b, 0] == outs[0].data and Y[b, 1] == outs[1].data
        r = outs[0] * 1.0 + outs[1] * -0.5   # d(seed . outputs)
        r.backward()
        g = [v.grad for v in w + ins]
        assert np.allclose(G[b], g, rtol=1e-13, atol=1e-13)
        total += g
    assert np.array_equal(Y, Ys)
    assert np.allclose(Gs, total, rtol=1e-12, atol=1e-12)


def test_program_is_independent_of_the_tape_and_sees_param_updates():
    w = Value(2.0)
    x = Value(0.0)
    prog = tapead.compile(w * x + 1, [x], wrt=[w])
    tapead.collect()
    X = np.array([[1.0], [2.0]])
    assert prog(X).tolist() == [[3.0], [5.0]]
    w.data = 3.0
    assert prog(X).tolist() == [[4.0], [7.0]]
    assert prog.grad(X)[1].tolist() == [3.0]
    tapead.set_data([w], np.array([-1.0]))
    assert tapead.data([w]).tolist() == [-1.0]


def test_program_errors():
    w = Value(2.0)
    x = Value(1.0)
    h = w * x
    with pytest.raises(ValueError, match="leaf"):
        tapead.compile(h + 1, [h])
    with pytest.raises(ValueError, match="leaf"):
        tapead.compile(h + 1, [x, x])
    prog = tapead.compile((h + 1).log(), [x])
    with pytest.raises(ValueError, match="shape"):
        prog(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="row 2"):
        prog(np.array([[1.0], [0.0], [-5.0]]))
    assert prog(np.array([[0.5]]))[0, 0] == math.log(2.0)


def test_program_checks_guards_per_row():
    tapead.clear_guards()
    x = Value(1.0)
    y = x * 2 if x > 0 else x * 3
    prog = tapead.compile(y, [x])
    assert prog.guards == 1
    with pytest.raises(GuardError, match="row 1"):
        prog(np.array([[1.0], [-1.0]]))
    tapead.clear_guards()


def test_guard_recorded_after_first_recompute_is_checked():
    tapead.clear_guards()
    x = Value(2.0)
    y = x * 3
    y.recompute()                     # builds and caches the plan
    assert (x > 1) is True            # a new guard on a node before y
    x.data = 0.0
    with pytest.raises(GuardError):
        y.recompute()
    assert y.data == 6.0
    tapead.clear_guards()
    y.recompute()
    assert y.data == 0.0


def test_recompute_survives_collections_between_calls():
    x = Value(1.5)
    y = (x * x).tanh() + x
    for k in range(5):
        junk = [Value(float(i)) * 2 for i in range(3000)]   # forces new segments and GCs
        del junk
        tapead.collect()
        x.data = 0.1 * k
        y.recompute()
        assert y.data == math.tanh((0.1 * k) ** 2) + 0.1 * k
        x.grad = 0.0
        y.backward()
        assert x.grad == pytest.approx((1 - math.tanh((0.1 * k) ** 2) ** 2) * 0.2 * k + 1)


def test_comparisons_with_numpy_scalars_and_other_threads():
    import threading
    v = Value(1.0)
    assert (np.float64(0.5) < v) is True and (v <= np.int64(1)) is True
    y = v * 2
    errs = []

    def other():
        try:
            y.recompute()
        except tapead.TapeError as e:
            errs.append(e)
    t = threading.Thread(target=other)
    t.start(); t.join()
    assert len(errs) == 1
