"""Replay (tapead/replay.py, csrc/replay/): recompute against fresh recordings,
guards, batched Programs against per-row replays and backward(), bounded memory."""
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapead
from tapead import Value, GuardError
from conftest import lonely, move_and_reclaim, release_garbage, untouched
from opcases import FORMS


# ------------------------------------------------------- random graphs
# A program is a list of steps (op, i, j, c) over a growing list of nodes;
# the same program is run on Values and re-run to record afresh.
# every spelling in the op cases (a step that raises, at recording or at
# recompute, is checked to raise the same there)
def apply(form, a, b, c):
    return FORMS[form].ta(a, b, c)


steps_st = st.lists(st.tuples(st.sampled_from(sorted(FORMS)), st.integers(0, 10 ** 6),
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


def test_guard_between_two_values_and_after_root():
    tapead.clear_guards()
    a, b = Value(1.0), Value(2.0)
    y = (a + b) if a < b else (a - b)
    if y > 100:  # recorded after y, on y: binds too (it could have chosen y)
        pass
    a.data = 5.0
    with pytest.raises(GuardError, match="<"):
        y.recompute()
    b.data = 200.0                      # a < b holds, y > 100 flips
    with pytest.raises(GuardError, match=">"):
        y.recompute()
    assert y.data == 3.0
    b.data = 2.0
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
    # each message names the one rule broken, and which argument broke it
    with pytest.raises(ValueError, match=r"^compile: inputs\[0\] is not a leaf Value: it was made "
                                         r"by an operation \('\*'\); inputs must be leaves"):
        tapead.compile(h + 1, [h])
    with pytest.raises(ValueError, match=r"^compile: wrt\[1\] is not a leaf Value: .*\('\+1'\)"):
        tapead.compile(h + 1, [x], wrt=[w, x + 1])
    with pytest.raises(ValueError, match=r"^compile: inputs\[0\] and inputs\[2\] are the same Value"):
        tapead.compile(h + 1, [x, w, x])
    with pytest.raises(ValueError, match=r"^compile: outputs is empty"):
        tapead.compile([], [x])
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


# ------------------------------------------------------------ bounded guards
def test_guards_on_a_persistent_value_stay_bounded():
    # /work/shared/repro/guards_on_persistent_values_leak.py: a parameter
    # compared every step grew the guard list by one per step (also inside
    # no_grad), and every later compile carried them all.
    tapead.clear_guards()
    w = Value(0.5)
    for step in range(20000):
        if w > 1.0:
            pass
        w < 0.1 * (step % 7)          # a different constant each step: the tightest is kept
        w >= -1.0
    assert tapead.guard_count() <= 8  # at most 4 kinds x 2 outcomes per node
    n = tapead.guard_count()
    with tapead.no_grad():
        for _ in range(1000):
            w < 0.0
            w > Value(3.0)
    assert tapead.guard_count() == n  # nothing recorded under no_grad
    x = Value(1.0)
    prog = tapead.compile(w * x + 1, [x], [w])
    assert prog.guards <= 8
    assert prog(np.ones((1000, 1))).tolist() == [[1.5]] * 1000
    tapead.clear_guards()


def test_merged_guards_flip_exactly_when_one_of_them_would():
    # x kind c == out for several c holds iff it holds for the kept constant
    import operator
    ops = (operator.lt, operator.le, operator.gt, operator.ge)
    rng = np.random.default_rng(3)
    for kind in range(4):
        tapead.clear_guards()
        x = Value(0.0)
        cs = [float(c) for c in rng.uniform(-2, 2, size=6)]
        outs = [ops[kind](x, c) for c in cs]
        assert tapead.guard_count() <= 2       # one per outcome
        y = x * 1.0
        for t in [float(t) for t in rng.uniform(-3, 3, size=40)] + cs + [math.nan]:
            x.data = t
            holds = all(ops[kind](t, c) == o for c, o in zip(cs, outs))
            if holds:
                y.recompute()
            else:
                with pytest.raises(GuardError):
                    y.recompute()
        x.data = 0.0
    assert (Value(1.0) < math.nan) is False   # a nan constant: never flips, never recorded
    tapead.clear_guards()


# ---------------------------------------------------------- sizes come from C
def test_program_sizes_are_read_only_and_checked():
    # /work/shared/repro/public_size_attributes_overflow.py: writing the
    # sizes made C read and write past numpy's buffers
    w, x = Value(2.0), Value(1.0)
    prog = tapead.compile(w * x, [x], wrt=[w])
    for name in ("n_inputs", "n_outputs", "n_wrt", "nodes", "guards"):
        with pytest.raises(AttributeError):
            setattr(prog, name, 0)
    assert (prog.n_inputs, prog.n_outputs, prog.n_wrt) == (1, 1, 1)
    with pytest.raises(ValueError, match="shape"):
        prog(np.ones((10, 2)))
    with pytest.raises(ValueError, match="shape"):
        prog.grad(np.ones((10, 1)), seed=np.ones(2))
    with pytest.raises(ValueError, match="params"):
        prog(np.ones((10, 1)), params=np.ones(3))
    with pytest.raises(ValueError, match="threads"):
        prog(np.ones((10, 1)), threads=0)
    assert prog.grad(np.ones((1000, 1)))[1].tolist() == [1000.0]


# ---------------------------------------------------------- at scale
def moons_program():
    """The demo's per-sample hinge loss, compiled (tapead.demo.batched_trainer's)."""
    import random
    from tapead import demo
    import tapead.nn
    model, X, y = demo.setup(tapead.nn)
    params = model.parameters()
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    prog = tapead.compile([hinge], [x0, x1, yi], wrt=params)
    return model, prog, (x0, x1, yi), hinge


def test_any_thread_count_gives_the_same_bits():
    model, prog, _, _ = moons_program()
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(-1.5, 2.5, (5000, 2)), rng.choice([-1.0, 1.0], 5000)])
    seed = rng.standard_normal((5000, 1))
    ref = prog.grad(X, seed=seed, threads=1)
    ref_ps = prog.grad(X, seed=seed, per_sample=True, threads=1)
    for th in (2, 3, 7, None):
        Y, G = prog.grad(X, seed=seed, threads=th)
        assert np.array_equal(Y, ref[0]) and np.array_equal(G, ref[1])
        Y, G = prog.grad(X, seed=seed, per_sample=True, threads=th)
        assert np.array_equal(Y, ref_ps[0]) and np.array_equal(G, ref_ps[1])
        assert np.array_equal(prog(X, threads=th), ref[0])
    # the sum is the sum of the per-sample gradients
    assert np.allclose(ref[1], ref_ps[1].sum(0), rtol=1e-12, atol=1e-12)


