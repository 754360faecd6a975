"""Which guards bind a Program or a recompute (csrc/diff/subtape.c: ta_bind_guards).

A guard binds only if its operands read a leaf the program reads (its inputs,
the leaves of the outputs' cone, and, closed under the rule, the leaves a bound
guard brings in): a comparison made earlier in the thread over unrelated Values
must not add parameters, guards or errors.  Numbers against closed forms."""
import math

import numpy as np
import pytest

import tapead
from tapead import Value, GuardError
from conftest import collect_all, on_fresh_tape


def col(*xs):
    return np.array([[x] for x in xs], dtype=float)


def unrelated_comparisons():
    """A training loop's leftovers: comparisons over Values the later
    programs never read (a running best, a log of a loss)."""
    a, b = Value(1.0), Value(2.0)
    best = a * b
    assert (best < b * 1.5) is True         # a < ... over a, b
    assert (a.log() < 1) is True            # log(a): a domain error at a <= 0
    return a, b, best


# ------------------------------------------------------------ compile
def test_unrelated_earlier_comparison_leaves_compile_alone():
    tapead.clear_guards()
    a, b, best = unrelated_comparisons()
    w, x = Value(3.0), Value(2.0)
    y = w * x + 1
    prog = tapead.compile(y, [x], wrt=[x, w])
    assert prog.guards == 0
    assert list(prog.params) == [3.0]                  # w alone, not a and b
    X = col(-1.0, 0.0, 2.5)
    np.testing.assert_array_equal(prog(X)[:, 0], 3.0 * X[:, 0] + 1)
    a.data = 10.0              # would flip best < 1.5 b
    np.testing.assert_array_equal(prog(X)[:, 0], 3.0 * X[:, 0] + 1)
    a.data = -1.0              # log(a) would raise
    np.testing.assert_array_equal(prog(X)[:, 0], 3.0 * X[:, 0] + 1)
    Y, G = prog.grad(X)        # d/dx (w x + 1) = w, d/dw = x, summed over the rows
    np.testing.assert_array_equal(Y[:, 0], 3.0 * X[:, 0] + 1)
    np.testing.assert_array_equal(G, [3.0 * len(X), X[:, 0].sum()])


def test_branch_on_a_value_computed_only_for_the_comparison_binds():
    # the compared node x*x is not in y's cone, but it reads input x
    tapead.clear_guards()
    unrelated_comparisons()
    x = Value(1.0)
    y = x * 2.0 if (x * x) < 3 else -x
    prog = tapead.compile(y, [x])
    assert prog.guards == 1 and len(prog.params) == 0
    np.testing.assert_array_equal(prog(col(1.0, -1.5, 1.7))[:, 0], [2.0, -3.0, 3.4])
    with pytest.raises(GuardError, match="row 1"):
        prog(col(1.0, 2.0))                       # 2*2 < 3 is False: the branch flips


def test_a_comparison_of_an_input_the_outputs_do_not_read_binds():
    tapead.clear_guards()
    w, x = Value(4.0), Value(-1.0)
    y = w * 2.0 if x < 0 else w * 3.0
    prog = tapead.compile(y, [x])
    assert prog.guards == 1 and list(prog.params) == [4.0]
    np.testing.assert_array_equal(prog(col(-1.0, -7.0))[:, 0], [8.0, 8.0])
    with pytest.raises(GuardError, match="row 0"):
        prog(col(0.5))


def test_a_comparison_of_a_param_with_an_unrelated_leaf_binds_and_closes():
    # p < u reads param p, so it binds; u comes in as a parameter (read from
    # its Value like every leaf of a program); then u < 5 reads a leaf the
    # program reads, so it binds too; v < 0 reads neither and does not
    tapead.clear_guards()
    p, u, v, x = Value(1.0), Value(2.0), Value(-3.0), Value(0.5)
    assert (u < 5) is True and (v < 0) is True
    assert (p < u) is True
    y = p * x
    prog = tapead.compile(y, [x], wrt=[p])
    assert prog.guards == 2
    assert list(prog.params) == [1.0, 2.0]          # p (wrt) first, then u
    X = col(0.5, -2.0)
    np.testing.assert_array_equal(prog(X)[:, 0], X[:, 0])
    np.testing.assert_array_equal(prog(X, params=[1.5, 4.0])[:, 0], 1.5 * X[:, 0])
    with pytest.raises(GuardError, match="<"):
        prog(X, params=[3.0, 2.0])                  # p < u flips
    with pytest.raises(GuardError, match="<"):
        prog(X, params=[1.0, 6.0])                  # u < 5 flips
    v.data = 1.0                                     # v is not the program's
    np.testing.assert_array_equal(prog(X)[:, 0], X[:, 0])


