"""tapead.jit: a function recorded once per shape of its arguments and
replayed in C.  The reference is the same function run eagerly on Values
(its outputs' .data, and the .grad backward() leaves), bit for bit."""
import math
import random

import numpy as np
import pytest

import tapead
from tapead import Value, jit


def model(seed=0, n=6):
    rng = random.Random(seed)
    return [Value(rng.uniform(-1, 1)) for _ in range(n)]


def loss_of(w):
    def loss(xs, y):
        """A length-dependent graph: a weighted sum of xs through tanh, squared error."""
        h = sum((w[i % len(w)] * x for i, x in enumerate(xs)), w[0] * 0.5)
        return (h.tanh() - y) ** 2 + (w[1] * w[2]).exp() * 0.01
    return loss


def eager(fn, w, *args):
    """fn(*args) run on Values: (its output's data, the grads backward() adds)."""
    for p in w:
        p.grad = 0.0
    def values(a):
        return [values(v) for v in a] if isinstance(a, (list, tuple)) else Value(float(a))
    out = fn(*[values(a) for a in args])
    out.backward()
    return out.data, [p.grad for p in w]


def test_each_call_is_the_eager_functions_bits_and_each_shape_records_once():
    w = model()
    fn = loss_of(w)
    step = jit(fn, wrt=w)
    rng = np.random.default_rng(0)
    for n in (3, 5, 3, 5, 7, 3):
        xs, y = rng.normal(size=n).tolist(), float(rng.normal())
        want_y, want_g = eager(fn, w, xs, y)
        for p in w:
            p.grad = 0.0
        got = step(xs, y)
        assert got == want_y and [p.grad for p in w] == want_g
    assert sorted(len(s[0]) for s in step.programs) == [3, 5, 7] and step.recordings == 3


def test_gradients_add_to_grad_as_backward_does():
    w = model(1)
    step = jit(loss_of(w), wrt=w)
    for p in w:
        p.grad = 0.0
    step([0.5, -1.0], 0.25)
    g = [p.grad for p in w]
    for p in w:
        p.grad = 1.0
    step([0.5, -1.0], 0.25)
    step([0.5, -1.0], 0.25)
    assert [p.grad for p in w] == [(1.0 + gi) + gi for gi in g]


def test_a_comparison_that_flips_records_again():
    """A comparison of Values is a guard: arguments for which it goes the
    other way record the shape again, and give the eager function's bits."""
    w = model(2)

    def fn(xs):
        s = sum(wi * x for wi, x in zip(w, xs))
        return s * s if s > 0 else -s * w[0]
    step = jit(fn, wrt=w)
    calls = ([1.0, 2.0], [-1.0, -2.0], [1.0, 2.0], [0.5, 0.1])
    for xs in calls:
        want_y, want_g = eager(fn, w, xs)
        for p in w:
            p.grad = 0.0
        assert step(xs) == want_y and [p.grad for p in w] == want_g
    signs = [sum(wi.data * x for wi, x in zip(w, xs)) > 0 for xs in calls]
    assert step.recordings == 1 + sum(a != b for a, b in zip(signs, signs[1:])) >= 3
    assert len(step.programs) == 1


def test_batch_sums_the_calls_gradients_the_same_whatever_the_threads():
    w = model(3)
    fn = loss_of(w)
    step = jit(fn, wrt=w)
    rng = np.random.default_rng(3)
    calls = [(rng.normal(size=n).tolist(), float(rng.normal())) for n in (4, 4, 2, 4, 2, 6) * 200]
    grads, outs = [], []
    for threads in (1, 2, 3):
        for p in w:
            p.grad = 0.0
        outs.append(step.batch(calls, threads=threads))
        grads.append([p.grad for p in w])
    assert grads[0] == grads[1] == grads[2] and outs[0] == outs[1] == outs[2]
    singly = []
    for args in calls:
        singly.append(step(*args))
    assert outs[0] == singly                     # each call's outputs are its own run's
    want = np.zeros(len(w))
    for args in calls:
        want += np.array(eager(fn, w, *args)[1])
    assert np.allclose(grads[0], want, rtol=1e-12, atol=1e-12)


def test_a_batch_of_several_shapes_records_again_where_a_comparison_flips():
    """Several shapes side by side: a call whose comparison goes the other
    way is run again on its own (recorded again) and gives the eager bits;
    the others keep their Programs' results."""
    w = model(4)

    def fn(xs):
        s = sum(wi * x for wi, x in zip(w, xs))
        return s * s if s > 0 else -s * w[0]
    step = jit(fn, wrt=w)
    step([1.0, 2.0]), step([1.0, 2.0, 3.0])          # both shapes recorded with s > 0
    calls = [[1.0, 2.0], [-1.0, -2.0, -3.0], [0.5, 0.25, 0.125], [-3.0, 1.0], [2.0, 1.0]]
    for threads in (1, 2):
        for p in w:
            p.grad = 0.0
        outs = step.batch(calls, threads=threads)
        got = [p.grad for p in w]
        want = [eager(fn, w, xs) for xs in calls]
        assert outs == [y for y, _ in want]
        assert np.allclose(got, np.sum([g for _, g in want], axis=0), rtol=1e-13, atol=1e-13)