def test_fused_neurons_give_the_recorded_values_and_gradients():
    # the Program runs each neuron as one dot; its outputs are the tape's
    # own values bit for bit, its gradients backward()'s
    model, prog, ins, hinge = moons_program()
    params = model.parameters()
    rows = [(0.3, -0.2, 1.0), (1.5, 0.4, -1.0), (-0.7, 0.9, 1.0)]
    Y, G = prog.grad(np.array(rows), per_sample=True)
    for b, row in enumerate(rows):
        for v, a in zip(ins, row):
            v.data = a
        hinge.recompute()
        for p in params:
            p.grad = 0.0
        hinge.backward()
        assert Y[b, 0] == hinge.data
        assert np.allclose(G[b], [p.grad for p in params], rtol=1e-13, atol=1e-15)


def test_first_failing_row_is_named_whatever_the_threads():
    x = Value(2.0)
    prog = tapead.compile((x - 1).log() + x.sqrt(), [x])
    X = np.full((10000, 1), 5.0)
    X[9000, 0] = 0.5      # log of a negative number, in a later block
    X[2500, 0] = -4.0     # sqrt and log fail here: the row a row-by-row run meets first
    X[2400, 0] = 1.0      # log(0)
    for th in (1, 2, 4):
        with pytest.raises(ValueError, match=r"log\(0\.0\).*row 2400"):
            prog(X, threads=th)
    tapead.clear_guards()
    y = x * 2 if x > 0 else x * 3
    prog = tapead.compile(y, [x])
    X = np.ones((5000, 1)); X[3000, 0] = -1.0; X[4000, 0] = -2.0
    for th in (1, 2, 3):
        with pytest.raises(GuardError, match="row 3000"):
            prog(X, threads=th)
    tapead.clear_guards()


