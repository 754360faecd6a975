"""tapead.take: an item of a list chosen by a Value.

The references: Python's own indexing (the value taken, and which index
is an error), closed forms (the gradient reaches the item taken, and only
it: d take(xs, i) / d xs[k] is 1 for k = i, else 0), and the same graph
recorded with plain indexing, eagerly, at each index (a replay must give
its bits)."""
import math
import pickle
import random

import numpy as np
import pytest

import tapead
from tapead import Value, take


def params(n, seed=0):
    rng = random.Random(seed)
    return [Value(rng.uniform(-2, 2)) for _ in range(n)]


def matrix(rows, cols, seed=0):
    rng = random.Random(seed)
    return [[Value(rng.gauss(0, 1)) for _ in range(cols)] for _ in range(rows)]


def test_the_value_is_the_items_and_the_gradient_reaches_only_it():
    xs = params(5)
    for k in range(-5, 5):
        for x in xs:
            x.grad = 0.0
        i = Value(float(k))
        y = take(xs, i)
        assert y.data == xs[k].data and y._op == "take"
        (y * 3.0).backward()
        assert [x.grad for x in xs] == [3.0 if j == k % 5 else 0.0 for j in range(5)]
        assert i.grad == 0.0                   # a whole number: no gradient


def test_an_item_taken_twice_and_used_elsewhere_accumulates_as_backward_does():
    xs = params(4, 1)
    i, j = Value(2.0), Value(-2.0)             # both pick xs[2]
    a, b = take(xs, i), take(xs, j)
    y = a * b + xs[2].tanh() + xs[0] * a
    y.backward()
    ref = params(4, 1)                         # the same graph by plain indexing
    r = ref[2] * ref[2] + ref[2].tanh() + ref[0] * ref[2]
    r.backward()
    assert y.data == r.data and [x.grad for x in xs] == [x.grad for x in ref]


def test_rows_give_the_chosen_row_one_node_per_column():
    W = matrix(6, 3)
    row = take(W, Value(4.0))
    assert [v.data for v in row] == [w.data for w in W[4]]
    sum(v * v for v in row).backward()
    for r in range(6):
        assert [w.grad for w in W[r]] == ([2 * w.data for w in W[4]] if r == 4 else [0.0] * 3)


def test_numbers_among_the_items_are_constants():
    xs = [1.5, Value(2.5), 7]
    assert take(xs, Value(0.0)).data == 1.5 and take(xs, Value(2.0)).data == 7.0
    y = take(xs, Value(1.0)) * 2
    y.backward()
    assert xs[1].grad == 2.0


def test_a_plain_index_is_plain_indexing():
    xs = params(3)
    assert take(xs, 1) is xs[1] and take(xs, -1) is xs[2]
    W = matrix(2, 2)
    assert take(W, 0) is W[0]
    with pytest.raises(IndexError):
        take(xs, 3)
    with pytest.raises(TypeError):
        take(xs, 1.0)                          # as a list refuses a float index


@pytest.mark.parametrize("k, msg", [(3.0, "index 3 is out of range for 3 items"),
                                    (-4.0, "index -4 is out of range for 3 items"),
                                    (0.5, "the index is 0.5, not a whole number"),
                                    (math.nan, "the index is nan"),
                                    (math.inf, "the index is inf")])
def test_a_bad_index_is_an_index_error_that_records_nothing(k, msg):
    xs = params(3)
    i = Value(k)
    before = tapead.tape_stats()["nodes"]
    with pytest.raises(IndexError, match=msg):
        take(xs, i)
    with pytest.raises(IndexError, match=msg):
        take([[x] for x in xs], i)
    assert tapead.tape_stats()["nodes"] == before


def test_bad_sequences_are_named():
    with pytest.raises(IndexError, match="seq is empty"):
        take([], Value(0.0))
    with pytest.raises(ValueError, match="must all be as long"):
        take([[Value(1.0)], [Value(1.0), Value(2.0)]], Value(0.0))
    with pytest.raises(TypeError, match="seq\\[1\\] is a row"):
        take([Value(1.0), [Value(2.0)]], Value(0.0))
    with pytest.raises(TypeError, match="seq\\[1\\] is str"):
        take([Value(1.0), "a"], Value(0.0))
    with pytest.raises(TypeError, match="seq must be a sequence"):
        take(Value(1.0), Value(0.0))


def test_under_no_grad_and_with_a_constant_index_it_is_the_plain_pick():
    xs = params(3)
    with tapead.no_grad():
        assert take(xs, Value(1.0)) is xs[1]
        with pytest.raises(IndexError, match="out of range"):
            take(xs, Value(5.0))
        k = Value(2.0) * 1                     # a no_grad value
    assert take(xs, k) is xs[2]
    with tapead.no_grad():
        c = xs[0] * 1                          # a no_grad item: a constant
    y = take([c, xs[1]], Value(0.0))
    assert y.data == xs[0].data
    y.backward()
    assert xs[0].grad == 0.0


def test_graph_attributes_list_the_index_then_the_items():
    xs = params(3)
    i = Value(1.0)
    y = take(xs, i)
    assert [v.data for v in y._children] == [1.0] + [x.data for x in xs]
    assert y._local_grads == (0.0, 0.0, 1.0, 0.0)
    y.grad = 5.0
    y._backward()
    assert [x.grad for x in xs] == [0.0, 5.0, 0.0]
    with pytest.raises(AttributeError, match="built-in op \\('take'\\)"):
        y._backward = lambda: None


