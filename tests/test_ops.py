"""Every op's gradient against a central difference of the same function on
plain floats, at hypothesis-drawn points away from kinks and domain edges
(the points: each op's `grad` entries in tests/opcases.py)."""
import math
import platform

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tapead
from tapead import Value
from opcases import FORMS, away, fl, form_cases


# id -> (tapead function, float function, strategies of the arguments[, keep(x, y)]),
# every op's `grad` entries in the op cases
def _case(e):
    ident, form, c = e[:3]
    f = FORMS[form]
    if f.nargs == 1:
        return ident, (lambda a: f.ta(a, None, c), lambda x: f.py(x, None, c), e[3])
    return ident, (lambda a, b: f.ta(a, b, c), lambda x, y: f.py(x, y, c), *e[3:])


CASES = [_case(e) for e in form_cases("grad")]
UNARY = {k: v for k, v in CASES if len(v) == 3}
BINARY = {k: v for k, v in CASES if len(v) > 3}
assert len(UNARY) + len(BINARY) == len(CASES)       # ids are unique


def central(f, x):
    h = 1e-6 * max(1.0, abs(x))
    return (f(x + h) - f(x - h)) / (2 * h)


def close(got, fd, fx):
    tol = 1e-5 * abs(fd) + 1e-6 * max(1.0, abs(fx))
    return abs(got - fd) <= tol


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient_matches_central_difference(name):
    f, g, xs = UNARY[name]

    @settings(max_examples=100, deadline=None)
    @given(xs)
    def check(x):
        a = Value(x)
        y = f(a)
        assert y.data == pytest.approx(g(x), rel=1e-15, abs=1e-300)
        y.backward()
        assert y.grad == 1.0
        fd = central(g, x)
        assert close(a.grad, fd, g(x)), (x, a.grad, fd)

    check()


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient_matches_central_difference(name):
    f, g, xs, ys, *keep = BINARY[name]

    @settings(max_examples=100, deadline=None)
    @given(xs, ys)
    def check(x, y):
        if keep:
            assume(keep[0](x, y))
        a, b = Value(x), Value(y)
        r = f(a, b)
        assert r.data == pytest.approx(g(x, y), rel=1e-15, abs=1e-300)
        r.backward()
        assert close(a.grad, central(lambda t: g(t, y), x), g(x, y)), (x, y, a.grad)
        assert close(b.grad, central(lambda t: g(x, t), y), g(x, y)), (x, y, b.grad)

    check()


@settings(max_examples=100, deadline=None)
@given(away(fl(-5, 5), 0, gap=0.1), st.integers(-4, 5))
def test_integer_power_of_negative_base(x, n):
    a = Value(x)
    r = a ** n
    assert r.data == pytest.approx(x ** n, rel=1e-15)
    r.backward()
    assert close(a.grad, central(lambda t: t ** n, x), x ** n)


@settings(max_examples=100, deadline=None)
@given(fl(-3, 3), fl(0.1, 5))
def test_constant_base_power(x, c):
    a = Value(x)
    r = c ** a
    assert r.data == pytest.approx(c ** x, rel=1e-15)
    r.backward()
    assert close(a.grad, central(lambda t: c ** t, x), c ** x)


def test_same_value_on_both_sides():
    x = Value(3.0)
    for f, d in ((lambda v: v * v, 6.0), (lambda v: v + v, 2.0), (lambda v: v - v, 0.0),
                 (lambda v: v / v, 0.0), (lambda v: v ** v, 27 * (math.log(3) + 1))):
        x.grad = 0
        y = f(x)
        y.backward()
        assert x.grad == pytest.approx(d, rel=1e-14, abs=1e-15)


def test_kink_conventions():
    # relu'(0) = 0 as micrograd ((out.data > 0)); abs'(0) = 0; max/min ties split
    for f, expect in ((lambda v: v.relu(), 0.0), (lambda v: abs(v), 0.0)):
        x = Value(0.0)
        f(x).backward()
        assert x.grad == expect
    a, b = Value(1.0), Value(1.0)
    tapead.maximum(a, b).backward()
    assert (a.grad, b.grad) == (0.5, 0.5)