def test_params_read_assigned_and_overridden():
    w, b, x = Value(2.0), Value(1.0), Value(0.0)
    prog = tapead.compile(w * x + b, [x], wrt=[w, b])
    X = np.array([[1.0], [2.0]])
    assert prog.params.tolist() == [2.0, 1.0] and prog.follows_values
    w.data = 3.0                                    # follows the Values
    assert prog.params.tolist() == [3.0, 1.0] and prog(X).ravel().tolist() == [4.0, 7.0]
    assert prog(X, params=[0.0, 5.0]).ravel().tolist() == [5.0, 5.0]   # one call only
    assert prog.grad(X, params=[10.0, 0.0])[0].ravel().tolist() == [10.0, 20.0]
    prog.params = [1.0, 0.0]                        # holds these from now on
    w.data = 100.0
    assert not prog.follows_values and prog(X).ravel().tolist() == [1.0, 2.0]
    p = prog.params; p[0] = 9.0                     # a copy
    assert prog.params.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="params"):
        prog.params = [1.0]
    prog.params = None                              # back to the Values
    assert prog(X).ravel().tolist() == [101.0, 201.0]


def test_pickled_program_runs_the_same_without_a_tape():
    import pickle
    model, prog, _, _ = moons_program()
    X = np.array([[0.3, -0.2, 1.0], [1.5, 0.4, -1.0]])
    q = pickle.loads(pickle.dumps(prog))
    assert repr(q) == repr(prog) and not q.follows_values
    assert np.array_equal(q.params, prog.params)
    for a, b in zip(prog.grad(X, per_sample=True), q.grad(X, per_sample=True)):
        assert np.array_equal(a, b)
    # the pickle holds the values of that moment; the original still follows its Values
    for p in model.parameters():
        p.data += 1.0
    assert not np.array_equal(prog(X), q(X))
    with pytest.raises(ValueError, match="follow"):
        q.params = None
    # a pickle of a pickle is the same program
    assert pickle.dumps(q) == pickle.dumps(pickle.loads(pickle.dumps(q)))


