"""tapead.jvp: forward mode against backward() (dot of gradient and tangents),
against central differences of plain-float code, and its contracts."""
import math
import random
import threading

import pytest
from hypothesis import example, given, settings, strategies as st

import tapead
from tapead import Value, jvp
from tapead._c import OP, OP_KINDS
from opcases import BY_OP, FORMS, KIND_UN, ROWS


# ------------------------------------------------------- random graphs
# every op with a spelling defined for every finite input (the op cases' `tame`)
TAME = sorted(r.op for r in ROWS if r.tame)


def apply(op, a, b, c):
    """One op on Values, spelled to be defined everywhere."""
    return BY_OP[op].tame(a, b, c)


ops = st.tuples(st.sampled_from(TAME), st.integers(0, 10 ** 6),
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
    """A one-input op is a method and a module function, named as the op."""
    x = Value(0.7)
    unary = [r.op.lower() for r in ROWS if OP_KINDS[OP[r.op]] == KIND_UN]
    assert len(unary) >= 9
    for name in unary:
        assert getattr(tapead, name)(x).data == getattr(x, name)().data
    assert tapead.sin(0.5).data == math.sin(0.5)
    assert isinstance(tapead.exp(1), Value)


# ------------------------------- zero tangents through infinite partials
# Branches the seeds do not reach carry tangent 0, and their partials may be
# infinite or nan (sqrt and x**0.5 at 0, x**n with x < 0: d/dn = r ln x).
# A zero tangent must contribute nothing there, as in backward(), where
# such a branch never reaches the seeded inputs' gradients.
# every spelling in the op cases; SMOOTH leaves out the ops with kinks, and
# DIFFERENTIABLE the ops whose derivative is zero by definition (detach: its
# value follows its input, so finite differences see what no derivative has)
KINKED = sorted(n for n, f in FORMS.items() if BY_OP[f.op].kink)
SMOOTH = sorted(n for n, f in FORMS.items() if not BY_OP[f.op].kink)
DIFFERENTIABLE = [n for n in SMOOTH if not BY_OP[FORMS[n].op].stop]


def build_graph(xs, prog):
    """(leaves, output, steps kept) of a random program over them; an op that
    would raise at these values (sqrt(-1), log(0): where Python raises) or
    leave a moderate range (|r| above 1e6 or below 1e-30 but not 0: products
    of partials would overflow or underflow midway, a matter of range, not of
    zero tangents) is skipped."""
    leaves = [Value(x) for x in xs]
    nodes = list(leaves)
    kept = []
    for step, (name, i, j, c) in enumerate(prog):
        f = FORMS[name]
        a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
        x, y = a.data, b.data
        try:
            f.py(x, y, c)
            r = f.ta(a, b, c)
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
        if abs(r.data) < 1e6 and not 0 < abs(r.data) < 1e-30:
            nodes.append(r)
            kept.append(step)
    return leaves, nodes[-1], kept


moderate = st.floats(-2, 2).filter(lambda x: x == 0 or abs(x) > 1e-6)
leaf_or_zero = st.one_of(st.just(0.0), st.just(0.0), st.integers(-2, 3).map(float), moderate)
some_zero = st.lists(st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.0]), min_size=6, max_size=6)


def random_ops(kinds):
    return st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, 10 ** 6),
                              st.integers(0, 10 ** 6), moderate), min_size=1, max_size=25)


@settings(max_examples=400, deadline=None)
@given(xs=st.lists(leaf_or_zero, min_size=1, max_size=6), prog=random_ops(SMOOTH + KINKED),
       ts=some_zero)
def test_jvp_matches_gradient_dot_tangent_through_infinite_partials(xs, prog, ts):
    leaves, out, _ = build_graph(xs, prog)
    ts = ts[:len(leaves)]
    g = tapead.grad(out, leaves)
    terms = [gi * t for gi, t in zip(g, ts) if t != 0.0]   # unseeded inputs: no term
    want = math.fsum(terms) if all(map(math.isfinite, terms)) else math.nan
    got = jvp(out, leaves, ts)
    tan = tapead.wengert(out, leaves, ts).rows[-1]["tangent"]
    if math.isfinite(want):
        scale = math.fsum(abs(x) for x in terms) + 1.0
        assert abs(got - want) <= 1e-9 * scale, (got, want)
        assert abs(tan - want) <= 1e-9 * scale, (tan, want)


