"""tapead.dot and tapead.linear against the generator sum they replace,
`sum(w * x for w, x in zip(ws, xs))` recorded op by op: the same nodes
(the tape's listing), the same value and the same gradients bit for bit,
over random shapes and mixes of Values and plain numbers; checked against
micrograd too (an independent autograd); errors leave the tape as it was."""
import math
import struct
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tapead
from tapead import Value, dot, linear
from conftest import MG, lonely, move_and_reclaim, on_fresh_tape, untouched

# an operand: a Value (its data), or a plain number of each kind the operators take
NUMS = st.floats(-1e3, 1e3, allow_nan=False) | st.sampled_from([0.0, -0.0, 1e-300, 2.5e300])
OPERAND = st.one_of(
    st.tuples(st.just("V"), NUMS), st.tuples(st.just("V"), NUMS), st.tuples(st.just("V"), NUMS),
    st.tuples(st.just("f"), NUMS), st.tuples(st.just("i"), st.integers(-5, 5)),
    st.tuples(st.just("b"), st.booleans()),
    st.tuples(st.just("I"), st.sampled_from([2 ** 53 + 1, -(2 ** 60) - 3, 10 ** 20])),
    st.tuples(st.just("s"), st.integers(0, 7)),   # reuse: the Value made for an earlier operand
)


# numpy's scalars, which every operator takes (engine._real): float32 and
# float16 multiply, and add before the first Value term, in their own precision
NP_KINDS = {"F": np.float32, "H": np.float16, "L": np.int64, "N": np.int32, "B": np.bool_,
            "D": np.float64}
NP_OPERAND = OPERAND | st.one_of(
    st.tuples(st.sampled_from("FD"), st.floats(-1e3, 1e3, allow_nan=False)),
    st.tuples(st.just("H"), st.floats(-30, 30, allow_nan=False)),   # (sums within float16's range)
    st.tuples(st.sampled_from("LN"), st.integers(-5, 5)),
    st.tuples(st.just("B"), st.booleans()))


def _bits(x):
    if isinstance(x, float):
        return struct.pack("<d", x)
    return (type(x), x.tobytes() if isinstance(x, np.generic) else x)


def _make(spec, pool):
    """Operands from specs; pool holds the Values made, for "s" (a shared Value)."""
    out = []
    for kind, v in spec:
        if kind == "V":
            out.append(Value(v)); pool.append(out[-1])
        elif kind == "s":
            out.append(pool[v % len(pool)] if pool else v)
        else:
            out.append({"f": float, "i": int, "b": bool, "I": int, **NP_KINDS}[kind](v))
    return out


def _twins(spec_w, spec_x):
    """Two copies of the same operands (fresh leaves each), for a fused and
    an op-by-op run whose gradients must not mix."""
    runs = []
    for _ in range(2):
        pool = []
        runs.append((_make(spec_w, pool), _make(spec_x, pool), pool))
    return runs


def _generator(ws, xs):
    return sum(w * x for w, x in zip(ws, xs))


def _listing(y):
    return str(tapead.wengert(y)) if isinstance(y, Value) else repr(y)


def _check_same(fused, loop, leaves_f, leaves_l):
    """Same value bit for bit, same tape listing, same gradients bit for bit."""
    if not isinstance(loop, Value):
        assert type(fused) is type(loop) and _bits(fused) == _bits(loop)
        return
    assert type(fused) is type(loop)
    assert _bits(fused.data) == _bits(loop.data)
    assert str(tapead.wengert(fused)) == str(tapead.wengert(loop))
    fused.backward()
    loop.backward()
    assert [_bits(v.grad) for v in leaves_f] == [_bits(v.grad) for v in leaves_l]


PAIRS = st.integers(1, 20).flatmap(
    lambda n: st.tuples(st.lists(OPERAND, min_size=n, max_size=n), st.lists(OPERAND, min_size=n, max_size=n)))


@given(PAIRS)
def test_dot_is_the_generator_sum_bit_for_bit(pair):
    (wf, xf, pf), (wl, xl, pl) = _twins(*pair)
    try:
        loop = _generator(wl, xl)
    except OverflowError:        # a huge int met a Value: dot raises the same, recording nothing
        before = tapead.tape_stats()["nodes"]
        with pytest.raises(OverflowError):
            dot(wf, xf)
        assert tapead.tape_stats()["nodes"] == before
        return
    _check_same(dot(wf, xf), loop, pf, pl)