def test_grad_and_jacobian_run_through_take_and_the_other_sweeps_refuse_it():
    xs = params(4, 2)
    i = Value(3.0)
    y = take(xs, i) ** 2 + xs[0]
    assert tapead.grad(y, xs) == [1.0, 0.0, 0.0, 2 * xs[3].data]
    assert tapead.jacobian([y], xs).tolist() == [[1.0, 0.0, 0.0, 2 * xs[3].data]]
    for run in (lambda: tapead.hessian(y, xs), lambda: tapead.hvp(y, xs, [1.0] * 4),
                lambda: tapead.jvp(y, xs, [1.0] * 4), lambda: tapead.grad(y, xs, create_graph=True),
                lambda: tapead.wengert(y), lambda: y.recompute()):
        with pytest.raises(tapead.TapeadError, match="does not run through a take node"):
            run()


def replayed(fn, W, rows):
    """fn recorded once with Value indices, compiled, and run at each row of
    indices; against fn run eagerly with plain int indices per row."""
    idx = [Value(float(k)) for k in rows[0]]
    y = fn(W, idx)
    flat = [w for r in W for w in r]
    prog = tapead.compile(y, inputs=idx, wrt=flat)
    Y, G = prog.grad(np.array(rows, dtype=float), per_sample=True)
    for r, ks in enumerate(rows):
        for w in flat:
            w.grad = 0.0
        ye = fn(W, [int(k) for k in ks])
        ye.backward()
        assert Y[r, 0] == ye.data and G[r].tolist() == [w.grad for w in flat], ks
    return prog


def embed(W, idx):
    """An embedding lookup and a softmax-like read-out, indices as data."""
    h = [sum(vs) for vs in zip(*[take(W, i) for i in idx[:-1]])]
    logits = [(hj * 0.5).tanh() for hj in h]
    return -take(logits, idx[-1]).exp().log() + take(W[0], idx[-1]) * logits[0]


def test_a_program_picks_again_at_each_row():
    W = matrix(5, 3, 3)
    rows = [[0, 1, 2], [4, 4, 0], [-1, 2, 1], [3, 0, -3]]
    prog = replayed(embed, W, rows)
    # summed over rows: the per-row gradients' sum, and the same for any thread count
    _, G = prog.grad(np.array(rows * 300, dtype=float))
    _, G1 = prog.grad(np.array(rows * 300, dtype=float), threads=1)
    assert G.tolist() == G1.tolist()
    _, Gp = prog.grad(np.array(rows * 300, dtype=float), per_sample=True)
    assert np.allclose(G, Gp.sum(0), rtol=1e-12, atol=1e-12)


def test_uniform_indices_and_row_items():
    """An index that is a parameter (the same for every row) and items that
    are rows: both kinds of operand, through both sweeps."""
    W = matrix(4, 2, 4)
    j = Value(1.0)
    x = Value(0.7)
    y = take([x * W[0][0], x * x, W[1][1]], j) + take(W, j)[0] * x
    prog = tapead.compile(y, inputs=[x], wrt=[x, W[0][0], W[1][0], W[1][1]])
    Y, G = prog.grad([[0.7], [-1.2]], per_sample=True)
    for r, xv in enumerate((0.7, -1.2)):
        for w in (W[0][0], W[1][0], W[1][1]):
            w.grad = 0.0
        xe = Value(xv)
        ye = (xe * xe) + W[1][0] * xe
        ye.backward()
        assert Y[r, 0] == ye.data
        assert G[r].tolist() == [xe.grad, W[0][0].grad, W[1][0].grad, W[1][1].grad]


@pytest.mark.parametrize("bad, msg", [(7.0, "index 7 is out of range for 5 items"),
                                      (1.25, "the index is 1.25, not a whole number")])
def test_a_bad_index_at_a_replay_names_its_row(bad, msg):
    W = matrix(5, 3, 5)
    idx = [Value(0.0), Value(1.0), Value(2.0)]
    prog = tapead.compile(embed(W, idx), inputs=idx)
    with pytest.raises(IndexError, match=f"{msg}.*at row 2"):
        prog([[0, 1, 2], [1, 1, 1], [bad, 0, 0]])


def test_a_program_with_take_pickles_and_refuses_generated_code_clearly():
    W = matrix(5, 3, 6)
    idx = [Value(0.0), Value(1.0), Value(2.0)]
    prog = tapead.compile(embed(W, idx), inputs=idx)
    X = [[0, 1, 2], [4, 3, 1]]
    back = pickle.loads(pickle.dumps(prog))
    assert back(X).tolist() == prog(X).tolist()
    assert "take nodes" in repr(tapead.compile(embed(W, idx), inputs=idx, native=True))
    with pytest.raises(ValueError, match="take nodes"):
        tapead.compile(embed(W, idx), inputs=idx, native="rows")


def test_jit_replays_a_new_token_sequence_of_a_known_length_without_recording():
    W = matrix(6, 4, 7)
    flat = [w for r in W for w in r]

    def loss(tokens):
        h = [sum(vs) for vs in zip(*[take(W, t) for t in tokens[:-1]])]
        return sum(v * v for v in h) * take(W[1], tokens[-1])
    step = tapead.jit(loss, wrt=flat)
    seqs = [[0, 1, 2], [5, 4, 3], [2, 2, 0], [1, 0], [3, 5, 1, 2], [4, 3]]
    for seq in seqs:
        for w in flat:
            w.grad = 0.0
        want = loss([int(t) for t in seq])
        want.backward()
        want_g = [w.grad for w in flat]
        for w in flat:
            w.grad = 0.0
        assert step(seq) == want.data and [w.grad for w in flat] == want_g
    assert step.recordings == 3 and len(step.programs) == 3      # one per length: 3, 2, 4