def test_guards_recorded_after_the_outputs_bind_too():
    # a comparison made after y may have chosen y (y if x*5 <= 100 else z):
    # it reads input x, so it binds, and x*5 is computed at each row to check it
    tapead.clear_guards()
    x = Value(1.0)
    y = x * 2.0
    assert (x * 5 > 100) is False
    prog = tapead.compile(y, [x])
    assert prog.guards == 1 and len(prog.params) == 0
    np.testing.assert_array_equal(prog(col(1.0, 20.0, -7.0))[:, 0], [2.0, 40.0, -14.0])
    with pytest.raises(GuardError, match="row 1"):
        prog(col(1.0, 20.5))                    # 102.5 > 100: the comparison flips
    x.data = 21.0
    with pytest.raises(GuardError):
        y.recompute()
    assert y.data == 2.0


def test_binding_survives_pickling():
    import pickle
    tapead.clear_guards()
    unrelated_comparisons()
    x = Value(1.0)
    y = x * 2.0 if (x * x) < 3 else -x
    prog = pickle.loads(pickle.dumps(tapead.compile(y, [x])))
    assert prog.guards == 1 and len(prog.params) == 0
    np.testing.assert_array_equal(prog(col(1.5))[:, 0], [3.0])
    with pytest.raises(GuardError):
        prog(col(2.0))


def test_an_unrelated_comparison_over_a_custom_node_does_not_refuse_compile():
    tapead.clear_guards()
    a = Value(0.3)
    c = tapead.precomputed(math.sin(a.data), [a], [math.cos(a.data)], name='mysin')
    assert (c < 1) is True
    x = Value(2.0)
    prog = tapead.compile(x * x, [x])
    assert prog.guards == 0
    np.testing.assert_array_equal(prog(col(3.0))[:, 0], [9.0])
    x.data = 3.0
    (x * x).recompute()
    # one that binds (it reads input x) still refuses, naming the op
    d = tapead.precomputed(math.sin(x.data), [x], [math.cos(x.data)], name='mysin2')
    y = x * 2.0 if d < 1 else x
    with pytest.raises(tapead.TapeadError, match="'mysin2'"):
        tapead.compile(y, [x])
    with pytest.raises(tapead.TapeadError, match="'mysin2'"):
        y.recompute()


def test_a_bound_guard_over_a_custom_node_refuses_whatever_slots_are_free():
    """Marking a bound guard's nodes once read a custom node's input field as
    a node ref (it holds the index of the node's entry): here entry 0 read
    as slot 0, freed, which crashed.  The replay must refuse, naming it."""
    def run():
        S = 2048
        a = [Value(0.0) for _ in range(3 * S)]      # slots 0, 1, 2
        del a
        collect_all()                                # 0, 1 freed; the next take 0, then 1
        b = [Value(0.0) for _ in range(2 * S)]
        keep = b[-1]                                 # holds slot 1
        del b
        collect_all()                                # slot 0 freed, not taken again yet
        x = Value(0.5)
        d = tapead.precomputed(math.sin(x.data), [x], [math.cos(x.data)], name="mysin3")
        y = x * 2.0
        assert (d < 1) is True                       # reads input x: binds
        with pytest.raises(tapead.TapeadError, match="'mysin3'"):
            tapead.compile(y, [x])
        with pytest.raises(tapead.TapeadError, match="'mysin3'"):
            y.recompute()
        assert keep.data == 0.0 and tapead._c.lib.ta_validate() == 0
    on_fresh_tape(run)