@given(st.integers(1, 6), st.integers(1, 12), st.data())
def test_linear_is_the_rows_generator_sums(nout, nin, data):
    rows = [data.draw(st.lists(OPERAND, min_size=nin, max_size=nin)) for _ in range(nout)]
    xs = data.draw(st.lists(OPERAND, min_size=nin, max_size=nin))
    runs = []
    for _ in range(2):
        pool = []
        x = _make(xs, pool)
        runs.append((x, [_make(r, pool) for r in rows], pool))
    (xf, Wf, pf), (xl, Wl, pl) = runs
    try:
        loop = [_generator(r, xl) for r in Wl]
    except OverflowError:
        with pytest.raises(OverflowError):
            linear(xf, Wf)
        return
    fused = linear(xf, Wf)
    assert len(fused) == nout
    for a, b in zip(fused, loop):
        _check_same(a, b, [], [])
    # gradients of all rows together
    sf = [v for v in fused if isinstance(v, Value)]
    sl = [v for v in loop if isinstance(v, Value)]
    if sf:
        for v in pf + pl:
            v.grad = 0.0
        _generator(sf, sf).backward()
        _generator(sl, sl).backward()
        assert [_bits(v.grad) for v in pf] == [_bits(v.grad) for v in pl]


NP_PAIRS = st.integers(1, 12).flatmap(
    lambda n: st.tuples(st.lists(NP_OPERAND, min_size=n, max_size=n),
                        st.lists(NP_OPERAND, min_size=n, max_size=n)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (numpy's own: float16 overflowing, as the generator's)
@given(NP_PAIRS)
def test_dot_takes_numpy_scalars_as_the_generator_does(pair):
    """numpy scalars on either side, anywhere (before the first Value term,
    where numpy does the arithmetic, or after, two numbers multiplied):
    the generator's nodes, value and gradients, bit for bit."""
    test_dot_is_the_generator_sum_bit_for_bit.hypothesis.inner_test(pair)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@given(st.integers(1, 4), st.integers(1, 8), st.data())
def test_linear_takes_numpy_scalars_as_the_generator_does(nout, nin, data):
    rows = [data.draw(st.lists(NP_OPERAND, min_size=nin, max_size=nin)) for _ in range(nout)]
    xs = data.draw(st.lists(NP_OPERAND, min_size=nin, max_size=nin))
    (xf, Wf, pf), (xl, Wl, pl) = [(x, [_make(r, pool) for r in rows], pool)
                                  for pool in ([], []) for x in [_make(xs, pool)]]
    try:
        loop = [_generator(r, xl) for r in Wl]
    except OverflowError:        # numpy's bool times a huge int, say: linear raises it, recording nothing
        _refused(lambda: linear(xf, Wf), OverflowError, None)
        return
    fused = linear(xf, Wf)
    for a, b in zip(fused, loop):
        _check_same(a, b, pf, pl)
        for v in pf + pl:
            v.grad = 0.0


def test_numpy_scalars_of_every_kind():
    """Each kind the operators take, as weights and as inputs, in the first
    and a later term; and what they refuse (a complex number) refused alike."""
    for t in (np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.float64,
              np.longdouble):
        for nums in ([t(1), t(2), t(3)], [t(3), t(0), t(1)]):
            ws = [Value(0.5), Value(-1.5), Value(2.0)]
            for w, x in ((ws, nums), (nums, ws)):
                g = _generator(w, x)
                assert _bits(dot(w, x).data) == _bits(g.data)
                assert str(tapead.wengert(dot(w, x))) == str(tapead.wengert(g))
                assert _bits(linear(x, [w, w])[1].data) == _bits(_generator(w, x).data)
    a = Value(1.0)
    f = np.float32(0.1)
    lead = [f, f, a, f]             # float32 products and sums, then a Value, then float32 * float32
    assert str(tapead.wengert(dot(lead, lead))) == str(tapead.wengert(_generator(lead, lead)))
    plain = _generator([f, f], [f, f])                   # numbers only: numpy's own number, whatever type
    assert type(dot([f, f], [f, f])) is type(plain) and dot([f, f], [f, f]) == plain   # its version gives it
    _refused(lambda: dot([a, np.complex64(1)], [a, a]), TypeError, r"ws\[1\] is complex64")
    _refused(lambda: linear([a, a], [[a, np.array([1.0, 2.0])]]), TypeError, r"W\[0\]\[1\] is ndarray")


@given(st.lists(st.tuples(NUMS, NUMS), min_size=1, max_size=16))
def test_dot_against_micrograd(terms):
    """An independent autograd: micrograd's values and gradients (its own
    rounding order for a Value used twice, so compared closely, not bitwise)."""
    w = [Value(a) for a, _ in terms]
    x = [Value(b) for _, b in terms]
    mw = [MG(a) for a, _ in terms]
    mx = [MG(b) for _, b in terms]
    y = dot(w, x)
    m = sum(a * b for a, b in zip(mw, mx))
    y.backward()
    m.backward()
    assert y.data == m.data
    assert [v.grad for v in w + x] == [v.grad for v in mw + mx]


def test_first_product_a_number_and_numbers_only():
    a, b = Value(1.5), Value(-2.0)
    for ws, xs in [([2, 3.0, a], [0.5, 7, b]), ([1e16, 1.0, -1e16, a], [1.0, 1.0, 1.0, b]),
                   ([True, a], [3, 2])]:
        assert str(tapead.wengert(dot(ws, xs))) == str(tapead.wengert(_generator(ws, xs)))
    # numbers only: sum()'s own number, of its own type
    assert dot([1, 2], [3, 4]) == 11 and type(dot([1, 2], [3, 4])) is int
    assert _bits(dot([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])) == _bits(_generator([0.1, 0.2, 0.3], [1.0] * 3))
    out = linear([1.0, 2.0], [[3, 4], [a, 1]])
    assert out[0] == 11.0 and isinstance(out[1], Value)


def _refused(fn, exc, match):
    before = tapead.tape_stats()["nodes"]
    with pytest.raises(exc, match=match):
        fn()
    assert tapead.tape_stats()["nodes"] == before   # a failed call records nothing


def test_errors_record_nothing():
    a, b = Value(1.0), Value(2.0)
    _refused(lambda: dot([a, b], [a]), ValueError, "ws has 2 items and xs 1")
    _refused(lambda: dot([], []), ValueError, "empty")
    _refused(lambda: dot([a, b], [a, "x"]), TypeError, r"xs\[1\] is str")
    _refused(lambda: dot([a, None], [a, b]), TypeError, r"ws\[1\] is NoneType")
    _refused(lambda: dot([a, 1j], [a, b]), TypeError, r"ws\[1\] is complex")
    _refused(lambda: dot(a, [a]), TypeError, "ws must be a sequence")
    _refused(lambda: dot([a, b], 3), TypeError, "xs must be a sequence")
    _refused(lambda: dot([a, b, a], [b, a, 10 ** 400]), OverflowError, "too large")
    _refused(lambda: linear([a, b], [[a, b], [a]]), ValueError, r"W\[1\] has 1 items and x 2")
    _refused(lambda: linear([a, b], []), ValueError, "no rows")
    _refused(lambda: linear([], [[a]]), ValueError, "x is empty")
    _refused(lambda: linear([a, b], [[a, b], [b, "w"]]), TypeError, r"W\[1\]\[1\] is str")
    _refused(lambda: linear([a, b], [[a, b], 5]), TypeError, r"W\[1\] must be a sequence")
    with pytest.raises(TypeError):
        dot([a])
    assert tapead._c.lib.ta_validate() == 0


def test_another_threads_values_are_refused():
    theirs = on_fresh_tape(lambda: [Value(1.0), Value(2.0)])
    mine = [Value(3.0), Value(4.0)]
    _refused(lambda: dot(mine, theirs), tapead.TapeError, "thread")
    _refused(lambda: dot([theirs[0], mine[1]], mine), tapead.TapeError, "thread")
    _refused(lambda: linear(mine, [mine, theirs]), tapead.TapeError, "thread")


def test_no_grad_and_detect_anomaly_are_the_generator():
    w = [Value(0.5), Value(-1.5), 2.0]
    x = [Value(4.0), 3, Value(1.0)]
    with tapead.no_grad():
        y = dot(w, x)
        assert y.data == _generator(w, x).data
        ys = linear(x, [w, w])
        assert [v.data for v in ys] == [y.data, y.data]
    with tapead.no_grad():
        frozen = Value(2.0) * 3          # a no_grad Value, used outside
    a = Value(1.0)
    assert str(tapead.wengert(dot([frozen, a], [a, frozen]))) == str(tapead.wengert(_generator([frozen, a], [a, frozen])))
    with tapead.detect_anomaly():
        assert dot(w, x).data == y.data
        with pytest.raises(tapead.AnomalyError):
            dot([Value(1e308), Value(1e308)], [10.0, 10.0])


def test_threads_each_record_on_their_own_tape():
    errors = []

    def work(seed):
        try:
            for k in range(200):
                w = [Value(seed + k + i / 7) for i in range(16)]
                x = [Value(i - 3.5) if i % 3 else float(i) for i in range(16)]
                y = dot(w, x)
                z = _generator(w, x)
                assert _bits(y.data) == _bits(z.data)
                y.backward()
                g = [v.grad for v in w]
                for v in w:
                    v.grad = 0.0
                z.backward()
                assert g == [v.grad for v in w]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_long_loop_memory_bounded():
    w = [Value(0.01 * i) for i in range(16)]
    x = [Value(1.0 - 0.02 * i) for i in range(16)]
    from conftest import release_garbage
    for _ in range(3000):
        y = dot(w, x)
        ys = linear(x, [w, w])
        release_garbage(every=100_000)
    assert tapead.tape_stats()["nodes"] < 200_000
    assert math.isfinite(y.data + ys[0].data)


def test_ta_dots_checks_what_it_is_handed():
    lib, ffi = tapead._c.lib, tapead._c.ffi
    a = Value(1.0)
    ids = ffi.new("int64_t[]", [a._i]); cs = ffi.new("double[]", [0.0])
    neg = ffi.new("int64_t[]", [-1])
    c0 = ffi.new("double[]", [0.0]); f0 = ffi.new("uint32_t[]", [0]); f1 = ffi.new("uint32_t[]", [1])
    out = tapead._c.holds.held_list(1)
    assert lib.ta_dots(ffi.NULL, cs, 1, 1, ids, cs, c0, f0, out) == lib.TA_EARG
    assert lib.ta_dots(ids, cs, 1, 1, ids, cs, c0, f1, out) == lib.TA_EARG      # start past the end
    assert lib.ta_dots(neg, cs, 1, 1, neg, cs, c0, f0, out) == lib.TA_EARG      # no node at the start
    assert lib.ta_dots(ids, cs, 1, 1, ids, cs, c0, f0, ffi.new("int64_t[]", 1)) == lib.TA_EARG
    assert lib.ta_dots(ids, cs, 1 << 20, 1 << 20, ids, cs, c0, f0, out) == lib.TA_EARG
    bad = ffi.new("int64_t[]", [(a._i >> 32 << 32) | 0xFFFFF000])   # no such segment
    assert lib.ta_dots(bad, cs, 1, 1, ids, cs, c0, f0, out) == lib.TA_EBADID
    assert lib.ta_dots(ids, cs, 1, 1, ids, cs, c0, f0, out) == 0


def test_a_conversion_that_moves_an_operand_never_makes_dot_read_another_value():
    """A float subclass's __float__ runs while dot converts its operands; one
    that moves an operand to a new node (w.__init__) and lets the tape
    reclaim the old one must not leave dot holding an id that names another
    Value: dot reads its Values' nodes once the conversions are done."""
    w0, x0, x1 = lonely([2.0, 3.0, 4.0])
    others = []

    class Moving(float):
        def __float__(self):
            if not others:
                others.extend(move_and_reclaim([x0], 5.0))
            return float.__float__(self)
    y = dot([w0, Moving(0.5)], [x0, x1])               # (xs' ids were read first)
    assert y.data == 2.0 * 5.0 + 0.5 * 4.0
    y.backward()
    assert (w0.grad, x0.grad, x1.grad) == (5.0, 2.0, 0.5)
    assert untouched(others)