@settings(max_examples=300, deadline=None)
@given(xs=st.lists(leaf_or_zero, min_size=1, max_size=5), prog=random_ops(DIFFERENTIABLE), ts=some_zero)
@example(xs=[-1.0, -1.0, 0.5], prog=[("sub", 68, 71, -1.5), ("pow", 28, 59, 1.0), ("mulc", 99, 42, 1.0)],
         ts=[0.0, 0.0, 1.0, 0.0, 0.0, 0.0])   # x0 ** (x2 - x2): the Hessian's column was nan
@example(xs=[-1.0, 0.0, 0.0], prog=[("sub", 1, 2, 1.0), ("pow", 0, 3, 1.0)],
         ts=[0.0, 1.0, 1.0, 0.0, 0.0, 0.0])   # x0 ** (x1 - x2): d2/dx0 dx1 was 0 * nan, H v nan
@example(xs=[-1.0, 0.0, 0.0], prog=[("sub", 1, 2, 1.0), ("rpowc", 3, 3, -1.0), ("mul", 4, 0, 1.0)],
         ts=[0.0, 1.0, 1.0, 0.0, 0.0, 0.0])   # x0 (-1) ** (x1 - x2): H[0, 1] undefined, H v too
def test_hvp_matches_finite_differences_of_grad_through_infinite_partials(xs, prog, ts):
    """(H v)_j = d/dh grad_j(x + h v), by central differences at two step
    sizes (compared only where both agree, i.e. the difference quotient is
    trustworthy, and every gradient involved is finite)."""
    leaves, out, kept = build_graph(xs, prog)
    v = ts[:len(leaves)]
    hv = tapead.hvp(out, leaves, v)
    hess = tapead.hessian(out, leaves)

    def grad_at(h):
        moved = [x + h * d for x, d in zip(xs, v)]
        ls, o, kept_here = build_graph(moved, prog)
        return tapead.grad(o, ls) if kept_here == kept else None   # same graph, or no test

    g0 = tapead.grad(out, leaves)
    fds = []
    for h in (1e-5, 5e-6):
        gp, gm = grad_at(h), grad_at(-h)
        if gp is None or gm is None:
            return
        fds.append([(p - m) / (2 * h) for p, m in zip(gp, gm)])
    for j in range(len(leaves)):
        if not all(math.isfinite(x) for x in (g0[j], fds[0][j], fds[1][j])):
            continue
        tol = 1e-4 * max(1.0, abs(fds[0][j]))
        if abs(fds[0][j] - fds[1][j]) > tol:   # the quotient is not converged here
            continue
        assert abs(hv[j] - fds[1][j]) <= 10 * tol, (j, hv[j], fds)
        row = [hess[j][k] * d for k, d in enumerate(v) if d != 0.0]
        if not all(map(math.isfinite, row)):
            # an entry of H is undefined (nan: d/dn of (-1) ** n), so H v is;
            # hvp(v) is the directional derivative, defined where v keeps n fixed
            continue
        hcol = math.fsum(row)
        assert abs(hcol - hv[j]) <= 1e-9 * max(1.0, abs(hv[j])), (j, hcol, hv[j])


def test_unseeded_infinite_partials_contribute_nothing():
    x, z = Value(2.0), Value(0.0)                  # z: a bias initialised at 0
    f = x * 3 + z.sqrt()
    assert tapead.grad(f, [x]) == [3.0]
    assert jvp(f, [x], [1.0]) == 3.0
    assert jvp(x * 3 + z ** 0.5, [x, z], [1.0, 0.0]) == 3.0
    assert tapead.hessian(f, [x]).tolist() == [[0.0]]
    assert tapead.hvp(f, [x, z], [1.0, 0.0]).tolist()[0] == 0.0
    assert tapead.wengert(f, [x], [1.0]).rows[-1]["tangent"] == 3.0
    b, n = Value(-1.5), Value(2.0)                 # negative base, learnable exponent
    g = b ** n                                     # dg/db = n b**(n-1) = -3, d2g/db2 = 2
    assert jvp(g, [b], [1.0]) == -3.0
    assert tapead.wengert(g, [b], [1.0]).rows[-1]["tangent"] == -3.0
    assert tapead.hessian(g, [b]).tolist() == [[2.0]]
    assert tapead.hvp(g, [b, n], [1.0, 0.0])[0] == 2.0
    assert tapead.grad(tapead.grad(g, b, create_graph=True), b) == 2.0