# ------------------------------------------------------------ selection
# A comparison that chooses which existing Value becomes the output, made
# after both candidates were recorded: it shaped the output, so it binds.
# Reference: the same Python over plain floats.
SELECT = {
    "max": lambda a, b: max(a, b),
    "ternary": lambda a, b: a if a > b else b,
    "difference": lambda a, b: a if (a - b) > 0 else b,
    "sorted": lambda a, b: sorted([a, b])[-1],
    "min": lambda a, b: min(a, b),
}


def select(name, x0, pad=0):
    """(pick, x, a, b, out, kept): out = pick(a, b) recorded at x = x0 with
    a = 2x, then (after pad nodes of x, kept alive) b = 1 - x; they cross at
    x = 1/3, so the pick flips there.  No other guard on the tape."""
    pick = SELECT[name]
    tapead.clear_guards()
    x = Value(x0)
    a = x * 2.0
    kept = [x * 1.0 for _ in range(pad)]
    b = 1.0 - x
    return pick, x, a, b, pick(a, b), kept


def python(pick, x):
    return pick(x * 2.0, 1.0 - x)


def branch(x):
    return x > 1 / 3


@pytest.mark.parametrize("x0", [0.5, 0.1])
@pytest.mark.parametrize("name", sorted(SELECT))
def test_a_selecting_comparison_binds_compile(name, x0):
    pick, x, a, b, out, _ = select(name, x0)
    prog = tapead.compile(out, [x], wrt=[x])
    assert prog.guards == 1
    same = [v for v in (-5.0, 0.0, 0.2, 0.3, 0.34, 0.5, 0.9, 7.0) if branch(v) == branch(x0)]
    np.testing.assert_array_equal(prog(col(*same))[:, 0], [python(pick, v) for v in same])
    flip = 0.2 if branch(x0) else 0.5
    with pytest.raises(GuardError, match="row 1"):
        prog(col(same[0], flip))
    Y, G = prog.grad(col(*same), per_sample=True)     # d/dx: 2 on a's side, -1 on b's
    np.testing.assert_array_equal(Y[:, 0], [python(pick, v) for v in same])
    np.testing.assert_array_equal(G[:, 0], [2.0 if python(pick, v) == 2.0 * v else -1.0
                                            for v in same])


@pytest.mark.parametrize("x0", [0.5, 0.1])
@pytest.mark.parametrize("name", sorted(SELECT))
def test_a_selecting_comparison_binds_recompute(name, x0):
    pick, x, a, b, out, _ = select(name, x0)
    for v in (0.9, 0.34, 3.0) if branch(x0) else (0.0, -2.0, 0.3):
        x.data = v
        out.recompute()
        assert out.data == python(pick, v)
    before = out.data
    x.data = 0.2 if branch(x0) else 0.5
    with pytest.raises(GuardError):
        out.recompute()
    assert out.data == before and a.data == 2.0 * v and b.data == 1.0 - v   # left as they were


@pytest.mark.parametrize("name", sorted(SELECT))
def test_a_selecting_comparison_over_segments_binds(name):
    # the candidates lie 5000 nodes apart (three segments): the guard's
    # nodes join the program, b (or a - b) above the output a on the tape
    pick, x, a, b, out, kept = select(name, 0.5, pad=5000)
    prog = tapead.compile(out, [x])
    # x, a and b (and a - b, compared to 0): not the padding between them
    assert prog.guards == 1 and prog.nodes == 3 + (name == "difference")
    np.testing.assert_array_equal(prog(col(0.5, 2.0))[:, 0], [python(pick, 0.5), python(pick, 2.0)])
    with pytest.raises(GuardError, match="row 0"):
        prog(col(0.0))
    x.data = 0.0
    with pytest.raises(GuardError):
        out.recompute()
    x.data = 2.0
    out.recompute()
    assert out.data == python(pick, 2.0)
    assert a.data == 4.0 and b.data == -1.0             # both recomputed, to check the guard


# ------------------------------------------------------------ lost guards
# A guard whose compared Values were freed (a candidate max(a, b) did not
# pick, a node computed only to compare) can no longer be checked; a replay
# it would have bound refuses with GuardError instead of replaying the
# recorded branch everywhere.  After clear_guards() and recording again
# (the compared Values held), the replay gives Python's numbers.
def apart(x):
    """Nodes enough to put what comes next in a segment of its own (held
    by the caller, dropped with the rest)."""
    return [x * 1.0 for _ in range(3000)]


