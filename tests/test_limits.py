"""set_limit (tapead/_c/holds.py): past the limit a recording call raises
MemoryError and changes nothing; the limit counts only what is held, per
thread."""
import gc
import math
import threading

import pytest

import tapead
import tapead.nn
from tapead import Value
from tapead._c import lib

INF, NAN = math.inf, math.nan


def nodes():
    return tapead.tape_stats()["nodes"]


# ============================================================== set_limit
@pytest.fixture
def unlimited():
    yield
    tapead.set_limit(None)


def test_set_limit_raises_memory_error_and_tape_stays_usable(unlimited):
    a, b = Value(1.5), Value(-2.0)
    y = a * b + a
    y.backward()
    gc.collect()                          # cyclic garbage from earlier tests holds no Values
    tapead.collect()
    n0 = nodes()
    tapead.set_limit(n0 + 100)
    assert tapead.tape_stats()["limit"] == n0 + 100
    held = []
    with pytest.raises(MemoryError):
        for _ in range(100000):
            held.append(held[-1] * 1.0001 if held else a * 1.0)
    assert len(held) >= 90 and nodes() >= n0 + 100
    n1 = nodes()
    for fn in (lambda: a * b, lambda: a + 1, lambda: a.exp(), lambda: Value(1.0),
               lambda: tapead.values([1.0, 2.0])):
        with pytest.raises(MemoryError):
            fn()
        assert nodes() == n1
    assert lib.ta_validate() == 0
    assert (a.data, a.grad, b.data, b.grad, y.data) == (1.5, -1.0, -2.0, 1.5, -1.5)
    assert [h.data for h in held[:2]] == [1.5, 1.5 * 1.0001]
    tapead.set_limit(n1 + 10)            # raising the limit
    z = held[-1] * a
    z.backward()
    tapead.set_limit(None)               # removing it
    assert tapead.tape_stats()["limit"] == 0
    more = [a * i for i in range(5000)]
    assert more[-1].data == 1.5 * 4999
    assert lib.ta_validate() == 0


def test_limit_below_current_size_and_back(unlimited):
    a = Value(2.0)
    keep = [a * i for i in range(50)]
    tapead.set_limit(1)
    with pytest.raises(MemoryError):
        a + a
    with pytest.raises(MemoryError):
        tapead.values([1.0])
    assert [k.data for k in keep] == [2.0 * i for i in range(50)]
    tapead.set_limit(0)
    assert (a + a).data == 4.0
    with pytest.raises(ValueError):
        tapead.set_limit(-1)


def test_grad_with_create_graph_under_the_limit_records_all_or_nothing(unlimited):
    """grad(create_graph=True) cannot count its nodes beforehand: it records
    with the limit lifted and checks it itself (ta_bulk_begin, unsized).
    Refused, it records nothing and leaves the limit as it was; allowed
    room, it gives the closed form (d/dx x**3 * y = 3 x**2 y)."""
    x, y = Value(1.5), Value(-2.0)
    f = (x ** 3) * y
    gc.collect()
    tapead.collect()
    n0 = nodes()
    tapead.set_limit(n0 + 2)                  # not enough for the gradient's graph
    with pytest.raises(MemoryError):
        tapead.grad(f, [x, y], create_graph=True)
    assert nodes() == n0 and tapead.tape_stats()["limit"] == n0 + 2
    assert lib.ta_validate() == 0
    with pytest.raises(MemoryError):          # the limit is back in force for plain ops
        for _ in range(5):
            f = f * 1.0
    tapead.set_limit(None)
    dx, dy = tapead.grad((x ** 3) * y, [x, y], create_graph=True)
    assert (dx.data, dy.data) == (3 * 1.5 ** 2 * -2.0, 1.5 ** 3)
    (ddx,) = tapead.grad(dx, [x])
    assert ddx == 6 * 1.5 * -2.0


def test_limit_counts_only_what_is_held(unlimited):
    """Garbage is reclaimed before the limit is enforced: a steady loop fits."""
    x = Value(0.5)
    gc.collect()
    tapead.collect()
    tapead.set_limit(nodes() + 6 * 2048)
    s = None
    for i in range(40000):
        s = x * i + 1.0
    assert s.data == 0.5 * 39999 + 1.0
    assert lib.ta_validate() == 0


def test_limit_counts_only_what_is_held_for_bulk_leaves_too(unlimited):
    """tapead.values() reclaims garbage before refusing, as single ops do."""
    x = Value(0.5)
    gc.collect()
    tapead.collect()
    tapead.set_limit(nodes() + 8 * 2048)
    for i in range(20):
        for k in range(3000):
            s = x * k + 1.0                  # garbage
        v = tapead.values([float(i)] * 1000)
        assert v[-1].data == float(i) and s.data == 0.5 * 2999 + 1.0
    assert lib.ta_validate() == 0


def test_set_limit_is_per_thread(unlimited):
    tapead.set_limit(nodes() + 5)
    out = []
    th = threading.Thread(target=lambda: out.append(sum(Value(1.0) * i for i in range(100)).data))
    th.start()
    th.join()
    assert out == [4950.0]