@pytest.mark.parametrize("x", [0.0, -0.0, 1e-310, -5e-324, 3.0, -2.5, 1e154, -1e154,
                               math.inf, -math.inf, math.nan])
def test_square_gradient_is_micrographs_formula_bit_for_bit(x):
    """x**2 takes the C sweep's pow(x, 1.0) == x shortcut (and x**y with a Value
    exponent 2 the same rule): the gradient must be micrograd's
    0 + (2 * x**(2-1)) * 1.0 to the bit, sign of zero and nan included."""
    want = 0 + (2 * x ** (2 - 1)) * 1.0
    for make in (lambda a: a ** 2, lambda a: a ** Value(2.0)):
        a = Value(x)
        make(a).backward()
        assert repr(a.grad) == repr(want) and math.copysign(1, a.grad) == math.copysign(1, want), (x, a.grad)


def _cube_gradient_cases():
    """x whose square is an exact midpoint between two doubles (odd 27-bit
    mantissas: there libm's pow(x, 2.0) and x * x part ways) or close to
    one, powers of two and their neighbours, and the range's ends."""
    import random
    rng = random.Random(7)
    xs = [0.7162394151091576, 0.8738429471850395, 1.0, 2.0, 0.5, 3.0,
          math.sqrt(2.0), math.nextafter(1.0, 0), math.nextafter(1.0, 2),
          2.0 ** -400, 2.0 ** 400, math.nextafter(2.0 ** -400, 1), math.nextafter(2.0 ** 400, 0),
          1e-200, 1e200, 5e-324, 1e154, -1e154, 0.0, -0.0, math.inf, -math.inf, math.nan]
    for _ in range(300):
        k = rng.randrange(2 ** 26, 2 ** 28) | 1
        x = math.ldexp(k, -27 + rng.randrange(-300, 300))
        xs += [x, -x, math.nextafter(x, 0), math.nextafter(x, math.inf)]
    return xs


def test_cube_gradient_is_micrographs_formula_bit_for_bit():
    """x**3's gradient 3 * x**2.0 skips libm's pow where x * x is certainly
    its number (csrc/ops/ops.h, pow_sq): it must be micrograd's
    0 + (3 * x**(3-1)) * 1.0 on CPython to the bit, at the squares that are
    (or are near) a midpoint, where pow and x * x differ, too.  The power
    is libm's, math.pow: CPython's float ** calls it; PyPy's takes x ** 2
    as x * x, and tapead keeps CPython's numbers there too."""
    xs = _cube_gradient_cases()
    assert any(math.pow(x, 2.0) != x * x for x in xs)   # the cases reach pow's own rounding
    for x in xs:
        try:
            want = 0 + (3 * math.pow(x, 3 - 1)) * 1.0
        except OverflowError:                          # micrograd's gradient overflows: none to match
            continue
        for make in (lambda a: a ** 3, lambda a: a ** Value(3.0)):
            a = Value(x)
            try:
                y = make(a)
            except OverflowError:
                continue                               # x**3 itself overflows: no gradient to take
            y.backward()
            assert repr(a.grad) == repr(want), (x, a.grad, want)


@pytest.mark.skipif(platform.python_implementation() == "PyPy",
                    reason="micrograd on PyPy squares as x * x (PyPy's float ** 2), not libm's pow")
@settings(max_examples=300, deadline=None)
@given(fl(-1e100, 1e100))
def test_cube_gradient_matches_micrograd_anywhere(x):
    from conftest import MG
    m, a = MG(x), Value(x)
    (m ** 3).backward(); (a ** 3).backward()
    assert repr(a.grad) == repr(m.grad)