A_WINS = {"min": 0.1}          # an x0 where pick(a, b) is a; else 0.5


def lose_choice(name, before=lambda x, out: None):
    """(pick, x, out, kept): out = pick(a, b) recorded at x0 (out is a),
    b = 1 - x in another segment; kept = before(x, out), run while b lives;
    then b, and with it the guard that chose a, freed."""
    pick, x0 = SELECT[name], A_WINS.get(name, 0.5)
    tapead.clear_guards()
    x = Value(x0)
    a = x * 2.0
    pad = apart(x)
    b = 1.0 - x
    out = pick(a, b)
    assert out is a
    kept = before(x, out)
    del b, pad
    collect_all()
    assert tapead.guard_count() == 0
    return pick, x, out, kept


def lose_compare():
    """(x, y): y = x*2 if z < 3 else -x recorded at x = 1, z = x*x alone in
    a segment; then z, and with it the guard, freed."""
    tapead.clear_guards()
    x = Value(1.0)
    pad = apart(x)
    z = x * x
    pad2 = apart(x)
    y = x * 2.0 if z < 3 else -x
    del z, pad, pad2
    collect_all()
    assert tapead.guard_count() == 0
    return x, y


def compare_python(v):
    return v * 2.0 if v * v < 3 else -v


@pytest.mark.parametrize("name", sorted(SELECT))
def test_a_lost_choice_refuses_compile_and_recompute(name):
    pick, x, out, _ = lose_choice(name)
    with pytest.raises(GuardError, match=r"1 comparison .* forgotten .* tapead\.clear_guards\(\) "
                                         r"before recording"):
        tapead.compile(out, [x])
    before = out.data
    x.data = 0.1 if name != "min" else 0.5        # where pick(a, b) is b
    with pytest.raises(GuardError, match="forgotten"):
        out.recompute()
    assert out.data == before                      # left as it was
    # the remedy: clear, record again with the candidates held, replay
    tapead.clear_guards()
    x.data = A_WINS.get(name, 0.5)
    a, b = x * 2.0, 1.0 - x
    out = pick(a, b)
    prog = tapead.compile(out, [x])
    assert prog.guards == 1
    same = [v for v in (-5.0, 0.0, 0.2, 0.34, 0.5, 0.9) if branch(v) == branch(x.data)]
    np.testing.assert_array_equal(prog(col(*same))[:, 0], [python(pick, v) for v in same])
    with pytest.raises(GuardError, match="row 0"):
        prog(col(0.5 if x.data < 1 / 3 else 0.1))
    x.data = same[0]
    out.recompute()
    assert out.data == python(pick, same[0])


def test_a_lost_comparison_of_a_node_computed_only_to_compare_refuses():
    x, y = lose_compare()
    with pytest.raises(GuardError, match="1 comparison .* forgotten"):
        tapead.compile(y, [x])
    x.data = 2.0                                   # 4 < 3 would flip
    with pytest.raises(GuardError, match="forgotten"):
        y.recompute()
    assert y.data == 2.0
    tapead.clear_guards()
    x.data = 1.0
    z = x * x
    y = x * 2.0 if z < 3 else -x
    prog = tapead.compile(y, [x])
    assert prog.guards == 1
    np.testing.assert_array_equal(prog(col(1.0, -1.5, 1.7))[:, 0],
                                  [compare_python(v) for v in (1.0, -1.5, 1.7)])
    with pytest.raises(GuardError, match="row 1"):
        prog(col(1.0, 2.0))
    x.data = 1.5
    y.recompute()
    assert y.data == compare_python(1.5) and z.data == 2.25


def test_a_cached_recompute_plan_refuses_once_its_guard_is_lost():
    def plan(x, out):
        x.data = 0.9
        out.recompute()                            # the plan, with the guard
        assert out.data == 1.8

    _, x, out, _ = lose_choice("max", plan)
    x.data = 0.1                                   # Python: max(0.2, 0.9) = 0.9
    with pytest.raises(GuardError, match="forgotten"):
        out.recompute()
    assert out.data == 1.8


