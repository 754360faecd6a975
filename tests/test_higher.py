"""tapead.grad / hvp / hessian / jacobian against closed forms and central differences."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapead
from tapead import Value, grad, hvp, hessian, jacobian
from conftest import release_garbage
from opcases import form_cases

coord = st.floats(-2.0, 2.0, allow_nan=False)


def rosen(x, y):
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def fd_grad(f, xs, h=1e-6):
    """Central differences of the float function f at xs."""
    out = []
    for i in range(len(xs)):
        a = list(xs); b = list(xs)
        a[i] += h; b[i] -= h
        out.append((f(*a) - f(*b)) / (2 * h))
    return out


def num_grad(f, xs):
    """tapead's numeric gradient of f (a function of Values) at floats xs."""
    vs = [Value(x) for x in xs]
    return grad(f(*vs), vs)


# ----------------------------------------------------------- closed forms
@settings(max_examples=50, deadline=None)
@given(coord, coord)
def test_rosenbrock_gradient_and_hessian(a, b):
    x, y = Value(a), Value(b)
    f = rosen(x, y)
    gx, gy = grad(f, [x, y])
    assert gx == pytest.approx(-2 * (1 - a) - 400 * a * (b - a * a), rel=1e-12, abs=1e-9)
    assert gy == pytest.approx(200 * (b - a * a), rel=1e-12, abs=1e-9)
    H = hessian(f, [x, y])
    want = np.array([[2 - 400 * (b - a * a) + 800 * a * a, -400 * a], [-400 * a, 200.0]])
    assert np.allclose(H, want, rtol=1e-12, atol=1e-9)
    assert np.array_equal(H, H.T)
    v = np.array([0.3, -1.7])
    assert np.allclose(hvp(f, [x, y], v), want @ v, rtol=1e-12, atol=1e-9)


def test_polynomial_derivatives_to_fourth_order():
    x = Value(1.3)
    f = 3 * x ** 4 - 2 * x ** 3 + x - 5
    d1 = grad(f, x, create_graph=True)
    d2 = grad(d1, x, create_graph=True)
    d3 = grad(d2, x, create_graph=True)
    d4 = grad(d3, x, create_graph=True)
    d5 = grad(d4, x)
    a = 1.3
    assert d1.data == pytest.approx(12 * a ** 3 - 6 * a ** 2 + 1, rel=1e-14)
    assert d2.data == pytest.approx(36 * a ** 2 - 12 * a, rel=1e-14)
    assert d3.data == pytest.approx(72 * a - 12, rel=1e-14)
    assert d4.data == pytest.approx(72.0, rel=1e-14)
    assert d5 == 0.0


@settings(max_examples=30, deadline=None)
@given(st.floats(-3.0, 3.0))
def test_tanh_third_derivative(a):
    x = Value(a)
    t = math.tanh(a)
    d1 = grad(x.tanh(), x, create_graph=True)
    d2 = grad(d1, x, create_graph=True)
    d3 = grad(d2, x)
    assert d1.data == pytest.approx(1 - t * t, rel=1e-12, abs=1e-15)
    assert d2.data == pytest.approx(-2 * t * (1 - t * t), rel=1e-10, abs=1e-15)
    assert d3 == pytest.approx(-2 * (1 - t * t) * (1 - 3 * t * t), rel=1e-10, abs=1e-14)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.1, 5.0))
def test_exp_log_chain(a):
    # f = exp(sin x) + log(x): f'' = (cos^2 - sin) e^sin - 1/x^2, f''' = ... + 2/x^3
    x = Value(a)
    f = x.sin().exp() + x.log()
    d1 = grad(f, x, create_graph=True)
    d2 = grad(d1, x, create_graph=True)
    d3 = grad(d2, x)
    s, c, e = math.sin(a), math.cos(a), math.exp(math.sin(a))
    assert d1.data == pytest.approx(c * e + 1 / a, rel=1e-12)
    assert d2.data == pytest.approx((c * c - s) * e - 1 / a ** 2, rel=1e-10, abs=1e-12)
    want3 = (c ** 3 - 3 * s * c - c) * e + 2 / a ** 3
    assert d3 == pytest.approx(want3, rel=1e-10, abs=1e-12)


# ------------------------------------------------- finite differences
def f3(x, y, z):
    return (x * y).tanh() + (z * z + 1).log() * x + (y / (1 + z * z)).exp() + (x - z).sigmoid()


def f3_float(x, y, z):
    return (math.tanh(x * y) + math.log(z * z + 1) * x + math.exp(y / (1 + z * z))
            + 1 / (1 + math.exp(-(x - z))))


@settings(max_examples=40, deadline=None)
@given(coord, coord, coord)
def test_gradient_and_hessian_vs_finite_differences(a, b, c):
    xs = [a, b, c]
    assert np.allclose(num_grad(f3, xs), fd_grad(f3_float, xs), rtol=1e-6, atol=1e-6)
    vs = [Value(x) for x in xs]
    H = hessian(f3(*vs), vs)
    fd = np.array([fd_grad(lambda *p, i=i: num_grad(f3, list(p))[i], xs) for i in range(3)])
    assert np.allclose(H, fd, rtol=1e-5, atol=1e-5)
    assert np.allclose(H, H.T, rtol=1e-12, atol=1e-12)