# ------------------------------------------------- division by a constant
# x / c is recorded as x * c**-1, micrograd's value to the bit (c**-1, libm's
# pow, is not always 1/c), where c**-1 is a normal float; where it is not
# (c subnormal: it overflows; |c| above ~4.5e307: it is subnormal and has
# lost bits), as the true x / c.
@pytest.mark.parametrize("x,c", [(1e-300, 1e-309), (1e-310, 1e-310), (-3.5e-310, 5e-324),
                                 (0.7, 1e308), (-2.0, -1.7976931348623157e308),
                                 (1e300, 1.5e308), (2.0, math.inf), (0.0, 1e-320)])
def test_division_by_a_constant_whose_reciprocal_is_not_normal(x, c):
    a = Value(x)
    y = a / c
    assert y.data == x / c                               # Python's true division
    assert (Value(x) / Value(c)).data == x / c           # as Value / Value
    with tapead.detect_anomaly():
        assert (a / c).data == x / c
    y.backward()
    assert a.grad == 1.0 / c                             # d/dx x/c (inf where 1/c overflows)


@settings(max_examples=200, deadline=None)
@given(fl(-1e6, 1e6), st.one_of(fl(-1e300, 1e300).filter(lambda c: abs(c) >= 1e-300),
                                st.sampled_from([3.0, 7.0, -0.1, 1e-307, 4e307,
                                                 1.118563226410513e-188])))   # pow(c, -1) != 1/c
def test_division_by_a_constant_is_micrographs_bit_for_bit(x, c):
    """Where micrograd's x * c**-1 does not overflow and c**-1 is normal,
    tapead gives exactly its value (and gradient)."""
    from conftest import MG
    m = MG(x) / c
    a = Value(x)
    y = a / c
    assert y.data == m.data
    m.backward(); y.backward()
    assert y.grad == m.grad


@pytest.mark.parametrize("x", [0.0, -0.0, 2.5, -3.0])
def test_derivative_of_x_to_the_zero_is_zero(x):
    """x**0 is the constant 1: d/dx is 0, at x = 0 too (micrograd raises
    there computing 0 * 0**-1; PyTorch gives 0)."""
    for make in (lambda a: a ** 0, lambda a: a ** 0.0, lambda a: a ** Value(0.0)):
        a = Value(x)
        y = make(a)
        assert y.data == 1.0
        y.backward()
        assert a.grad == 0.0
        assert tapead.grad(make(a), [a]) == [0.0]
        assert tapead.jvp(make(a), [a], [1.0]) == 0.0
        assert tapead.hessian(make(a), [a]).tolist() == [[0.0]]
        (d,) = tapead.grad(make(a), [a], create_graph=True)
        assert d.data == 0.0 and tapead.grad(d, [a]) == [0.0]


def test_detach_passes_no_gradient_of_any_order():
    """detach(x) is x's value and a zero derivative by definition (JAX's
    stop_gradient): backward gives its input nothing, not even 0 * g (an
    infinite adjoint there leaves it 0.0, not nan); grad, hvp and hessian
    see its derivative as 0; a replay computes its value again."""
    import numpy as np
    x = Value(3.0)
    y = x.detach() * x
    y.backward()
    assert y.data == 9.0 and x.grad == 3.0           # only through y's second factor
    x.grad = 0.0
    z = (x.detach() * 1e308) * 1e308                   # inf: the adjoint at detach is inf
    z.backward()
    assert z.data == math.inf and x.grad == 0.0
    assert tapead.grad(tapead.detach(x) * x, [x]) == [3.0]
    assert tapead.hessian(tapead.detach(x) * x, [x]).tolist() == [[0.0]]
    assert tapead.jvp(tapead.detach(x) + x, [x], [1.0]) == 1.0
    for native in (False, "lanes2"):
        p = tapead.compile(x.detach() * x, [x], wrt=[x], native=native)
        Y, G = p.grad(np.array([[2.0], [-5.0]]), per_sample=True)
        assert Y.ravel().tolist() == [4.0, 25.0] and G.ravel().tolist() == [2.0, -5.0]