def test_a_program_compiled_before_the_loss_keeps_its_guard():
    import pickle
    _, x, out, prog = lose_choice("max", lambda x, out: tapead.compile(out, [x]))
    for p in (prog, pickle.loads(pickle.dumps(prog))):
        assert p.guards == 1
        np.testing.assert_array_equal(p(col(0.5, 2.0))[:, 0], [1.0, 4.0])
        with pytest.raises(GuardError, match="row 1"):
            p(col(0.5, 0.1))


def test_a_lost_comparison_reaching_only_freed_values_refuses_nothing():
    # a loop's scratch: fresh leaves, compared, all freed; nothing they read
    # lives, so no replay can vary it
    tapead.clear_guards()

    def scratch(v):
        u = Value(v)
        pad = apart(u)
        w = u * 3.0
        return (w < 1.0) + (u > w)

    for v in (0.1, 0.5, 2.0):
        scratch(v)
        collect_all()
    assert tapead.guard_count() == 0 and lib.ta_guard_lost() == 6
    x = Value(1.0)
    y = x * 2.0 if x > 0 else -x
    prog = tapead.compile(y, [x])
    assert prog.guards == 1
    np.testing.assert_array_equal(prog(col(1.0, 3.0))[:, 0], [2.0, 6.0])
    x.data = 4.0
    y.recompute()
    assert y.data == 8.0


def test_a_lost_comparison_binds_the_replays_it_would_have_bound():
    # over p (still held) through a freed node: it refuses a replay reading
    # p, not one over q alone; the rule is closed as for live guards: once
    # a live guard p < u brings u in, a lost one over u refuses too
    tapead.clear_guards()
    p, q, u = Value(2.0), Value(3.0), Value(4.0)

    def lose(v):
        pad = apart(v)
        assert (v * v < 100) is True

    lose(p)
    collect_all()
    assert lib.ta_guard_lost() == 1
    x = Value(1.0)
    prog = tapead.compile(q * x, [x])              # q alone: nothing lost reads it
    np.testing.assert_array_equal(prog(col(2.0))[:, 0], [6.0])
    with pytest.raises(GuardError, match="forgotten"):
        tapead.compile(p * x, [x])                 # p: a parameter the lost guard read
    with pytest.raises(GuardError, match="forgotten"):
        tapead.compile(q * p, [p])                 # p: an input
    tapead.clear_guards()
    lose(u)
    collect_all()
    y = q * x
    prog = tapead.compile(y, [x])
    assert prog.guards == 0
    assert (q < u) is True                         # binds; brings u in
    with pytest.raises(GuardError, match="forgotten"):
        tapead.compile(y, [x])
    with pytest.raises(GuardError, match="forgotten"):
        y.recompute()


def test_what_a_lost_comparison_read_is_followed_when_it_is_freed_too():
    # the lost guard read h = w*3 (held); once h is freed as well, what it
    # read, w, still binds a replay that varies w
    tapead.clear_guards()
    w = Value(2.0)
    pad = apart(w)
    h = w * 3.0
    pad2 = apart(w)
    z = h + 1.0
    pad3 = apart(w)
    assert (z < 100) is True
    del z, pad2, pad3
    collect_all()
    assert lib.ta_guard_lost() == 1
    del h, pad
    collect_all()
    x = Value(1.0)
    prog = tapead.compile(x * 2.0, [x])            # nothing it reads, read by the lost guard
    assert prog.guards == 0
    with pytest.raises(GuardError, match="forgotten"):
        tapead.compile(w * x, [x])


def training_step(w, clear):
    """One step of a loop that records, compiles and checks a graph with a
    choice in it, against Python; then moves the weights."""
    if clear:
        tapead.clear_guards()
    x = Value(1.0)
    h, g = w[0] * x, w[1] * x + 1.0
    loss = max(h, g) * max(h, g)
    prog = tapead.compile(loss, [x])
    assert prog.guards == 1

    def ref(v):
        return max(w[0].data * v, w[1].data * v + 1.0) ** 2

    side = (g > h)
    rows = [v for v in (0.5, 1.0, 1.5, 3.0)
            if (w[1].data * v + 1.0 > w[0].data * v) == side]
    np.testing.assert_allclose(prog(col(*rows))[:, 0], [ref(v) for v in rows], rtol=1e-15)
    loss.backward()
    for p in w:
        p.data -= 0.05 * p.grad
        p.grad = 0.0
    pad = apart(x)                                 # garbage: the tape collects


