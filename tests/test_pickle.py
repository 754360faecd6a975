"""detach, pickle and copy: a copy of a Value is an independent leaf with the
same data and grad; a copied or pickled model works on its own, in a
fresh process too."""
import copy
import math
import os
import pickle
import random
import subprocess
import sys
import textwrap

import pytest

import tapead
import tapead.nn
from tapead import Value
from conftest import same, this_tapead

INF, NAN = math.inf, math.nan


# ======================================================= detach, pickle, copy
def test_detach():
    a, b = Value(2.0), Value(-3.0)
    y = a * b
    d = y.detach()
    assert d is not y and d.data == -6.0 and d.grad == 0.0
    z = d * a + d
    z.backward()
    assert a.grad == -6.0      # only through z's use of a
    assert b.grad == 0.0       # nothing flowed back through the detached y
    assert d.grad == a.data + 1
    d.data = 100.0
    assert y.data == -6.0


def roundtrip_pickle(v):
    return pickle.loads(pickle.dumps(v))


@pytest.mark.parametrize("copier", [roundtrip_pickle, copy.copy, copy.deepcopy])
def test_copy_of_a_value_is_an_independent_leaf_with_same_data_and_grad(copier):
    a = Value(1.5)
    y = a * a + a
    y.backward()
    for v in (a, y):
        w = copier(v)
        assert type(w) is Value and w is not v
        assert (w.data, w.grad) == (v.data, v.grad)
        w.data += 1
        w.grad = 42.0
        assert (v.data, v.grad) != (w.data, w.grad)
    ga = a.grad
    w = copier(y)
    (w * 2).backward()          # w is a leaf: nothing reaches a
    assert a.grad == ga
    assert w.grad == y.grad + 2
    if copier is copy.copy:
        return
    # in containers (deep copies), shared references stay shared
    lst = copier([a, a, y])
    assert lst[0] is lst[1] and lst[0] is not a
    assert [u.data for u in lst] == [a.data, a.data, y.data]


def test_copy_of_nonfinite_and_no_grad_values():
    for x in (NAN, INF, -0.0, 5e-324):
        w = roundtrip_pickle(Value(x))
        assert same(w.data, x)
    with tapead.no_grad():
        y = Value(3.0) * 2
    w = copy.deepcopy(y)
    (w * w).backward()          # a real leaf now
    assert w.grad == 12.0


def mlp_outputs(model, xs):
    return [model(x).data for x in xs]


@pytest.mark.parametrize("copier", [roundtrip_pickle, copy.deepcopy])
def test_copy_of_an_mlp_is_a_working_independent_module(copier):
    random.seed(9)
    m = tapead.nn.MLP(3, [5, 4, 1])
    xs = [[0.1, -0.2, 0.3], [1.0, 2.0, -1.0], [-0.5, 0.5, 0.0]]
    sum(m(x) for x in xs).backward()
    c = copier(m)
    assert repr(c) == repr(m)
    pm, pc = m.parameters(), c.parameters()
    assert len(pm) == len(pc)
    assert [(p.data, p.grad) for p in pm] == [(p.data, p.grad) for p in pc]
    assert not set(map(id, pm)) & set(map(id, pc))
    assert mlp_outputs(c, xs) == mlp_outputs(m, xs)
    # training the copy leaves the original alone
    before = [p.data for p in pm]
    c.zero_grad()
    sum(c(x) for x in xs).backward()
    for p in pc:
        p.data -= 0.1 * p.grad
    assert [p.data for p in pm] == before
    assert mlp_outputs(c, xs) != mlp_outputs(m, xs)


def test_pickled_trained_model_predicts_the_same_in_a_fresh_process(tmp_path):
    random.seed(2)
    model = tapead.nn.MLP(2, [6, 6, 1])
    xs = [[random.uniform(-1, 1), random.uniform(-1, 1)] for _ in range(20)]
    ys = [1.0 if a * b > 0 else -1.0 for a, b in xs]
    for k in range(5):
        loss = sum((1 + -y * model(x)).relu() for x, y in zip(xs, ys)) * (1 / len(xs))
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            p.data -= 0.5 * p.grad
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps((model, xs)))
    code = textwrap.dedent("""
        import pickle, sys
        model, xs = pickle.load(open(sys.argv[1], "rb"))
        print(repr([model(x).data for x in xs]))
        print(type(model).__module__, type(model.parameters()[0]).__module__)
    """)
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60, cwd=str(tmp_path),
                         env=this_tapead(PYTHONHASHSEED="0"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == repr(mlp_outputs(model, xs))
    assert lines[1] == "tapead.nn tapead.engine"