def test_jacobian_vs_finite_differences():
    def F(x, y, z):
        return [x * y * z, (x + y).sin(), z.exp() / (1 + x * x), (y * y + z).sqrt()]

    def Ff(x, y, z):
        return [x * y * z, math.sin(x + y), math.exp(z) / (1 + x * x), math.sqrt(y * y + z)]

    xs = [0.4, -1.1, 0.9]
    vs = [Value(x) for x in xs]
    J = jacobian(F(*vs), vs)
    fd = np.array([fd_grad(lambda *p, i=i: Ff(*p)[i], xs) for i in range(4)])
    assert J.shape == (4, 3)
    assert np.allclose(J, fd, rtol=1e-7, atol=1e-7)


# ------------------------------------------ every op's second derivative
# every op's `second` entries in the op cases: (id, f of Values, f of floats,
# points), points away from kinks
SECOND = [(n, fv, ff, xs, k) for n, fv, ff, pts in form_cases("second")
          for k, xs in enumerate(pts)]
UNARY = [(n, fv, ff, xs[0]) for n, fv, ff, xs, k in SECOND if len(xs) == 1]
BINARY = [(n, fv, ff, xs) for n, fv, ff, xs, k in SECOND if len(xs) == 2]
BINARY_IDS = [f"xs{k}-{n}" for n, fv, ff, xs, k in SECOND if len(xs) == 2]