def weights():
    """Two weights, the rest of their segment filled: each step's graph
    lies in segments of its own, which go when the step's Values do."""
    w = [Value(0.5), Value(-0.3)]
    apart(w[0])
    return w


def test_a_training_loop_that_clears_guards_each_step_never_refuses():
    w = weights()
    for _ in range(12):
        training_step(w, clear=True)
        collect_all()                              # the step's graph, guards and all, freed
        assert tapead.guard_count() == 0 and lib.ta_guard_lost() == 1


def test_a_training_loop_that_forgets_clear_guards_is_told_to_call_it():
    w = weights()
    tapead.clear_guards()
    training_step(w, clear=False)
    collect_all()
    with pytest.raises(GuardError, match=r"comparisons? .* forgotten .*Call tapead\.clear_guards\(\) "
                                         r"before recording the graph you compile"):
        training_step(w, clear=False)
    tapead.clear_guards()


# ------------------------------------------------------------ recompute
def test_unrelated_earlier_comparison_leaves_recompute_alone():
    tapead.clear_guards()
    a, b, best = unrelated_comparisons()
    x = Value(2.0)
    y = x * 3.0
    a.data = 10.0              # would flip best < 1.5 b
    x.data = 4.0
    y.recompute()
    assert y.data == 12.0
    assert best.data == 2.0    # not the recompute's: left as recorded
    a.data = -1.0              # log(a) would raise
    y.recompute()
    assert y.data == 12.0


def test_recompute_same_rule_for_bound_guards():
    tapead.clear_guards()
    unrelated_comparisons()
    x, u = Value(1.0), Value(2.0)
    z = x * x
    y = x * 2.0 if z < 3 else -x               # binds: z reads x
    assert (x < u) is True                      # binds: reads x; brings in u
    assert (u < 5) is True                      # binds: u is read by the recompute now
    x.data = 1.5
    y.recompute()
    assert y.data == 3.0 and z.data == 2.25
    x.data = 2.0
    with pytest.raises(GuardError):
        y.recompute()                           # 4 < 3 flips
    x.data = 1.0
    u.data = 0.5
    with pytest.raises(GuardError):
        y.recompute()                           # x < u flips
    u.data = 6.0
    with pytest.raises(GuardError):
        y.recompute()                           # u < 5 flips
    u.data = 3.0
    y.recompute()
    assert y.data == 2.0 and z.data == 1.0


# ------------------------------------------------- against a reference
# Random graphs with comparisons anywhere among them; which guards bind, and
# which leaves become parameters, from a plain-Python model of the rule:
# V = the inputs and the leaves of the outputs' cone; a guard binds iff its
# operands' cones meet V, wherever its nodes lie on the tape (before or
# after the output); a bound guard's leaves join V; repeat until nothing
# changes.
import random  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

from tapead._c import lib  # noqa: E402

OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
       "tanh": lambda a, b: a.tanh()}

graph_st = st.tuples(
    st.lists(st.floats(-2, 2, allow_nan=False), min_size=2, max_size=6, unique=True),
    st.lists(st.tuples(st.sampled_from(sorted(OPS) + ["cmp", "cmpc"]),
                       st.integers(0, 10 ** 6), st.integers(0, 10 ** 6),
                       st.sampled_from([0.5, -0.5])), min_size=1, max_size=30),
    st.integers(0, 10 ** 6), st.lists(st.integers(0, 10 ** 6), max_size=3))


def build(leafvals, steps):
    """Values in creation (tape) order, each node's inputs, and the guards'
    keys (as guard.c keeps them: one per key, constants merged)."""
    vals = [Value(v) for v in leafvals]
    deps = [() for _ in vals]
    guards = set()
    for op, i, j, c in steps:
        a, b = i % len(vals), j % len(vals)
        if op == "cmp":
            if a != b:
                out = vals[a] < vals[b]
                guards.add((a, b, out))
        elif op == "cmpc":
            out = vals[a] > c
            guards.add((a, None, out))
        else:
            vals.append(OPS[op](vals[a], vals[b]))
            deps.append((a,) if op == "tanh" else (a, b))
    return vals, deps, guards