def test_a_failing_call_in_a_batch_of_several_shapes_is_named_and_adds_nothing():
    w = model(5)
    step = jit(lambda xs: sum((wi * x for wi, x in zip(w, xs)), w[0] * 0.0).log(), wrt=w)
    step([1.0, 1.0]), step([1.0, 1.0, 1.0])
    for p in w:
        p.grad = 0.25
    bad = [[1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [-9.0, -9.0, -9.0]]
    for threads in (1, 2):
        with pytest.raises(ValueError, match="log.*at row 2"):
            step.batch(bad, threads=threads)
        assert [p.grad for p in w] == [0.25] * len(w)


def test_programs_run_side_by_side_give_each_its_own_bits():
    """replay.grad_many: each run is the bits of that Program's grad alone,
    whatever the threads; a failing run is its exception, the others run."""
    from tapead import replay
    rng = np.random.default_rng(7)
    progs, Xs = [], []
    for n in (3, 5, 8, 2):
        x = [Value(0.0) for _ in range(n)]
        w = model(n, n)
        y = sum(((wi * xi).tanh() for wi, xi in zip(w, x)), Value(0.0)) * x[0].exp()
        progs.append(tapead.compile(y, x, wrt=w + x))
        Xs.append(rng.normal(size=(1 + n * 100, n)))
    Xs[2][37, 0] = 1e6                                  # exp overflows at its row 37
    want = []
    for p, X in zip(progs, Xs):
        try:
            want.append(p.grad(X, threads=1))
        except OverflowError as e:
            want.append(e)
    assert isinstance(want[2], OverflowError) and not any(isinstance(v, Exception) for v in want[:2] + want[3:])
    for threads in (1, 2, 3):
        got = replay.grad_many([(p, X, None, 0) for p, X in zip(progs, Xs)], threads)
        for g, v in zip(got, want):
            if isinstance(v, Exception):
                assert type(g) is type(v) and str(g) == str(v) and "row 37" in str(g)
            else:
                assert g[0].tobytes() == v[0].tobytes() and g[1].tobytes() == v[1].tobytes()


def test_several_outputs_come_back_as_a_list_and_their_sum_is_differentiated():
    w = model(4)
    step = jit(lambda xs: [w[0] * xs[0], (w[1] * xs[1]).exp()], wrt=w)
    for p in w:
        p.grad = 0.0
    out = step([2.0, 0.5])
    assert out == [w[0].data * 2.0, math.exp(w[1].data * 0.5)]
    assert w[0].grad == 2.0 and w[1].grad == 0.5 * math.exp(w[1].data * 0.5)


def test_native_programs_give_the_same_bits():
    w = model(5)
    fn = loss_of(w)
    slow, fast = jit(fn, wrt=w), jit(fn, wrt=w, native="lanes2")
    for xs in ([0.1, 0.2, 0.3], [1.0, -2.0, 0.5], [0.0, 0.0, 1.0]):
        for step in (slow, fast):
            for p in w:
                p.grad = 0.0
            step.result = (step(xs, 0.3), [p.grad for p in w])
        assert slow.result == fast.result
    assert all(p.native for p in fast.programs.values())


def test_bad_arguments_and_results_are_named():
    w = model(6)
    step = jit(lambda xs: w[0] * xs[0], wrt=w)
    with pytest.raises(TypeError, match="argument 0\\[1\\] is str"):
        step([1.0, "a"])
    with pytest.raises(TypeError, match="is a Value"):
        step([w[1]])
    with pytest.raises(TypeError, match="must return a Value"):
        jit(lambda xs: 3.0, wrt=w)([1.0])
    with pytest.raises(TypeError, match="fn must be callable"):
        jit(3, wrt=w)
    assert "0 shapes recorded" in repr(step) and step.recordings == 0


def test_a_recording_puts_the_threads_guards_back_as_they_were():
    """jit records with the thread's guards put aside and puts them back:
    the user's comparison made before still binds the user's recompute (a
    flip is refused, not replayed on the recorded branch), fn's own
    comparisons do not stay on the thread, and once the recordings' Values
    are freed a compile reading wrt is not refused for them."""
    import gc
    from tapead.errors import GuardError
    tapead.clear_guards()
    a = Value(2.0)
    y = a * 3.0 if a > 1.0 else a * -1.0
    assert tapead.guard_count() == 1
    w = model(6, 2)

    def fn(xs):
        s = sum(wi * x for wi, x in zip(w, xs))
        return s * s if s > 0 else -s * w[0]
    step = jit(fn, wrt=w)
    step([1.0, 2.0]), step([-1.0, -2.0])             # two recordings, a comparison each
    assert step.recordings == 2 and tapead.guard_count() == 1
    gc.collect()
    a.data = 0.5                                     # the user's comparison flips
    with pytest.raises(GuardError):
        y.recompute()
    assert y.data == 6.0
    x = Value(1.5)
    prog = tapead.compile(w[0] * x + w[1], [x], wrt=w)
    assert prog.guards == 0 and prog.grad(np.array([[2.0]]))[1].tolist() == [2.0, 1.0]


def test_a_recording_that_raises_puts_the_guards_back():
    tapead.clear_guards()
    a = Value(1.0)
    assert a > 0.5

    def fn(xs):
        if xs[0] * a > 0.0:
            raise RuntimeError("fn fails")
        return xs[0] * a
    step = jit(fn, wrt=[a])
    with pytest.raises(RuntimeError, match="fn fails"):
        step([1.0])
    assert tapead.guard_count() == 1 and not step.programs