def check_second(fv, ff, xs):
    vs = [Value(x) for x in xs]
    out = fv(*vs)
    g = grad(out, vs, create_graph=True)
    assert np.allclose([v.data for v in g], fd_grad(ff, xs), rtol=1e-6, atol=1e-7)
    H = hessian(out, vs)
    H2 = np.array([grad(gi, vs) for gi in g])
    fd = np.array([fd_grad(lambda *p, i=i: num_grad(fv, list(p))[i], xs) for i in range(len(xs))])
    assert np.allclose(H, fd, rtol=1e-6, atol=1e-6)
    # forward-over-reverse (hessian, hvp) vs reverse-over-reverse (nested grad)
    assert np.allclose(H, H2, rtol=1e-12, atol=1e-14)
    v = np.linspace(0.5, -1.5, len(xs))
    assert np.allclose(hvp(out, vs, v), H2 @ v, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,fv,ff,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_op_second_derivative(name, fv, ff, x):
    check_second(fv, ff, [x])


@pytest.mark.parametrize("name,fv,ff,xs", BINARY, ids=BINARY_IDS)
def test_binary_op_second_derivative(name, fv, ff, xs):
    check_second(fv, ff, xs)


def test_kinks_have_zero_second_derivative():
    for f in (lambda x: x.relu(), lambda x: abs(x)):
        x = Value(0.0)
        d1 = grad(f(x), x, create_graph=True)
        assert d1.data == 0.0
        assert grad(d1, x) == 0.0
    x, y = Value(1.0), Value(1.0)
    m = x.maximum(y)
    g = grad(m, [x, y], create_graph=True)
    assert [v.data for v in g] == [0.5, 0.5]
    assert hessian(m, [x, y]).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_sqrt_at_zero_falls_back_to_backwards_value():
    x = Value(0.0)
    y = x.sqrt()
    d = grad(y, x, create_graph=True)
    y.backward()
    assert d.data == x.grad == math.inf
    assert grad(d, x) == 0.0


# ----------------------------------------------------------- semantics
def test_grad_does_not_touch_grads():
    x, y = Value(0.5), Value(-1.5)
    z = x * y + x.tanh()
    h = z * z
    h.backward()
    before = (x.grad, y.grad, z.grad, h.grad)
    x.grad = 7.0
    assert grad(h, [x, y]) == pytest.approx([before[0], before[1]])
    grad(h, [x, y], create_graph=True)
    hessian(h, [x, y]); hvp(h, [x, y], [1, 1]); jacobian([h, z], [x, y])
    assert (x.grad, y.grad, z.grad, h.grad) == (7.0, before[1], before[2], before[3])


def test_weighted_outputs_and_intermediate_inputs():
    x = Value(2.0)
    a = x * x
    b = a.exp()
    assert grad([a, b], [x], grad_outputs=[2.0, 0.5]) == pytest.approx(
        [2 * 4.0 + 0.5 * math.exp(4.0) * 4.0])
    assert grad(b, [a]) == [math.exp(4.0)]
    assert grad(b, [b]) == [1.0]
    y = Value(3.0)
    assert grad(b, [y]) == [0.0]              # unreached input
    g = grad(b, [y, x], create_graph=True)
    assert g[0].data == 0.0 and g[1].data == pytest.approx(math.exp(4.0) * 4.0)


def test_hvp_matches_hessian_times_v():
    rng = np.random.default_rng(0)
    xs = [Value(float(v)) for v in rng.normal(size=6)]
    f = sum((xs[i] * xs[i + 1]).sin() * xs[i].exp() for i in range(5)) + xs[5] ** 4
    H = hessian(f, xs)
    for _ in range(3):
        v = rng.normal(size=6)
        assert np.allclose(hvp(f, xs, v), H @ v, rtol=1e-12, atol=1e-12)


def test_recorded_gradients_survive_collection_and_memory_is_bounded():
    x = Value(1.5)
    d1 = grad(x ** 3, x, create_graph=True)
    tapead.collect()
    assert grad(d1, x) == pytest.approx(9.0)
    xs = [Value(0.1 * i) for i in range(20)]
    f = sum(v.tanh() * v for v in xs)
    hvp(f, xs, np.ones(20))
    release_garbage()
    tapead.collect()
    base = tapead.tape_stats()["segments"]
    for _ in range(200):   # records ~100k nodes in all, none kept
        hvp(f, xs, np.ones(20))
        grad(f, xs, create_graph=True)
    release_garbage()
    tapead.collect()
    assert tapead.tape_stats()["segments"] <= base + 2


def test_bad_arguments():
    x = Value(1.0)
    with pytest.raises(TypeError):
        grad(x * 2, [1.0])
    with pytest.raises(ValueError):
        hvp(x * x, [x], [1.0, 2.0])
    with pytest.raises(ValueError):
        grad([x * 2], [x], grad_outputs=[1.0, 2.0])


def test_graphs_spanning_many_segments():
    # ~6000 nodes: the sweeps cross tape segments, and create_graph opens new ones
    xs = [Value(0.3), Value(-0.2), Value(0.5)]
    s = xs[0]
    for k in range(1500):
        s = (s * 0.999 + xs[k % 3] * 0.01).tanh()
    g = grad(s, xs, create_graph=True)
    H = hessian(s, xs)
    H2 = np.array([grad(gi, xs) for gi in g])
    assert np.allclose(H, H2, rtol=1e-10, atol=1e-14)

    def f(a, b, c):
        vs = [Value(a), Value(b), Value(c)]
        t = vs[0]
        for k in range(1500):
            t = (t * 0.999 + vs[k % 3] * 0.01).tanh()
        return grad(t, vs)
    fd = np.array([fd_grad(lambda *p, i=i: f(*p)[i], [0.3, -0.2, 0.5], h=1e-5) for i in range(3)])
    assert np.allclose(H, fd, rtol=1e-5, atol=1e-8)


def test_hessian_columns_are_hvp_where_a_reverse_partial_is_nan():
    """f = x ** (y - y) at x < 0: the exponent is identically 0, so f is 1
    and its Hessian is 0.  Reverse mode meets d/dn x**n = nan (ln x at
    x < 0) times 1 - 1, forward mode a tangent of exactly 0 there.  Each
    column is hvp's; the (y, x) entry was nan before d2/dxdy of x**y at
    y = 0 became 1/x (test_pow_mixed_partial_at_zero_exponent_of_a_negative_base)."""
    x, y = Value(-1.0), Value(0.5)
    f = (x ** (y - y)) * 1.0
    H = hessian(f, [x, y])
    for k in range(2):
        e = [0.0, 0.0]
        e[k] = 1.0
        np.testing.assert_array_equal(H[:, k], hvp(f, [x, y], e))
    assert H.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert math.isnan(grad(f, [y])[0])


def test_pow_mixed_partial_at_zero_exponent_of_a_negative_base():
    """f = x ** (a - b) at x = -1, a = b = 0.  d2f/dx da is 1/x = -1 (d/da of
    df/dx = e x**(e-1), whose factor e is exactly 0), though df/da itself is
    undefined (nan).  It was 0 * nan = nan, so H @ v was nan along v = (0, 1, 1),
    which keeps the exponent at 0, where hvp gives the true 0."""
    x, a, b = Value(-1.0), Value(0.0), Value(0.0)
    f = x ** (a - b)
    H = hessian(f, [x, a, b])
    assert H.tolist() == [[0.0, -1.0, 1.0], [-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert hvp(f, [x, a, b], [0.0, 1.0, 1.0]).tolist() == (H @ [0.0, 1.0, 1.0]).tolist() == [0.0] * 3
    assert hvp(f, [x, a, b], [0.0, 1.0, 0.0]).tolist() == H[:, 1].tolist()
    gx = grad(f, x, create_graph=True)                  # reverse over reverse agrees
    assert grad(gx, [a, b]) == [-1.0, 1.0]
    assert [math.isnan(g) for g in grad(f, [x, a])] == [False, True]
    y = Value(0.0)                                      # the single op, x ** y
    assert hessian(x ** y, [x, y]).tolist() == [[0.0, -1.0], [-1.0, 0.0]]
