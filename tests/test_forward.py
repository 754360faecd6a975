"""tapead.jvp: forward mode against backward() (dot of gradient and tangents),
against central differences of plain-float code, and its contracts."""
import math
import random
import threading

import pytest
from hypothesis import given, settings, strategies as st

import tapead
from tapead import Value, jvp


# ------------------------------------------------------- random graphs
UNARY = ["tanh", "sigmoid", "sin", "cos", "relu", "expt", "abs"]
BINARY = ["+", "-", "*", "/sq", "max"]
CONST = ["+c", "c-", "*c", "**2"]


def apply(kind, a, b, c):
    """One op on Values (or floats through math, for the reference)."""
    if kind == "+": return a + b
    if kind == "-": return a - b
    if kind == "*": return a * b
    if kind == "/sq": return a / (b * b + 1.0)
    if kind == "max": return tapead.maximum(a, b)
    if kind == "+c": return a + c
    if kind == "c-": return c - a
    if kind == "*c": return a * c
    if kind == "**2": return a ** 2
    if kind == "expt": return tapead.exp(tapead.tanh(a))
    return getattr(tapead, kind)(a)


ops = st.tuples(st.sampled_from(UNARY + BINARY + CONST), st.integers(0, 10 ** 6),
                st.integers(0, 10 ** 6), st.floats(-2, 2))


@settings(max_examples=150, deadline=None)
@given(xs=st.lists(st.floats(-2, 2), min_size=1, max_size=5),
       prog=st.lists(ops, min_size=1, max_size=30),
       ts=st.lists(st.floats(-3, 3), min_size=5, max_size=5))
def test_jvp_matches_gradient_dot_tangent(xs, prog, ts):
    leaves = [Value(x) for x in xs]
    nodes = list(leaves)
    for kind, i, j, c in prog:
        a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
        nodes.append(apply(kind, a, b, c))
    out = nodes[-1]
    ts = ts[:len(leaves)]
    got = jvp(out, leaves, ts)
    out.backward()
    terms = [v.grad * t for v, t in zip(leaves, ts)]
    want = math.fsum(terms)
    scale = math.fsum(abs(x) for x in terms) + 1.0
    assert abs(got - want) <= 1e-12 * scale * len(prog), (got, want)


def test_jvp_central_difference():
    def f(x, y, z):
        return (x * y + z).tanh() * tapead.exp(x) - tapead.sqrt(y * y + 1.0) / z

    def g(x, y, z):
        return math.tanh(x * y + z) * math.exp(x) - math.sqrt(y * y + 1.0) / z

    rng = random.Random(3)
    for _ in range(20):
        p = [rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0.5, 2)]
        t = [rng.uniform(-1, 1) for _ in p]
        vs = [Value(x) for x in p]
        h = 1e-6
        fd = (g(*[x + h * d for x, d in zip(p, t)]) - g(*[x - h * d for x, d in zip(p, t)])) / (2 * h)
        assert jvp(f(*vs), vs, t) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_jvp_changes_no_data_or_grad():
    x, y = Value(1.5), Value(-0.5)
    x.grad = 7.0
    z = x * y + x.sin()
    mid = z * 2.0
    out = mid.exp()
    out.backward()
    before = [(v.data, v.grad) for v in (x, y, z, mid, out)]
    jvp(out, [x, y], [1.0, 2.0])
    assert [(v.data, v.grad) for v in (x, y, z, mid, out)] == before


def test_unreachable_repeated_and_intermediate_inputs():
    x, y, u = Value(2.0), Value(3.0), Value(11.0)
    m = x * y
    out = m * m + x
    assert jvp(out, [u], [1.0]) == 0.0                    # out does not depend on u
    assert jvp(out, [x, x], [1.0, 2.0]) == jvp(out, [x], [3.0])  # seeds add
    # seeding an intermediate adds its adjoint, like dot(adjoints, tangents)
    out.backward()
    assert jvp(out, [m], [1.0]) == m.grad == 2 * 6.0
    assert jvp(out, [x, m], [1.0, 1.0]) == x.grad + m.grad
    assert jvp(x, [x], [4.0]) == 4.0                      # a leaf as output
    assert jvp(out, [], []) == 0.0


def test_jvp_over_many_segments_with_unrelated_nodes():
    x = Value(0.3)
    s, junk = x, []
    for k in range(6000):                                 # ~3 segments of 2048
        s = s * 0.999 + x * 0.001
        if k % 3 == 0:
            junk.append(s * 5.0)                          # nodes not behind s
    d = jvp(s, [x], [1.0])
    s.backward()
    assert d == pytest.approx(x.grad, rel=1e-12)


def test_jvp_after_collection():
    x = Value(1.25)
    for _ in range(5000):
        tmp = x * 2.0  # noqa: F841  garbage the collector can reclaim
    tapead.collect()
    y = (x * x).tanh()
    assert jvp(y, [x], [1.0]) == pytest.approx((1 - math.tanh(1.5625) ** 2) * 2.5, rel=1e-14)


def test_jvp_errors():
    x = Value(1.0); y = x * 2.0
    with pytest.raises(ValueError):
        jvp(y, [x], [1.0, 2.0])
    with pytest.raises(TypeError):
        jvp(y, [1.0], [1.0])
    with pytest.raises(TypeError):
        jvp(2.0, [x], [1.0])
    box = {}

    def other():
        box["v"] = Value(3.0)
        box["w"] = box["v"] * 2.0
    t = threading.Thread(target=other); t.start(); t.join()
    with pytest.raises(tapead.TapeError):
        jvp(y, [box["v"]], [1.0])
    with pytest.raises(tapead.TapeError):
        jvp(box["w"], [x], [1.0])
    assert jvp(y, [x], [1.0]) == 2.0                      # nothing left marked


def test_module_functions_match_methods():
    x = Value(0.7)
    for name in ("sin", "cos", "sqrt", "abs", "exp", "log", "tanh", "relu", "sigmoid"):
        assert getattr(tapead, name)(x).data == getattr(x, name)().data
    assert tapead.sin(0.5).data == math.sin(0.5)
    assert isinstance(tapead.exp(1), Value)