def test_pickled_program_in_a_fresh_process(tmp_path):
    import os, pickle, subprocess, sys, textwrap
    S0, sig, z = Value(100.0), Value(0.2), Value(0.0)
    y = (S0 * (sig * z - 0.5 * sig * sig).exp() - 100.0).relu()
    prog = tapead.compile(y, [z], wrt=[S0, sig])
    Z = np.random.default_rng(1).standard_normal((3000, 1))
    (tmp_path / "p.pkl").write_bytes(pickle.dumps((prog, Z)))
    code = textwrap.dedent("""
        import pickle, sys
        import tapead
        prog, Z = pickle.load(open(sys.argv[1], "rb"))
        assert tapead.tape_stats()["nodes"] == 0      # no Value was ever made here
        Y, G = prog.grad(Z, threads=2)
        pickle.dump((Y, G, prog(Z)), open(sys.argv[1] + ".out", "wb"))
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(tapead.__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.pkl")], env=env,
                         capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    Y, G, Y2 = pickle.loads((tmp_path / "p.pkl.out").read_bytes())
    Yr, Gr = prog.grad(Z, threads=1)
    assert np.array_equal(Y, Yr) and np.array_equal(G, Gr) and np.array_equal(Y2, Yr)


def test_loading_bad_state_raises_and_never_crashes():
    import pickle
    x, w = Value(0.5), Value(2.0)
    tapead.clear_guards()
    y = (x * w).tanh() if x > 0 else x
    prog = tapead.compile([y, x * x], [x], wrt=[w])
    fn, (state,) = prog.__reduce__()
    assert fn(dict(state))(np.ones((2, 1))).shape == (2, 2)
    rng = np.random.default_rng(5)
    for key in ("op", "a", "b", "in", "out", "wrt", "par", "gab", "gkind", "n", "npar", "ng"):
        for _ in range(30):
            bad = dict(state)
            if isinstance(bad[key], int):
                bad[key] = int(rng.integers(-1, 2 ** 33))
            else:
                arr = bytearray(bad[key])
                if not arr:
                    continue
                arr[int(rng.integers(len(arr)))] = int(rng.integers(256))
                bad[key] = bytes(arr)
            try:
                q = fn(bad)
            except ValueError:
                continue
            q(np.ones((3, 1)))      # a state that loads is a program that runs
    for bad in (None, {}, {**state, "format": 2}, {**state, "ops": ("NOPE",)},
                {**state, "params": b"x"}):
        with pytest.raises(ValueError):
            fn(bad)
    assert len(pickle.dumps(prog)) < 2000
    tapead.clear_guards()


def test_one_program_from_many_python_threads():
    # Dask runs tasks in threads: each call has its own workspace
    import threading
    model, prog, _, _ = moons_program()
    params = prog.params
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(-1, 1, (3000, 2)), rng.choice([-1.0, 1.0], 3000)])
    ref = prog.grad(X, params=params, threads=1)
    out, errs = [], []

    def work():
        try:
            for _ in range(5):
                out.append(prog.grad(X, params=params, threads=2))
        except BaseException as e:  # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs and len(out) == 20
    assert all(np.array_equal(a, ref[0]) and np.array_equal(b, ref[1]) for a, b in out)


def test_unaligned_arrays_are_copied_before_c_reads_them():
    # arrays rebuilt from pickle or Dask's messages may start at any byte
    # (the sanitized CI run fails on a misaligned read)
    w, x = Value(2.0), Value(0.0)
    prog = tapead.compile((w * x).exp(), [x], wrt=[w])

    def unaligned(n, value):
        a = np.frombuffer(np.zeros(8 * n + 1, dtype=np.uint8).data, np.float64, n, 1)
        a[:] = value
        assert not a.flags.aligned
        return a
    X, S, p = unaligned(300, 0.0).reshape(-1, 1), unaligned(300, 1.0).reshape(-1, 1), unaligned(1, 3.0)
    Y, G = prog.grad(X, seed=S, params=p)
    assert Y.ravel().tolist() == [1.0] * 300 and G.tolist() == [0.0]
    prog.params = p
    assert prog.params.tolist() == [3.0]


def test_params_take_wrt_order():
    """params= and .params follow wrt's order, not the order the leaves were
    created (which silently swapped parameters before), then the parameters
    not in wrt in creation order; a wrong length names that order."""
    c = Value(4.0)                       # created first, not in wrt
    a = Value(2.0)
    b = Value(3.0)
    x = Value(0.0)
    y = a * x + b * c
    prog = tapead.compile(y, [x], wrt=[b, a])
    assert prog.params.tolist() == [3.0, 2.0, 4.0]
    X = np.array([[1.0], [2.0]])
    Y, G = prog.grad(X, params=[10.0, 5.0, 1.0])     # b = 10, a = 5, c = 1: y = 5 x + 10
    assert Y.ravel().tolist() == [15.0, 20.0]
    assert G.tolist() == [2.0, 3.0]                   # dy/db = c per row, dy/da = x per row
    prog.params = [1.0, 0.0, 2.0]                     # b = 1, a = 0, c = 2
    assert prog(X).ravel().tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match=r"params must have shape \(3,\).*wrt's order.*1 other"):
        prog(X, params=[10.0, 5.0])


def test_large_program_rows_and_adjoint_slots():
    """A program of over a thousand row nodes (the interpreter then runs
    per-sample and value-only calls in wider chunks than summed ones, and
    reuses adjoint rows once a node's sweep step is done): each row's values
    and gradients are the bits of that row run alone, and match the tape's
    own backward pass; summed gradients are the rows' sums.  Inputs are
    read again at the end, so their adjoints live through the whole sweep."""
    xs = [Value(0.0) for _ in range(6)]
    w = Value(0.7)
    nodes = list(xs)
    for i in range(300):
        a, b = nodes[-6], nodes[-3]
        e = [(v * 0.5).exp() for v in (a, b, nodes[-1])]
        s = e[0] + e[1] + e[2]
        nodes.append(e[0] / s * w + b.tanh())
        nodes.append(e[1] / s - (a * b) * 0.1)
    out = nodes[-1] + nodes[-2] * xs[0] + xs[5] * xs[3]
    prog = tapead.compile(out, xs, wrt=xs + [w])
    assert prog.nodes > 3000
    X = np.random.default_rng(5).uniform(-1, 1, (77, 6))
    Y, G = prog.grad(X, per_sample=True)
    Ys, Gs = prog.grad(X)
    assert np.array_equal(Y, Ys) and np.array_equal(prog(X), Y)
    for r in range(len(X)):
        Y1, G1 = prog.grad(X[r:r + 1], per_sample=True)
        assert np.array_equal(Y1[0], Y[r]) and np.array_equal(G1[0], G[r])
        for v, x in zip(xs, X[r]):
            v.data = x
        for v in xs + [w]:
            v.grad = 0.0
        out.recompute()
        out.backward()
        assert Y[r, 0] == out.data
        assert np.allclose(G[r], [v.grad for v in xs + [w]], rtol=1e-12, atol=1e-12)
    assert np.allclose(Gs, G.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_value_rows_reused_where_reverse_reads_none(seed):
    """Random graphs where many values are read only forward (sums,
    differences, constant shifts and scalings feeding exp, tanh, log1p,
    products and quotients, which read their operands or results back): the
    interpreter keeps a value row only where a reverse step reads it and
    reuses the others, so each row's values and gradients must still be the
    tape's own (recompute, backward), and summed ones their sum, at any
    thread count."""
    rng = random.Random(seed)
    xs = [Value(0.0) for _ in range(4)]
    w = Value(0.3)
    pool = list(xs) + [w]
    for i in range(400):
        a, b = rng.choice(pool[-12:]), rng.choice(pool)
        k = rng.randrange(10)
        v = (a + b if k == 0 else a - b if k == 1 else a + 0.25 if k == 2 else a * -0.5 if k == 3
             else (a * 0.1).exp() if k == 4 else a.tanh() if k == 5 else (a * a).log1p() if k == 6
             else a.tanh() * b * 0.5 if k == 7 else a / (b * b + 1.0) if k == 8 else 1.5 - a.tanh())
        pool.append(v)
    outs = [pool[-1], pool[-7] + pool[-40]]
    prog = tapead.compile(outs, xs, wrt=xs + [w])
    X = np.random.default_rng(seed).uniform(-1, 1, (21, 4))
    Y, G = prog.grad(X, per_sample=True)
    Y3, G3 = prog.grad(X, per_sample=True, threads=3)
    assert np.array_equal(Y, Y3) and np.array_equal(G, G3) and np.array_equal(prog(X), Y)
    for r in range(len(X)):
        for v, x in zip(xs, X[r]):
            v.data = x
        for v in xs + [w]:
            v.grad = 0.0
        outs[0].recompute(); outs[1].recompute()
        assert Y[r].tolist() == [outs[0].data, outs[1].data]
        (outs[0] + outs[1]).backward()
        assert np.allclose(G[r], [v.grad for v in xs + [w]], rtol=1e-12, atol=1e-12)
    assert np.allclose(prog.grad(X)[1], G.sum(axis=0), rtol=1e-12, atol=1e-12)


def test_summed_gradients_keep_their_order_in_wider_chunks():
    """Summed gradients of wrt inputs (no parameter adjoints) run the wider
    chunks per-sample runs do, but each sum stays in the documented order:
    per block of 1024 rows, chunks of the Program's ch rows, row s of a chunk
    into lane s % 4, (l0 + l1) + (l2 + l3), chunks then blocks in order.  The
    per-sample gradients are the same rows' adjoints, so summing them that way
    in Python must give the same bits, at any thread count."""
    from tapead.codegen import Code
    rng = random.Random(4)
    xs = [Value(0.0) for _ in range(5)]
    nodes = list(xs)
    for i in range(500):
        a, b = nodes[-5], rng.choice(nodes[-9:])
        nodes.append((a * 0.3).tanh() * b + a.exp() * 0.01 if i % 2 else a - b * 0.5)
    prog = tapead.compile(nodes[-1] + nodes[-2], xs, wrt=xs)
    ch = Code.of(prog).ch
    assert ch < 32                                  # so the summed run's chunks are wider
    X = np.random.default_rng(4).uniform(-1, 1, (2503, 5))
    _, G = prog.grad(X, per_sample=True)
    want = []
    for j in range(5):
        total = 0.0
        for b0 in range(0, len(X), 1024):
            part = 0.0
            for c0 in range(b0, min(b0 + 1024, len(X)), ch):
                lanes = [0.0] * 4
                for s, v in enumerate(G[c0:min(c0 + ch, b0 + 1024, len(X)), j].tolist()):
                    lanes[s % 4] += v
                part += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
            total += part
        want.append(total)
    for threads in (1, 3):
        assert prog.grad(X, threads=threads)[1].tolist() == want


def test_per_sample_gradients_fill_every_entry():
    """Per-sample gradients come back in an array C fills entry by entry
    (it is not zeroed first): a wrt leaf no output reaches gets its 0.0 per
    row, whatever memory the array was given."""
    x, w, u = Value(0.5), Value(2.0), Value(3.0)      # u: reached by no output
    prog = tapead.compile(x * w, [x], wrt=[w, u, x])
    X = np.random.default_rng(8).uniform(-1, 1, (3001, 1))
    for threads in (1, 2, 1):
        junk = np.full((3001, 3), np.nan)             # freed memory full of nan, likely reused
        del junk
        _, G = prog.grad(X, per_sample=True, threads=threads)
        assert G[:, 0].tolist() == X[:, 0].tolist() and G[:, 1].tolist() == [0.0] * 3001
        assert G[:, 2].tolist() == [2.0] * 3001


@pytest.mark.skipif(tapead.FRONT != "cpython", reason="the CPython front's call (csrc/python/program_call.c)")
def test_empty_arrays_may_start_at_any_address():
    """numpy calls an empty array aligned wherever it starts (an empty params
    vector unpickled from a Dask message starts at an odd byte, say): a call
    takes it, since C reads nothing from it."""
    x = Value(0.5)
    p = tapead.compile([x.exp()], [x])
    odd = np.frombuffer(b"\0" * 9, offset=1, count=0)
    assert odd.ctypes.data % 8 and odd.flags.aligned
    assert p(np.array([[0.0]]), params=odd)[0, 0] == 1.0
    assert p(odd.reshape(0, 1)).shape == (0, 1)


@pytest.mark.skipif(tapead.engine.FRONT != "cpython", reason="a call on the cffi front is cffi's")
def test_cpython_run_checks_what_it_is_handed():
    """On the CPython front a Program's call is one C call (csrc/python/program_call.c:
    run), which reaches the program only through its box and checks every
    array against the counts it is given: whatever Python hands it, an
    exception, never a crash, and the arrays it was given untouched."""
    import sys
    run = sys.modules["tapead._cpython"].run
    box_type = sys.modules["tapead._cpython"].program_box()
    x, w = Value(0.5), Value(2.0)
    p = tapead.compile([(w * x).exp()], [x], wrt=[w])
    box = p._box
    assert type(box) is box_type
    X, Y, G, P = np.ones((4, 1)), np.zeros((4, 1)), np.zeros(1), np.zeros((1, 1))
    seed = np.ones(1)

    def args(**kw):
        a = dict(box=box, X=X, B=4, nin=1, Y=Y, nout=1, seed=seed, seedmode=1, G=G, nwrt=1,
                 per_sample=0, parts=P, nblocks=1, params=None, npar=1, threads=1)
        a.update(kw)
        return list(a.values())

    assert run(*args()) is None and Y[0, 0] == math.exp(2.0) and G[0] == 4 * math.exp(2.0)
    Y[:] = 7.0
    for kw, err in [({"box": 12345}, TypeError), ({"box": box_type()}, ValueError),
                    ({"X": X.astype(np.float32)}, ValueError), ({"X": np.ones((4, 2))[:, :1]}, (ValueError, BufferError)),
                    ({"X": np.ones((3, 1))}, ValueError), ({"Y": np.ones(4)[::1].view()[:3]}, ValueError),
                    ({"B": 5}, ValueError), ({"B": -1}, ValueError), ({"B": 2 ** 70}, ValueError),
                    ({"nin": "1"}, TypeError), ({"seed": None}, ValueError), ({"seedmode": 0}, ValueError),
                    ({"G": np.zeros(2)}, ValueError), ({"parts": b"12345678"}, (ValueError, BufferError)),
                    ({"params": np.zeros(3)}, ValueError), ({"threads": 2 ** 40}, ValueError),
                    ({"X": "abcdefgh"}, TypeError)]:
        with pytest.raises(err):
            run(*args(**kw))
    ro = np.zeros((4, 1)); ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        run(*args(Y=ro))
    with pytest.raises(TypeError):
        run(box)
    assert (Y == 7.0).all() and not ro.any()
    # counts the buffers agree with but the program does not: C's own check (TA_EARG)
    st = run(*args(X=np.ones((4, 2)), nin=2))
    assert st is not None and st[0] == tapead._c.lib.TA_EARG and (Y == 7.0).all()
    # a failing row: the Program's error, naming the row
    bad = np.array([[0.0], [1.0], [400.0], [1.0]])
    with pytest.raises(OverflowError, match="row 2"):
        p(bad)


# ------------------------------------------ ids read after the caller's code
def test_compile_reads_ids_after_iterating_its_arguments():
    """compile() runs the caller's code (iterating inputs) before it reads
    the outputs' ids: an iterator that moves the output to a new node, the
    old one reclaimed, must not hand C an id that names another Value."""
    x = Value(1.0)
    (y,) = lonely([0.0])
    others = []

    def inputs():
        others.extend(move_and_reclaim([y], 5.0))     # y: a new leaf, a parameter
        yield x
    prog = tapead.compile(y, inputs())
    assert list(prog.params) == [5.0]
    np.testing.assert_array_equal(prog(np.array([[0.0], [2.0]]))[:, 0], [5.0, 5.0])
    y.data = 6.0                                        # read from its node at each run
    np.testing.assert_array_equal(prog(np.array([[0.0]]))[:, 0], [6.0])
    assert untouched(others)


def test_set_data_reads_ids_after_converting_the_array():
    vals = lonely([1.0, 2.0])
    others = []

    class Moving:
        def __array__(self, dtype=None, copy=None):
            others.extend(move_and_reclaim(vals[:1], 9.0))
            return np.array([3.0, 4.0])
    tapead.set_data(vals, Moving())
    assert [v.data for v in vals] == [3.0, 4.0]
    assert untouched(others)