def cone(deps, roots):
    seen, todo = set(), list(roots)
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(deps[k])
    return seen


def bound_by_rule(deps, guards, out, ins):
    """(bound guard keys, the program's leaves) by the rule, closed."""
    def leaves_of(roots):
        return {k for k in cone(deps, roots) if not deps[k]}
    leaves = leaves_of([out])
    varied = leaves | set(ins)
    bound = set()
    while True:
        new = {g for g in guards if g not in bound and
               leaves_of([k for k in g[:2] if k is not None]) & varied}
        if not new:
            return bound, leaves
        bound |= new
        for g in new:
            more = leaves_of([k for k in g[:2] if k is not None])
            leaves |= more
            varied |= more


def check_binding(vals, deps, guards, out, ins):
    """compile and recompute of vals[out] bind what the rule says."""
    bound, leaves = bound_by_rule(deps, guards, out, ins)
    y = vals[out]
    prog = tapead.compile(y, [vals[i] for i in ins])
    assert prog.guards == len(bound)
    assert sorted(prog.params) == sorted(vals[k].data for k in leaves - set(ins))
    assert lib.ta_validate() == 0
    # recompute: no inputs; leaves that are not its own move freely
    rbound, rleaves = bound_by_rule(deps, guards, out, [])
    moved = {k: vals[k].data for k in range(len(vals)) if not deps[k] and k not in rleaves}
    for k in moved:
        vals[k].data = 1e6 if k % 2 else -1e6  # flips whatever compares them
    before = y.data
    y.recompute()
    assert y.data == before                  # its own leaves did not move
    assert lib.ta_validate() == 0
    for k, v in moved.items():
        vals[k].data = v


@settings(max_examples=60, deadline=None)
@given(graph_st)
def test_binding_matches_the_rule(case):
    leafvals, steps, o, ii = case
    tapead.clear_guards()
    vals, deps, guards = build(leafvals, steps)
    check_binding(vals, deps, guards, o % len(vals), sorted({i % len(leafvals) for i in ii}))
    tapead.clear_guards()


def test_binding_matches_the_rule_across_segments():
    # four chains interleaved over several segments (2048 nodes each), new
    # leaves along the way, comparisons within chains and from chain 0 to 1:
    # chains 0 and 1 take each other's guards in (closed, through the
    # comparisons from 0 to 1, wherever they lie), 2's takes those of 3
    # that read its input from chain 3
    rng = random.Random(12)
    tapead.clear_guards()
    vals, deps, guards, chains = [], [], set(), [[] for _ in range(4)]

    def leaf(ch):
        vals.append(Value(rng.uniform(-1, 1)))
        deps.append(())
        chains[ch].append(len(vals) - 1)
    for ch in range(4):
        leaf(ch)
    for step in range(7000):
        ch = rng.randrange(4)
        r = rng.random()
        if r < 0.02:
            leaf(ch)
        elif r < 0.03:
            a = rng.choice(chains[ch][-20:])         # chain 0 compares with 1 too
            b = rng.choice(chains[1 if ch == 0 and rng.random() < 0.3 else ch][-20:])
            if a != b:
                guards.add((a, b, vals[a] < vals[b]))
        else:
            a, b = rng.choice(chains[ch][-5:]), rng.choice(chains[ch][-5:])
            vals.append((vals[a] * 0.5 + vals[b] * 0.25).tanh())
            # (three nodes on the tape; the model keeps the one a comparison sees)
            deps.append((a, b))
            chains[ch].append(len(vals) - 1)
    for ch, inch in ((0, None), (1, None), (2, 3), (3, None)):
        out = chains[ch][-1 - rng.randrange(50)]
        ins = [] if inch is None else [k for k in chains[inch] if not deps[k]][3:4]
        check_binding(vals, deps, guards, out, ins)
    tapead.clear_guards()
