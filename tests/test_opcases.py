"""The op cases (tests/opcases.py) cover the op table, and each row says true
things: its spellings record its op and agree with their references."""
import itertools

import pytest

import tapead
from tapead import Value
from tapead._c import OP, OP_NAMES
from conftest import MG
from opcases import BY_OP, FORMS, ROWS, math_ops

IDENT = {OP_NAMES[i]: name for name, i in OP.items()}


def recorded_op(v, leaves):
    return IDENT[tapead.wengert(v, leaves, [1.0] * len(leaves)).rows[-1]["op"]]


def test_every_op_of_the_table_has_a_row_and_every_row_names_an_op():
    """A new op in csrc/api/ops.def without a row here fails this test."""
    assert set(BY_OP) == math_ops(), (math_ops() ^ set(BY_OP))
    assert len(BY_OP) == len(ROWS)
    assert len(FORMS) == sum(len(r.forms) for r in ROWS)      # form names are unique
    for r in ROWS:
        assert r.forms and (r.stop or (r.grad and r.second)), r.op
        names = {f.name for f in r.forms}
        assert {e[1] for e in r.grad} <= names and {e[1] for e in r.errors} <= names
        assert {e[0] for e in r.ieee} <= names


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_form_records_its_rows_op_and_matches_its_references(name):
    f = FORMS[name]
    seen = set()
    for c in (2.5, 1e308):          # x / c is DIVC only where 1/c is not normal
        a, b = Value(0.7), Value(1.3)
        v = f.ta(a, b, c)
        seen.add(recorded_op(v, [a, b]))
        assert v.data == pytest.approx(f.py(0.7, 1.3, c), rel=1e-15, abs=1e-300)
        if f.mg is not None:
            assert f.mg(MG(0.7), MG(1.3), c).data == pytest.approx(v.data, rel=1e-14, abs=1e-300)
    assert f.op in seen, (name, seen)


GRID = [-2.0, -1.5, -0.5, -0.0, 0.0, 0.25, 1.0, 2.0]


@pytest.mark.parametrize("op", [r.op for r in ROWS if r.total])
def test_total_ops_raise_nowhere_on_minus_two_to_two(op):
    for f in BY_OP[op].forms:
        for x, y, c in itertools.product(GRID, GRID, GRID):
            f.py(x, y, c)
            f.ta(Value(x), Value(y), c)


@pytest.mark.parametrize("op", [r.op for r in ROWS if r.tame])
def test_tame_spellings_are_defined_everywhere(op):
    tame = BY_OP[op].tame
    for x, y, c in itertools.product(GRID + [-1e6, 1e6], GRID, GRID):
        tame(Value(x), Value(y), c)
