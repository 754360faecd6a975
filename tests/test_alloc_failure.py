"""Allocation failure, injected: every C allocation goes through csrc/tape/alloc.c,
and lib.ta_fail_alloc(n) makes the n-th one from now fail (once).

For each operation, n sweeps 0, 1, 2, ... until the operation no longer
reaches the armed failure, so every allocation it makes fails once.  Each
failure must be a MemoryError (never a crash, never a wrong number), leave
the tape's invariants intact (ta_validate), leave the data and grad of
Values that existed before exactly as they were, and leave the library
usable: the same operation, run again, gives the reference result."""
import gc
import math

import numpy as np
import pytest

import tapead
import tapead.nn as tnn
from tapead import Value, _c
from tapead.optim import SGD, Adam

from conftest import on_fresh_tape

lib = _c.lib


@pytest.fixture(autouse=True)
def disarm():
    lib.ta_fail_alloc(-1)
    yield
    lib.ta_fail_alloc(-1)


def bystanders():
    """A graph recorded before the failures, with gradients, that must not change."""
    a, b = Value(1.5), Value(-2.0)
    c = (a * b + a.tanh()) ** 2
    c.backward()
    return [a, b, c]


def state(vals):
    return [(v.data, v.grad) for v in vals]


def same(x, y):
    """Equal results, nan where the reference has nan."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return x.shape == y.shape and bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))


def fails_cleanly(op, max_n=400):
    """Run op() with allocation n failing, n = 0, 1, ... (see the module doc).
    op returns a result to compare (numbers); returns how many allocations
    op reached."""
    keep = bystanders()
    ref = op()
    failures = 0
    for n in range(max_n):
        before = state(keep)
        lib.ta_fail_alloc(n)
        try:
            out = op()
        except MemoryError:
            assert lib.ta_fail_alloc(-1) == 0, "MemoryError without the injected failure"
            failures += 1
            assert lib.ta_validate() == 0
            assert state(keep) == before
            assert same(op(), ref)            # usable again, same answer
            continue
        armed = lib.ta_fail_alloc(-1)
        assert same(out, ref), (n, out, ref)  # a failure it recovered from must not change the answer
        assert lib.ta_validate() == 0
        assert state(keep) == before
        if armed:
            assert n == 0 or failures > 0   # (a recovered failure is fine; none at all is not a sweep)
            return n
    raise AssertionError(f"op still allocating after {max_n} allocations")


def test_hook_counts_allocations():
    lib.ta_fail_alloc(5)
    assert lib.ta_fail_alloc(-1) == 1          # still armed: nothing allocated
    assert lib.ta_fail_alloc(-1) == 0


def test_new_tape_and_every_segment_boundary():
    """A thread's first op creates its tape; every 2048th op opens a segment
    (and sometimes grows the segment table).  Fail each, in turn."""
    def record():
        s, x = Value(1.0), Value(0.5)
        for _ in range(5000):
            s = s * 0.999 + x
        s.backward()
        return [s.data, x.grad]
    assert fails_cleanly(lambda: on_fresh_tape(record)) >= 3


def test_failed_op_at_a_segment_boundary_leaves_the_tape_as_it_was():
    def run():
        keep = bystanders()
        x = Value(2.0)
        ys = []
        while tapead.tape_stats()["nodes"] < tapead.tape_stats()["capacity"]:
            ys.append(x * 3.0)          # fill the current segment exactly
        st = tapead.tape_stats()
        lib.ta_fail_alloc(0)            # the next op needs a new segment
        with pytest.raises(MemoryError):
            x + 1.0
        assert lib.ta_fail_alloc(-1) == 0
        assert tapead.tape_stats() == st
        assert lib.ta_validate() == 0
        assert state(keep) == [(1.5, keep[0].grad), (-2.0, keep[1].grad), (keep[2].data, 1.0)]
        y = x + 1.0                     # and then it works
        assert y.data == 3.0 and all(v.data == 6.0 for v in ys)
        return True
    assert on_fresh_tape(run)


def test_leaves_from_an_array():
    arr = np.linspace(-1, 1, 5000)

    def op():
        xs = tapead.values(arr)
        return tapead.data(xs)
    fails_cleanly(op)


def test_recompute_and_guards():
    def op():
        a, b = Value(0.3), Value(-1.2)
        y = (a * b).exp() + (a - b) ** 2
        big = a > b                     # a comparison records a guard
        a.data = 0.7
        y.recompute()
        return [y.data, float(big)]
    assert fails_cleanly(op) >= 1


def test_compiled_program_run_and_grad():
    def op():
        x, w = Value(0.0), Value(0.5)
        y = (x * w).tanh() + w ** 2
        p = tapead.compile(y, [x], wrt=[w])
        X = np.linspace(-2, 2, 300).reshape(-1, 1)
        out, g = p.grad(X)
        _, gs = p.grad(X, per_sample=True)
        return np.concatenate([p(X).ravel(), out.ravel(), g.ravel(), gs.ravel()])
    assert fails_cleanly(op) >= 5


def test_program_on_threads_pickled_and_loaded():
    import pickle

    tapead.clear_guards()       # earlier tests' comparisons would bind the program

    def op():
        x, w, b = Value(0.0), Value(0.5), Value(-0.25)
        h = (x * w + b).tanh()
        y = h * h + (h * w + x).relu()       # a dot, uniform nodes, row ops
        p = tapead.compile(y, [x], wrt=[w, b])
        X = np.linspace(-2, 2, 3000).reshape(-1, 1)  # 3 blocks: 2 threads, 2 workspaces
        out, g = p.grad(X, threads=2)
        _, gs = p.grad(X, per_sample=True, threads=3)
        q = pickle.loads(pickle.dumps(p))    # load: checks, the code, a workspace
        q.params = [1.0, 0.0]
        return np.concatenate([out.ravel(), g, gs.ravel(), q(X, threads=2).ravel(), q.params])
    assert fails_cleanly(op) >= 10


def test_higher_order():
    def op():
        x, y = Value(0.7), Value(-0.4)
        f = (x * y).sin() * x.exp() + y ** 3
        g1 = tapead.grad(f, [x, y])
        (dx, dy) = tapead.grad(f, [x, y], create_graph=True)
        g2 = tapead.grad(dx, [x, y])
        return np.concatenate([g1, [dx.data, dy.data], g2,
                               tapead.hvp(f, [x, y], [1.0, -2.0]),
                               tapead.hessian(f, [x, y]).ravel(),
                               tapead.jacobian([f, dx], [x, y]).ravel()])
    assert fails_cleanly(op) >= 5


def test_forward_mode_and_wengert():
    def op():
        x, y = Value(0.7), Value(-0.4)
        f = (x * y).cos() / (1 + x ** 2)
        w = tapead.wengert(f, [x, y], [1.0, 0.5])
        return [tapead.jvp(f, [x, y], [1.0, 0.5]), w[-1]["tangent"], w[-1]["adjoint"], len(w)]
    assert fails_cleanly(op) >= 1


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: Adam(ps, lr=0.01)])
def test_optimiser_step_is_all_or_nothing(make):
    params = [Value(float(i) / 7) for i in range(50)]

    def op():
        for p in params:
            p.data = 0.5
        opt = make(params)
        loss = sum((p * p for p in params), Value(0.0))
        opt.zero_grad()
        loss.backward()
        grads = [p.grad for p in params]
        try:
            opt.step()
        except MemoryError:             # a failed step moves no parameter
            assert all(p.data == 0.5 for p in params) and [p.grad for p in params] == grads
            raise
        return [p.data for p in params]
    fails_cleanly(op)


def test_fused_layer_forward_backward():
    import random
    random.seed(0)
    model = tnn.MLP(3, [8, 1])

    def op():
        x = [Value(0.1), Value(-0.2), Value(0.3)]
        out = model(x)
        model.zero_grad()
        out.backward()
        return [out.data] + [p.grad for p in model.parameters()]
    fails_cleanly(op)


def test_no_grad_arena():
    def op():
        x = Value(2.0)
        with tapead.no_grad():
            y = x * 3 + 1               # the first no_grad result creates the arena
        z = y * x                       # and using it promotes it into the graph
        z.backward()
        return [y.data, z.data, x.grad]
    # each run on a new thread, so on a new tape with no arena yet
    assert fails_cleanly(lambda: on_fresh_tape(op)) >= 3


def test_collect_after_failures_frees_everything():
    def run():
        for n in range(4):
            lib.ta_fail_alloc(n)
            try:
                s = Value(1.0)
                for _ in range(6000):
                    s = s + 1.0
            except MemoryError:
                pass
            lib.ta_fail_alloc(-1)
        s = None
        tapead.collect()
        st = tapead.tape_stats()
        assert lib.ta_validate() == 0
        return st["nodes"]
    assert on_fresh_tape(run) <= 2 * 2048
    assert not math.isnan(Value(1.0).data)


def all_or_nothing(call, max_n=200):
    """call() records many nodes in one C call: every injected failure must
    leave the node count exactly as before (it records all or nothing)."""
    for n in range(max_n):
        nodes = tapead.tape_stats()["nodes"]
        lib.ta_fail_alloc(n)
        try:
            call()
        except MemoryError:
            lib.ta_fail_alloc(-1)
            assert tapead.tape_stats()["nodes"] == nodes, n
            assert lib.ta_validate() == 0
            continue
        if lib.ta_fail_alloc(-1):
            return n
    raise AssertionError("still allocating")


def test_bulk_calls_record_all_or_nothing():
    """values(), grad(create_graph=True), the fused Layer and a no_grad
    input's promotion each record many nodes in one C call, over several
    segments; a failure midway leaves none of them on the tape."""
    def run():
        arr = np.arange(5000.0)
        keep = []
        assert all_or_nothing(lambda: keep.append(tapead.values(arr))) >= 3

        x = Value(0.3)
        f = x
        for _ in range(1500):
            f = (f * x).tanh() + x
        assert all_or_nothing(lambda: keep.append(tapead.grad(f, [x], create_graph=True))) >= 2

        import random
        random.seed(1)
        layer = tnn.Layer(40, 60)       # one C call: 60 * 81 nodes over 3 segments
        xs = [Value(float(i) / 40) for i in range(40)]
        assert all_or_nothing(lambda: keep.append(layer(xs))) >= 2

        with tapead.no_grad():
            c = x * 2
        assert all_or_nothing(lambda: keep.append(c * c)) >= 0
        return True
    assert on_fresh_tape(run)


def test_custom_nodes():
    """A custom node allocates its side-table entry and its inputs: each
    failure is a MemoryError that records nothing."""
    def record():
        x, y = Value(0.5), Value(2.0)
        outs = []
        for k in range(70):          # past the side table's first growth
            c = Value(x.data * y.data, (x, y), 'mul')

            def _backward(c=c):
                x.grad += y.data * c.grad
                y.grad += x.data * c.grad
            c._backward = _backward
            outs.append(c + tapead.precomputed(2.0 * x.data, [x], [2.0], name='dbl'))
        s = sum(outs)
        s.backward()
        return [s.data, x.grad, y.grad]
    assert fails_cleanly(lambda: on_fresh_tape(record)) >= 3


def test_lost_guards_when_their_reach_cannot_grow():
    """A collection that loses a guard keeps what it read that lives on; if
    that list cannot grow, the collection still completes, and every replay
    refuses (GuardError: it can no longer tell which the lost guard binds)
    until clear_guards()."""
    def run():
        x = Value(0.5)
        a = x * 2.0
        pad = [x * 1.0 for _ in range(3000)]    # b lands in another segment
        b = 1.0 - x
        out = max(a, b)
        del b, pad
        for _ in range(5):                      # (on PyPy a hold goes a collection later)
            gc.collect()
            lib.ta_fail_alloc(0)
            tapead.collect()                    # the one that loses the guard: its one
            armed = lib.ta_fail_alloc(-1)       # allocation, the reach's, fails
            if lib.ta_guard_lost():
                assert not armed
                break
        assert tapead.guard_count() == 0 and lib.ta_validate() == 0
        u = Value(3.0)
        for replay in (lambda: tapead.compile(out, [x]), lambda: tapead.compile(u * u, [u]),
                       lambda: (u * u).recompute()):
            with pytest.raises(tapead.GuardError, match="1 comparison .* forgotten"):
                replay()
        tapead.clear_guards()
        prog = tapead.compile(u * u, [u])
        assert prog(np.array([[4.0]]))[0, 0] == 16.0 and out.data == 1.0
        return True
    assert on_fresh_tape(run)
