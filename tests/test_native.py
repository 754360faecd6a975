"""Native replay (tapead/native.py, tapead/codegen/): a Program run by
generated C gives the interpreter's results bit for bit (every op, dots,
guards, failures, threads, per-sample and summed gradients, seeds, params=),
and the compiler's absence or failure, pickling and repr behave as
documented (the kernel cache: test_kernel_cache.py).  The interpreter is the independent reference here: it
is itself checked against micrograd, closed forms and finite differences by
the rest of the suite.  Each test builds at most a few kernels (a C compiler
run each, ~0.1-1 s), into a cache folder of its own."""
import ctypes
import math
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest

import tapead
from tapead import GuardError, Value, codegen, native
from tapead.codegen import Code
from opcases import math_ops

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """Kernels go to one folder per pytest run (never the user's cache)."""
    monkeypatch.setenv("TAPEAD_CACHE", str(tmp_path_factory.getbasetemp() / "kernels"))


def spellings():
    """op name -> f(a, b, c) recording that op, defined for every finite a, b
    (c a constant in [0.5, 2])."""
    return {
        "ADD": lambda a, b, c: a + b, "SUB": lambda a, b, c: a - b, "MUL": lambda a, b, c: a * b,
        "DIV": lambda a, b, c: a / (b * b + 1.0),
        "POW": lambda a, b, c: (b * b + 1.0) ** a.tanh(),
        "ADDC": lambda a, b, c: a + c, "RSUBC": lambda a, b, c: c - a, "MULC": lambda a, b, c: a * c,
        "RDIVC": lambda a, b, c: c / (a * a + 1.0), "POWC": lambda a, b, c: (a * a + 0.5) ** (c - 1.3),
        "RPOWC": lambda a, b, c: c ** a.tanh(), "RELU": lambda a, b, c: a.relu(),
        "TANH": lambda a, b, c: a.tanh(), "EXP": lambda a, b, c: a.tanh().exp(),
        "LOG": lambda a, b, c: (a * a + 0.25).log(), "SIGMOID": lambda a, b, c: a.sigmoid(),
        "SIN": lambda a, b, c: a.sin(), "COS": lambda a, b, c: a.cos(),
        "SQRT": lambda a, b, c: (a * a).sqrt(), "ABS": lambda a, b, c: abs(a),
        "MAX": lambda a, b, c: tapead.maximum(a, b), "MIN": lambda a, b, c: tapead.minimum(a, b),
        "DIVC": lambda a, b, c: a / 4.6e307 * 1e300,   # 1/c not normal: recorded as DIVC
        "LOG1P": lambda a, b, c: (a * a).log1p(),
        "DETACH": lambda a, b, c: a.detach() * b,
    }


def random_graph(seed, nin=3, npar=3, n=70):
    """(outputs, inputs, wrt) of a random graph over every op: chains of random
    ops on inputs and parameters, neurons (dots of 1-6 terms, some with a
    product of two rows or a square inside), uniform-only nodes, and outputs
    that are an input and a parameter themselves."""
    tapead.clear_guards()      # (an earlier test's guards on this thread would bind it too)
    rng = random.Random(seed)
    xs = [Value(rng.uniform(-1, 1)) for _ in range(nin)]
    ws = [Value(rng.uniform(-1, 1)) for _ in range(npar)]
    unused = Value(0.5)                      # a wrt leaf no output reaches
    pool, uni = list(xs) + list(ws), list(ws)
    spell = spellings()
    names = sorted(spell)
    for i in range(n):
        if i % 9 == 4:                        # a neuron: b + w0*x0 + w1*x1 + ...
            k = rng.randint(1, 6)
            terms = [(rng.choice(uni), rng.choice(pool[-8:])) for _ in range(k)]
            if rng.random() < 0.3:
                q = rng.choice(pool); terms.append((q, q))
            if rng.random() < 0.3:
                terms.append((rng.choice(pool), rng.choice(pool)))
            pool.append(sum((w * q for w, q in terms), rng.choice(pool)))
            continue
        op = names[i % len(names)] if i < 2 * len(names) else rng.choice(names)
        a, b = rng.choice(pool[-10:]), rng.choice(pool)
        if i % 7 == 0:                       # uniform: parameters only
            a, b = rng.choice(uni), rng.choice(uni)
            pool.append(spell[op](a, b, rng.uniform(0.5, 2)))
            uni.append(pool[-1])
            continue
        pool.append(spell[op](a, b, rng.uniform(0.5, 2)))
    total = sum(v * 1e-3 for v in pool[nin + npar:])     # every node reaches an output
    outs = pool[-3:] + [total, uni[-1], xs[0], ws[1]]
    return outs, xs, list(ws) + [xs[1], unused]


def pair(outs, xs, wrt, shape=True):
    """The same graph compiled twice: (interpreted, native in shape: True, the
    one chosen for it, or a name in tapead.codegen.SHAPES)."""
    return (tapead.compile(outs, xs, wrt=wrt, native=False),
            tapead.compile(outs, xs, wrt=wrt, native=shape))


def same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def same_but_nan(a, b):
    """same(), a NaN's sign and payload aside (IEEE 754 leaves them to the
    operand order, which the interpreter's vector loops and the generated
    code choose apart)."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_but_nan(u, v) for u, v in zip(a, b))
    nan = np.isnan(a)
    return a.shape == b.shape and (nan == np.isnan(b)).all() and a[~nan].tobytes() == b[~nan].tobytes()


def runs(p, X, pv):
    """Every way of running p over X, as a tuple of results."""
    B, nout = X.shape[0], p.n_outputs
    rows = np.random.default_rng(3).normal(size=(B, nout))
    return (p(X), p(X, threads=3), p.grad(X), p.grad(X, threads=4),
            p.grad(X, per_sample=True), p.grad(X, per_sample=True, threads=2),
            p.grad(X, seed=rows), p.grad(X, seed=rows, per_sample=True),
            p.grad(X, seed=np.arange(1.0, nout + 1)), p.grad(X, params=pv),
            p.grad(X, per_sample=True, params=pv), p(X[:5]), p.grad(X[:3]))


@pytest.mark.parametrize("seed, shape", [(1, "rows"), (2, "split")])
def test_random_programs_bit_for_bit(seed, shape):
    outs, xs, wrt = random_graph(seed)
    slow, fast = pair(outs, xs, wrt, shape)
    assert not slow.native and fast.native
    from tapead._c import OP
    names = {name for name, code in OP.items() if code in set(slow._flat_form()["op"].tolist())}
    assert math_ops() <= names                # every op of the table is in the program
    X = np.random.default_rng(seed).uniform(-2, 2, size=(2503, len(xs)))   # > 2 blocks, odd
    pv = np.random.default_rng(seed + 9).uniform(-1, 1, size=len(slow.params))
    assert same(runs(slow, X, pv), runs(fast, X, pv))


def test_two_lane_kernels_bit_for_bit():
    """Small programs get two rows' statements side by side (shape "lanes2");
    forced onto a random graph of every op: the interpreter's bits in every
    way of running it, odd row counts included (a chunk's last row alone)."""
    outs, xs, wrt = random_graph(3)
    slow, fast = pair(outs, xs, wrt, "lanes2")
    assert fast.native and "#define TA_W 2" in codegen.source(Code.of(fast), "lanes2")[0][0]
    X = np.random.default_rng(3).uniform(-2, 2, size=(1031, len(xs)))
    pv = np.random.default_rng(12).uniform(-1, 1, size=len(slow.params))
    assert same(runs(slow, X, pv), runs(fast, X, pv))
    assert same(runs(slow, X[:7], pv), runs(fast, X[:7], pv))


@pytest.mark.parametrize("shape", ["lanes2", "split", "rows"])
def test_zero_and_nonfinite_adjoints_bit_for_bit(shape):
    """A generated adjoint starts at its first term, the interpreter's at
    +0.0 plus it (codegen.schedule.first_writes): they differ in the sign of a zero, or
    a signalling NaN seed's quiet bit, until the gradient is written.  Rows
    and seeds of zeros of either sign, infinities and NaNs (a signalling one
    among them), through ops whose partials are zeros of either sign: the
    interpreter's bits, per sample and summed, a NaN's sign and payload
    aside (same_but_nan)."""
    x, y, w = Value(1.0), Value(2.0), Value(-3.0)
    a = (x * w).relu() * -1.0                 # partials -0.0 / +0.0 by row
    b = a * y + abs(y) * (w * x)
    c = tapead.maximum(b, a) - x * 0.0
    outs, wrt = [a, b, c, x * y], [x, y, w]
    slow, fast = pair(outs, [x, y], wrt, shape)
    assert fast.native
    vals = [0.0, -0.0, 1.0, -2.0, float("inf"), float("-inf"), float("nan")]
    X = np.array([(u, v) for u in vals for v in vals] * 3)
    snan = np.frombuffer(np.uint64(0x7FF0000000000001).tobytes(), dtype=np.float64)[0]
    seeds = np.array([-0.0, 0.0, snan, -1.0, float("inf"), 2.0, -0.0])
    rows = np.resize(np.array([[-0.0, 0.0, snan, 1.0], [0.0, -0.0, -0.0, -0.0],
                               [float("nan"), -0.0, 0.0, float("-inf")]]), (len(X), 4))
    for p in (slow, fast):
        p.results = [p.grad(X, seed=seeds[:4], per_sample=True), p.grad(X, seed=seeds[3:], per_sample=True),
                     p.grad(X, seed=rows, per_sample=True), p.grad(X, seed=rows),
                     p.grad(X, seed=seeds[:4]), p.grad(X[:1], seed=rows[:1], per_sample=True)]
    for u, v in zip(slow.results, fast.results):
        assert same_but_nan(u, v)
    zeros = fast.results[2][1]
    assert (np.signbit(zeros) & (zeros == 0)).sum() == 0   # the interpreter never gives -0.0 here
    assert (zeros == 0).sum() > 10


# Every op that takes a constant, with these constants: zeros of both signs,
# the powers compilers rewrite as arithmetic (2, -1, 0.5, 1, 0), other small
# integers and halves, constants so small that c - 1.0 is -1.0 (x ** c's
# derivative is c * x ** (c - 1)), huge and non-finite ones, and bases whose
# log glibc does not round correctly (c ** x's derivative is r * log(c)).
SWEEP_C = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 1.5, 0.1, 10.0,
           1e-300, 2.0 ** -60, 5e-324, 1e300, -1e300, 2.2013245328273205, 71.5286585805149,
           math.inf, -math.inf, math.nan]
SWEEP_DIVC = [5e-324, -1e-310, 1e308, -4.6e307, math.inf, math.nan]   # 1/c not normal: DIVC
SWEEP_CST = {"ADDC": lambda v, c: v + c, "RSUBC": lambda v, c: c - v, "MULC": lambda v, c: v * c,
             "DIVC": lambda v, c: v / c, "RDIVC": lambda v, c: c / v, "POWC": lambda v, c: v ** c,
             "RPOWC": lambda v, c: c ** v}
SWEEP_UN = {"RELU": Value.relu, "TANH": Value.tanh, "EXP": Value.exp, "LOG": Value.log,
            "LOG1P": Value.log1p, "SIGMOID": Value.sigmoid, "SIN": Value.sin, "COS": Value.cos,
            "SQRT": Value.sqrt, "ABS": abs}
# the ops of each program: a compiler's time grows faster than a kernel's
# length (four lanes: all the ops in one kernel took five times as long)
SWEEP_GROUPS = [("ADDC", "RSUBC"), ("MULC", "DIVC"), ("RDIVC",) + tuple(SWEEP_UN), ("POWC",), ("RPOWC",)]
SWEEP_SPECIAL = 64          # the first rows hold the special values (the sums skip them)


def _sweep_cases(ops):
    """(op, c, spelling) of each column for the ops."""
    return [(op, c, SWEEP_CST[op]) if op in SWEEP_CST else (op, 0.0, lambda v, c, f=SWEEP_UN[op]: f(v))
            for op in ops for c in (SWEEP_DIVC if op == "DIVC" else SWEEP_C if op in SWEEP_CST else [0.0])]


def _sweep_valid(op, c, x):
    """Where op raises neither a domain nor a range error at x (constant c),
    by the op's rules (csrc/ops/ops.h), with a margin at overflow."""
    with np.errstate(all="ignore"):
        if op == "RDIVC":
            return x != 0.0
        if op in ("POWC", "RPOWC"):
            b, e = (x, c) if op == "POWC" else (c, x)
            bad = (b == 0.0) & (e < 0.0) | (b < 0.0) & (e != np.floor(e)) | (e * np.log2(np.abs(b)) > 1000.0)
            return ~(np.isfinite(b) & np.isfinite(e) & bad)
        return {"EXP": ~(x > 700.0), "LOG": ~(x <= 0.0), "LOG1P": ~(x <= -1.0), "SQRT": ~(x < 0.0),
                "SIN": ~np.isinf(x), "COS": ~np.isinf(x)}.get(op, np.ones(x.shape, bool))


def _sweep_column(op, c, rng, n):
    """n inputs for op with constant c: random magnitudes from subnormal to
    huge of both signs, numbers near 1, numbers of 27 bits (their squares can
    be exact midpoints), small integers; the special values first.  Where op
    fails at x: |x|, else 1.0 (valid for every op and constant here)."""
    mag = np.ldexp(rng.uniform(1, 2, n), rng.integers(-1074, 1024, n)) * rng.choice([-1.0, 1.0], n)
    mid = np.ldexp(rng.integers(2 ** 25, 2 ** 26, n) * 2.0 + 1.0, rng.integers(-80, 30, n))
    x = np.select([rng.uniform(size=n) < p for p in (0.25, 0.65, 0.85)],
                  [mag, rng.uniform(-3, 3, n), mid], rng.integers(-60, 61, n).astype(float))
    x[:SWEEP_SPECIAL] = np.resize([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.inf, -np.inf, np.nan, 5e-324,
                                   -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1e308, 700.0,
                                   -745.5, 1e-300, 3.0, -3.0, 0.1, np.pi, 2.0 ** 27 + 1.0, -1.0 + 2 ** -52],
                                  SWEEP_SPECIAL)
    if op == "RPOWC" and c < 0:              # a negative base: integer exponents
        x = np.where(np.isfinite(x), np.rint(np.clip(x, -300, 300)), x)
    x = np.where(_sweep_valid(op, c, x), x, np.abs(x))
    return np.where(_sweep_valid(op, c, x), x, 1.0)


def _sweep_program(cases, rng, n, uniform):
    """A program with a column and an output per case: its op on an input
    (rows: n rows of data), or (uniform) on a parameter (a uniform node: n
    parameter vectors), and the interpreter's results."""
    tapead.clear_guards()
    vs = [Value(1.0) for _ in cases]
    outs = [f(v, c) for v, (op, c, f) in zip(vs, cases)]
    data = np.column_stack([_sweep_column(op, c, rng, n) for op, c, _ in cases])
    x = Value(0.5)
    xs = [x] if uniform else vs
    slow = tapead.compile(outs + [x * 2.0] if uniform else outs, xs, wrt=vs, native=False)
    from tapead._c import OP
    names = {code: name for name, code in OP.items()}
    flat = slow._flat_form()
    got = {(names[o], float(k).hex()) for o, k in zip(flat["op"].tolist(), flat["c"].tolist())}
    for op, c, _ in cases:                   # each case is recorded as its op, with its constant
        assert (op, c.hex()) in got or op in SWEEP_UN and op in {g[0] for g in got}, (op, c)
    d = dict(outs=outs, xs=xs, wrt=vs, labels=[f"{op} c={c!r}" for op, c, _ in cases], uniform=uniform)
    if uniform:
        d.update(PV=data, X=rng.uniform(-1, 1, size=(5, 1)))
    else:
        d.update(X=data, S=rng.normal(size=(n, len(outs))))
    d["results"] = _sweep_runs(slow, d)
    return d


def _sweep_runs(p, d):
    """[(what, array)]: values and gradients (per sample, with row seeds,
    summed over the rows without the special values); or (uniform) the
    gradients at each parameter vector, per sample and summed."""
    if d["uniform"]:
        X = d["X"]
        return [(f"{what}, parameters {j}", g) for j, pv in enumerate(d["PV"])
                for what, g in (("per-sample gradients", p.grad(X, params=pv, per_sample=True)[1]),
                                ("summed gradients", p.grad(X, params=pv)[1][None]))]
    X, S, k = d["X"], d["S"], SWEEP_SPECIAL
    return [("values", p(X)), ("per-sample gradients", p.grad(X, per_sample=True)[1]),
            ("per-sample gradients, row seeds", p.grad(X, seed=S, per_sample=True)[1]),
            ("summed gradients", p.grad(X[k:])[1][None]),
            ("summed gradients, row seeds", p.grad(X[k:], seed=S[k:])[1][None])]


@pytest.fixture(scope="module")
def sweep():
    """The sweep's programs: each group's ops on rows (20,000 rows); every
    constant op on a parameter (uniform nodes, 80 parameter vectors)."""
    rng = np.random.default_rng(20)
    progs = [_sweep_program(_sweep_cases(g), rng, 20000, False) for g in SWEEP_GROUPS]
    return progs + [_sweep_program(_sweep_cases(SWEEP_CST), rng, SWEEP_SPECIAL + 16, True)]


@pytest.mark.parametrize("shape", sorted(codegen.SHAPES))
def test_constants_sweep_bit_for_bit(sweep, shape):
    """Every op that takes a constant, with many constants, and every unary op,
    in each CPU shape: values and gradients are the interpreter's bits (a
    NaN's payload aside) over rows of every magnitude and the special values.
    A constant written into the kernel must not let the compiler compute
    otherwise than the interpreter, which gets it at run time (GCC turns
    pow(x, 2.0) into x * x, pow(x, -1.0) into 1.0 / x, log(c) into its
    correctly rounded value: codegen.literal, ops.h's ta_opaque).  On
    parameters, the uniform values and their partials, which a kernel
    computes once a call."""
    target = codegen.SHAPES["split"]._replace(part=40) if shape == "split" else shape
    bad = []
    for d in sweep:
        fast = tapead.compile(d["outs"], d["xs"], wrt=d["wrt"], native=target)
        assert fast.native
        for (what, a), (_, b) in zip(d["results"], _sweep_runs(fast, d)):
            if not same_but_nan(a, b):
                rows, cols = np.nonzero((a.view(np.uint64) != b.view(np.uint64)) & ~(np.isnan(a) & np.isnan(b)))
                r, j = rows[0], cols[0]
                x = f" (x = {d['X'][r, j]!r})" if not d["uniform"] and a.shape[0] == len(d["X"]) else ""
                bad.append(f"{shape}, {what}: {len(set(cols.tolist()))} columns differ, e.g. row {r}, "
                           f"{d['labels'][j]}{x}: interpreter {a[r, j]!r}, native {b[r, j]!r}")
    assert not bad, "\n".join(bad[:12])


@pytest.mark.parametrize("seed", [4, 5])
def test_split_kernels_bit_for_bit(seed):
    """Large programs get the split shape (functions of a few statements over
    values in memory, several translation units built at once); forced onto
    random graphs of every op with parts of 1 and 7 statements and three
    units: the interpreter's bits in every way of running them, and its
    failures."""
    split = codegen.SHAPES["split"]._replace(part=1 if seed == 4 else 7, units=3)
    outs, xs, wrt = random_graph(seed)
    slow, fast = pair(outs, xs, wrt, split)
    assert fast.native
    units = codegen.source(Code.of(fast), split)[0]
    assert len(units) == 3 and "TA_FRAME" in units[0]
    X = np.random.default_rng(seed).uniform(-2, 2, size=(2503, len(xs)))
    pv = np.random.default_rng(seed + 9).uniform(-1, 1, size=len(slow.params))
    assert same(runs(slow, X, pv), runs(fast, X, pv))
    failures_are_the_interpreters(split)


@pytest.mark.parametrize("seed", [6, 7])
def test_rows_kernels_bit_for_bit(seed):
    """The rows shape (each instruction a loop over a chunk's
    rows, a dot's terms in vectors of four rows, the lanes past a chunk's end
    masked out of the sums), forced onto random graphs of every op: the
    interpreter's bits in every way of running them (row counts that leave
    a partial chunk and a partial vector: 2503, 7, 5, 3), and its failures."""
    rows = codegen.SHAPES["rows"]._replace(units=2 if seed == 6 else 1)
    outs, xs, wrt = random_graph(seed)
    slow, fast = pair(outs, xs, wrt, rows)
    assert fast.native
    X = np.random.default_rng(seed).uniform(-2, 2, size=(2503, len(xs)))
    pv = np.random.default_rng(seed + 9).uniform(-1, 1, size=len(slow.params))
    assert same(runs(slow, X, pv), runs(fast, X, pv))
    assert same(runs(slow, X[:7], pv), runs(fast, X[:7], pv))
    failures_are_the_interpreters(rows)
    uniform_guard_and_no_wrt(rows)


def test_networks_get_the_rows_shape():
    """A network (an MLP's neurons: dots, then relu or tanh) compiled with
    native=True gets the rows shape by its size alone, and gives the
    interpreter's bits: values, summed gradients with params= (the training
    step's call) on 1 and 3 threads, per-sample, row seeds, an infinite
    input, a guard, and a row that trips the guard."""
    tapead.clear_guards()
    import tapead.nn as tnn
    random.seed(4)
    model = tnn.MLP(3, [8, 8, 1])
    xs = [Value(0.0), Value(0.0), Value(0.0)]
    h = model(xs)
    out = (h * xs[2]).tanh() + h.relu()
    params = model.parameters()
    plain = pair([out, h], xs, params)
    assert h < 3.0                            # a row guard
    slow, fast = pair([out, h], xs, params)
    code = Code.of(fast)
    assert code.n > codegen.LANES2_NODES and codegen.choose(code) == "rows"
    B = 1024 + 3 * code.ch + 21               # a partial chunk: 21 rows, then 3 lanes past its end
    X = np.random.default_rng(5).uniform(-1, 1, size=(B, 3))
    pv = np.random.default_rng(6).uniform(-1, 1, size=len(params))
    seed = np.random.default_rng(7).normal(size=(B, 2))
    for p_ in (None, pv):
        for call in (lambda p: p(X, params=p_), lambda p: p.grad(X, params=p_),
                     lambda p: p.grad(X, params=p_, threads=3), lambda p: p.grad(X, seed=seed, params=p_),
                     lambda p: p.grad(X, per_sample=True, params=p_), lambda p: p.grad(X[:6], params=p_)):
            assert same(call(slow), call(fast))
    # infinite inputs, then a partial chunk whose lanes past its end (21 to 23)
    # still hold the last call's values: inf * 0.0 there must not reach the sums
    for p in plain:
        p.grad(np.full((code.ch, 3), np.inf), params=pv, threads=1)
    assert same(plain[0].grad(X[:21], params=pv, threads=1), plain[1].grad(X[:21], params=pv, threads=1))
    big = pv * 60.0                           # some row's output passes the guard
    with pytest.raises(GuardError) as e1:
        slow.grad(X, params=big)
    with pytest.raises(GuardError) as e2:
        fast.grad(X, params=big)
    assert str(e1.value) == str(e2.value)


def layered(seed):
    """(outputs, inputs, wrt) of random layers as codegen fuses them (runs of
    dots b + w0*x0 + ... over the same rows, each followed by its relu or
    tanh): widths that leave a partial block, a weight two neurons share, a
    neuron whose products are written x*w, one that multiplies two rows or
    takes a row twice (not fused: a barrier inside the run), and inputs in
    wrt (so a layer adds to their adjoint rows)."""
    tapead.clear_guards()
    rng = random.Random(seed)
    xs = [Value(0.0) for _ in range(3)]
    params = []

    def param():
        params.append(Value(rng.uniform(-1, 1) if rng.random() < 0.9 else rng.choice([0.0, -0.0])))
        return params[-1]

    h = list(xs)
    for width in rng.sample([5, 6, 4, 2, 7], 3):
        shared = param()
        out = []
        for j in range(width):
            ws = [shared if j < 2 and i == 0 else param() for i in range(len(h))]
            terms = [(q, w) if j == 3 else (w, q) for w, q in zip(ws, h)]
            if j == width - 1 and rng.random() < 0.5:
                terms.append((h[0], h[-1]) if rng.random() < 0.5 else (param(), h[0]))
            act = (lambda v: v.relu()) if rng.random() < 0.7 else (lambda v: v.tanh())
            out.append(act(sum((a * b for a, b in terms), param())))
        h = out
    return [sum(h) * 0.5, h[0]], xs, params + [xs[0], xs[2]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fused_layers_bit_for_bit(seed):
    """A layer's dots fused (codegen.schedule: fuse_forward, fuse_reverse:
    four at a time, each sum in its own order) give the interpreter's bits:
    values and gradients in every way of running them, zeros of both signs
    among the weights and inputs, infinities, and chunks with partial vectors."""
    outs, xs, wrt = layered(seed)
    slow, fast = pair(outs, xs, wrt, "rows")
    code = Code.of(fast)
    src = "".join(codegen.source(code, "rows")[0])
    assert "ta_v4 r3_" in src and "const ta_v4 g3_" in src, "nothing fused"
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(2 * code.ch + 7, 3)) * (rng.uniform(size=(2 * code.ch + 7, 3)) > 0.1)
    X[::5] *= -1.0                                # zeros of both signs
    X[5] = [np.inf, 1.0, 0.0]
    pv = rng.uniform(-1, 1, size=len(slow.params)) * (rng.uniform(size=len(slow.params)) > 0.1)
    pv[::7] *= -1.0                               # some of the zeros -0.0
    assert same(runs(slow, X, pv), runs(fast, X, pv))
    assert same(runs(slow, X[:7], pv), runs(fast, X[:7], pv))


class _Run(ctypes.Structure):
    """csrc/api/cdef.h: ta_run_t"""
    _fields_ = [("X", ctypes.c_void_p), ("B", ctypes.c_uint64), ("nin", ctypes.c_uint32),
                ("Y", ctypes.c_void_p), ("nout", ctypes.c_uint32),
                ("seed", ctypes.c_void_p), ("seedmode", ctypes.c_int),
                ("G", ctypes.c_void_p), ("nwrt", ctypes.c_uint32), ("per_sample", ctypes.c_int),
                ("parts", ctypes.c_void_p), ("nblocks", ctypes.c_uint64),
                ("params", ctypes.c_void_p), ("npar", ctypes.c_uint32), ("threads", ctypes.c_int)]


@pytest.mark.parametrize("shape", sorted(codegen.SHAPES))
def test_kernels_compute_the_rows_themselves(shape):
    """A kernel that failed every block would pass the tests above (the
    interpreter runs a failed block again): each shape's kernel, called
    directly on a program of inputs alone, succeeds and writes the
    interpreter's values and per-sample gradients."""
    tapead.clear_guards()
    xs = [Value(0.1 * i) for i in range(3)]
    y = (xs[0] * xs[1]).exp() / (xs[2] * xs[2] + 1.0) + (xs[0] - xs[2]).tanh() * xs[1]
    slow = tapead.compile([y, y * y], xs, wrt=xs, native=False)
    address, _, nscratch = native.kernel(Code.of(slow), shape)
    B = 37
    X = np.random.default_rng(0).uniform(-1, 1, size=(B, 3))
    Y, G, seed = np.zeros((B, 2)), np.zeros((B, 3)), np.array([1.0, 0.5])
    scratch, U = np.zeros(nscratch), np.zeros(1)
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Run), ctypes.c_void_p, ctypes.c_uint64,
                          ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p)(address)
    run = _Run(X=X.ctypes.data, B=B, nin=3, Y=Y.ctypes.data, nout=2, seed=seed.ctypes.data,
               seedmode=1, G=G.ctypes.data, nwrt=3, per_sample=1, threads=1)
    assert fn(ctypes.byref(run), U.ctypes.data, 0, B, None, scratch.ctypes.data) == 0
    assert same((Y, G), slow.grad(X, seed=seed, per_sample=True))


def _avx_shim(tmp_path):
    """ta_then_ymm(k, R, U, r0, r1, parts, scratch): calls the kernel k, then
    reads XINUSE (xgetbv 1): 1 if the vector registers' upper halves are
    left in use (dirty), else 0; None where that cannot be read here."""
    cpu = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if not (native.avx2() and " xgetbv1" in cpu):
        return None
    src = tmp_path / "shim.c"
    src.write_text("""
#include <stdint.h>
typedef int (*kern)(const void *, const double *, uint64_t, uint64_t, double *, double *);
int ta_then_ymm(kern k, const void *R, const double *U, uint64_t r0, uint64_t r1, double *parts,
                double *scratch)
{
    uint32_t lo, hi;
    if (k(R, U, r0, r1, parts, scratch) != 0) return -1;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (lo >> 2) & 1;   /* XINUSE bit 2: the AVX state (upper halves) */
}
""")
    so = tmp_path / "shim.so"
    subprocess.run((native.compiler() or ["cc"]) + ["-O2", "-fPIC", "-shared", "-o", str(so), str(src)],
                   check=True)
    f = ctypes.CDLL(str(so)).ta_then_ymm
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Run)] + [ctypes.c_void_p] + [ctypes.c_uint64] * 2 \
        + [ctypes.c_void_p] * 2
    f.restype = ctypes.c_int
    return f


def test_rows_kernels_leave_the_vector_registers_clean(tmp_path):
    """A rows kernel (built for AVX2, at -O1, where GCC does not clear the
    vector registers' upper halves itself) returns with them clear: left
    dirty, code built without AVX that runs next (libm, the interpreter,
    Python) pays a transition penalty on every instruction (docs/native.md,
    the rows shape)."""
    shim = _avx_shim(tmp_path)
    if shim is None:
        pytest.skip("no AVX2 or no xgetbv 1 here")
    tapead.clear_guards()
    import tapead.nn as tnn
    random.seed(4)
    model = tnn.MLP(3, [8, 8, 1])
    xs = [Value(0.0), Value(0.0), Value(0.0)]
    out = model(xs).tanh()
    slow = tapead.compile([out], xs, wrt=model.parameters(), native=False)
    code = Code.of(slow)
    assert codegen.choose(code) == "rows"
    address, _, nscratch = native.kernel(code, "rows")
    B = 13
    X = np.random.default_rng(0).uniform(-1, 1, size=(B, 3))
    Y, G, seed = np.zeros((B, 1)), np.zeros((B, len(slow.params))), np.ones(1)
    scratch, U = np.zeros(nscratch), np.zeros(code.nu + 1)
    for mode in (0, 1):                       # values only; per-sample gradients
        run = _Run(X=X.ctypes.data, B=B, nin=3, Y=Y.ctypes.data, nout=1, seed=seed.ctypes.data,
                   seedmode=mode, G=G.ctypes.data, nwrt=G.shape[1], per_sample=1, threads=1)
        assert shim(address, ctypes.byref(run), U.ctypes.data, 0, B, None, scratch.ctypes.data) == 0


def test_failures_are_the_interpreters():
    failures_are_the_interpreters(True)


def failures_are_the_interpreters(shape):
    """A row where an op fails or a guard flips: the same exception, message and row."""
    tapead.clear_guards()
    x, z, w = Value(0.5), Value(0.5), Value(2.0)
    z3 = z * 3
    assert x > 0.1 and x < z3             # guards: with a constant, and between rows
    y = (x * w).log() + z.sqrt()
    slow, fast = pair([y], [x, z], [w], shape)
    X = np.full((3000, 2), 0.5)
    for row, col, v in ((1777, 0, -1.0), (2049, 1, -4.0), (5, 0, 0.05), (2500, 0, 1.6)):
        Xb = X.copy(); Xb[row, col] = v
        for call in (lambda p: p(Xb), lambda p: p.grad(Xb), lambda p: p.grad(Xb, per_sample=True),
                     lambda p: p.grad(Xb, threads=3)):
            with pytest.raises((ValueError, GuardError)) as e1:
                call(slow)
            with pytest.raises(type(e1.value)) as e2:
                call(fast)
            assert str(e1.value) == str(e2.value) and f"row {row}" in str(e2.value)
    assert same(slow.grad(X), fast.grad(X))


def test_uniform_guard_and_no_wrt():
    uniform_guard_and_no_wrt(True)


def uniform_guard_and_no_wrt(shape):
    tapead.clear_guards()                 # (earlier tests' guards would bind this graph too)
    w = Value(1.5); x = Value(0.0)
    assert w > 1.0
    y = (w * x + w).tanh()
    slow, fast = pair([y], [x], [], shape)
    X = np.linspace(-3, 3, 1001).reshape(-1, 1)
    assert same((slow(X), slow.grad(X)), (fast(X), fast.grad(X)))
    with pytest.raises(GuardError) as e1:
        slow(X, params=[0.5])
    with pytest.raises(GuardError) as e2:
        fast(X, params=[0.5])
    assert str(e1.value) == str(e2.value)


def test_programs_of_row_operations_stay_in_the_interpreter():
    """native=True on a program no shape runs faster than the interpreter
    (many row operations, not a network, few uniform ones) runs it in the
    interpreter and says why; named, a shape builds it all the same."""
    outs, xs, wrt = random_graph(1)
    p = tapead.compile(outs, xs, wrt=wrt, native=True)
    assert codegen.choose(Code.of(p)) is None
    assert not p.native and "runs='interpreter' (native=True, but a program of" in repr(p)
    assert tapead.compile(outs, xs, wrt=wrt, native="split").native


def test_repr_pickle_and_fallbacks(monkeypatch):
    x, w = Value(0.3), Value(2.0)
    y = (w * x).sigmoid() * w
    X = np.linspace(-1, 1, 77).reshape(-1, 1)
    fast = tapead.compile(y, [x], wrt=[w], native=True)
    assert fast.native and "runs='native'" in repr(fast)
    dflt = tapead.compile(y, [x], wrt=[w])
    assert not dflt.native and "runs='interpreter' (native=None" in repr(dflt)
    assert "native=False" in repr(tapead.compile(y, [x], wrt=[w], native=False))
    back = pickle.loads(pickle.dumps(fast))
    assert back.native and same(back.grad(X), fast.grad(X))
    assert not pickle.loads(pickle.dumps(dflt)).native
    monkeypatch.setenv("CC", "/nonexistent/cc")
    landed = pickle.loads(pickle.dumps(fast))      # rebuilt where it lands: no compiler, so it falls back
    assert not landed.native and "the build failed where it was unpickled" in repr(landed)
    assert same(landed.grad(X), fast.grad(X))
    with pytest.raises(native.CompilerError, match="no C compiler.*/nonexistent/cc"):
        tapead.compile(y, [x], wrt=[w], native=True)
    assert not tapead.compile(y, [x], wrt=[w]).native          # None never needs one
    monkeypatch.setenv("CC", "false")                          # found, but fails
    monkeypatch.setenv("TAPEAD_CACHE", os.environ["TAPEAD_CACHE"] + "-false")
    with pytest.raises(native.CompilerError, match="'false' failed"):
        tapead.compile(y, [x], wrt=[w], native=True)
    with pytest.raises(ValueError, match="native must be"):
        tapead.compile(y, [x], wrt=[w], native="yes")


def test_dask_runs_native_programs():
    da = pytest.importorskip("dask.array")
    import tapead.dask
    x, w = Value(0.3), Value(2.0)
    y = (w * x).exp() - w
    slow, fast = pair([y], [x], [w])
    X = np.random.default_rng(0).normal(size=(3000, 1))
    D = da.from_array(X, chunks=(1024, 1))
    for per_sample in (False, True):
        Y, G = tapead.dask.grad(fast, D, per_sample=per_sample)
        got = (Y.compute(scheduler="threads"), G.compute(scheduler="threads"))
        assert same(got, slow.grad(X, per_sample=per_sample))


def uniform_network(seed):
    """(outputs, inputs, wrt) of a program whose work is mostly uniform: a
    small network over parameters alone (its dots fused in generated code:
    codegen.schedule.uniform_dots), a dot that must not fuse (its product
    read twice), a uniform op that can fail (log), and a row part reading
    the network's output."""
    tapead.clear_guards()
    rng = random.Random(seed)
    ws = [Value(rng.uniform(-1, 1) if rng.random() < 0.9 else rng.choice([0.0, -0.0])) for _ in range(40)]
    ws += [Value(0.0) for _ in range(20)]          # more parameters than a list's table bound (wrt, params)
    h = ws[:5]
    for width in (6, 4):
        h = [sum((ws[rng.randrange(40)] * v for v in h), ws[rng.randrange(40)]).tanh() for _ in range(width)]
    h += [sum(ws[rng.randrange(40)] * v for v in h) for _ in range(3)]    # dots from 0 (sum's start)
    m = ws[0] * ws[1]
    twice = (ws[2] + m) * m                                   # a product read twice: no dot
    u = sum(h) + twice + (ws[3] * ws[3] + 1.5).log()
    x = Value(0.0)
    y = (x * u).sin() + u * h[0]
    return [y, u], [x], ws + [x]


@pytest.mark.parametrize("shape", sorted(codegen.SHAPES))
def test_uniform_dots_bit_for_bit(shape):
    """A kernel computes the uniform values itself (cdef.h: ta_uniform_fn),
    each uniform dot as one loop (in memory storages, and its reverse too):
    the interpreter's bits in every way of running it, values of uniform
    nodes inside a dot included (the interpreter reads them where a block
    fails), and a uniform op's failure named as the interpreter names it."""
    outs, xs, wrt = uniform_network(8)
    slow, fast = pair(outs, xs, wrt, shape)
    code = Code.of(fast)
    dots = codegen.schedule.uniform_dots(code)
    assert len(dots) >= 10 and all(len(d.terms) >= 4 for d in dots.values())
    assert sum(d.x < 0 for d in dots.values()) == 3
    X = np.random.default_rng(8).uniform(-2, 2, size=(1031, 1))
    pv = np.random.default_rng(9).uniform(-1, 1, size=len(slow.params))
    assert same(runs(slow, X, pv), runs(fast, X, pv))
    bad = pv.copy()
    bad[3] = 0.0                               # ws[3] * ws[3] + 1.5 stays positive: no failure
    assert same(slow.grad(X, params=bad), fast.grad(X, params=bad))
    i = [k for k, p in enumerate(wrt) if p is wrt[3]][0]
    bad[i] = float("nan")                      # log(nan) is nan, not a failure either
    assert same(slow.grad(X, params=bad), fast.grad(X, params=bad))


def test_uniform_failures_are_the_interpreters():
    tapead.clear_guards()
    w, x = Value(2.0), Value(0.5)
    u = sum((w * w for _ in range(5)), w) - 10.0              # a uniform dot, then a node that turns negative
    y = u.log() * x
    slow, fast = pair([y], [x], [w], "split")
    X = np.ones((7, 1))
    assert same(slow.grad(X), fast.grad(X))
    for p in (slow, fast):
        with pytest.raises(ValueError) as e:
            p.grad(X, params=[1.0])
        p.message = str(e.value)
    assert slow.message == fast.message and "row 0" in fast.message


def test_a_fused_uniform_forward_stores_every_uniform_value():
    """The uniform values a kernel computes with its dots fused (split, rows)
    are every one the unfused statements compute (row by row shapes), the
    products and partial sums inside a dot included: where a block fails,
    the interpreter runs it again on them."""
    outs, xs, wrt = uniform_network(9)
    slow = tapead.compile(outs, xs, wrt=wrt, native=False)
    code = Code.of(slow)
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    pv = np.ascontiguousarray(slow.params)
    got = {}
    for shape in ("lanes2", "split", "rows"):
        U = np.full(code.nu + 1, np.nan)
        assert fn(native.kernel(code, shape)[1])(U.ctypes.data, pv.ctypes.data) == 0
        got[shape] = U
    assert not np.isnan(got["lanes2"][:code.nu]).any()
    assert got["split"].tobytes() == got["lanes2"].tobytes() == got["rows"].tobytes()


def parameter_network(n_embd=24, n_hidden=96, n_tok=6, seed=3):
    """(loss, parameters) of a GPT-like loss over its parameters alone (a
    program of uniform nodes, tens of thousands of them): per position an
    embedding row, rmsnorm, an MLP through tapead.linear, a softmax and the
    log-probability of a target, averaged."""
    rng = random.Random(seed)

    def matrix(r, c):
        return [[Value(rng.gauss(0, 0.1)) for _ in range(c)] for _ in range(r)]
    wte, fc1, fc2, head = matrix(n_tok, n_embd), matrix(n_hidden, n_embd), matrix(n_embd, n_hidden), matrix(n_tok, n_embd)
    losses = []
    for pos in range(n_tok - 1):
        x = wte[pos]
        scale = (sum(v * v for v in x) * (1.0 / n_embd) + 1e-5) ** -0.5
        x = [v * scale for v in x]
        h = [v.relu() for v in tapead.linear(x, fc1)]
        x = [a + b for a, b in zip(tapead.linear(h, fc2), x)]
        logits = tapead.linear(x, head)
        top = max(v.data for v in logits)
        exps = [(v - top).exp() for v in logits]
        losses.append(-(exps[pos + 1] * sum(exps) ** -1).log())
    return sum(losses) * (1.0 / len(losses)), [p for m in (wte, fc1, fc2, head) for r in m for p in r]


def test_a_large_program_of_parameters_builds_and_replays_bit_for_bit(monkeypatch):
    """A program of tens of thousands of uniform nodes (a GPT-like loss over
    its parameters) builds natively in bounded units within the time the
    build allows (a minute here: its compilers are stopped past it) and
    gives the interpreter's bits; its dots are fused."""
    monkeypatch.setenv("TAPEAD_BUILD_TIMEOUT", "60")
    tapead.clear_guards()
    loss, params = parameter_network()
    slow, fast = pair([loss], [], params)
    code = Code.of(fast)
    assert code.n > 20000 and codegen.choose(code) == "split" and fast.native
    assert len(codegen.schedule.uniform_dots(code)) >= 500
    X = np.zeros((1, 0))
    pv = np.asarray(slow.params) * 1.01
    for call in (lambda p: p(X), lambda p: p.grad(X), lambda p: p.grad(X, params=pv),
                 lambda p: p.grad(X, per_sample=True), lambda p: p.grad(np.zeros((3, 0)), threads=2)):
        assert same(call(slow), call(fast))


@pytest.mark.skipif(os.name != "posix", reason="the slow compiler is a shell script")
def test_a_build_past_its_time_falls_back_where_the_shape_was_chosen(monkeypatch, tmp_path):
    """native=True whose build runs out of time (TAPEAD_BUILD_TIMEOUT) runs in
    the interpreter, with a warning and repr saying why; a shape named
    raises, as any failed build does."""
    # a compiler that takes 30 s (the real one after a sleep), so that a build
    # is late on any machine and never finished just before its deadline
    slow = tmp_path / "slowcc"
    slow.write_text('#!/bin/sh\ncase "$1" in --version) exec %s "$@";; esac\nsleep 30\nexec %s "$@"\n'
                    % ((" ".join(native.compiler()),) * 2))
    slow.chmod(0o700)
    monkeypatch.setenv("CC", str(slow))
    tapead.clear_guards()
    x, w = Value(0.3), Value(2.0)
    y = (w * x).exp() * (x + secrets_token())      # a kernel no cache holds
    monkeypatch.setenv("TAPEAD_BUILD_TIMEOUT", "0.5")
    with pytest.warns(UserWarning, match="took too long to build"):
        p = tapead.compile([y], [x], wrt=[w], native=True)
    assert not p.native and "took too long to build" in repr(p) and "TAPEAD_BUILD_TIMEOUT" in repr(p)
    X = np.linspace(-1, 1, 9).reshape(-1, 1)
    assert same(p.grad(X), tapead.compile([y], [x], wrt=[w], native=False).grad(X))
    with pytest.raises(native.CompilerError, match="TAPEAD_BUILD_TIMEOUT"):
        tapead.compile([y], [x], wrt=[w], native="lanes2")


def secrets_token():
    import secrets
    return 1.0 + secrets.randbelow(10 ** 9) * 1e-12


def test_a_call_of_one_row_gives_that_rows_bits():
    """A call of a single row runs each instruction on scalars (batch.c):
    row by row, the bits of the same rows run in chunks, values, per-sample
    gradients (seeded too) and a row's summed gradient, which is its own."""
    outs, xs, wrt = random_graph(4)
    p = tapead.compile(outs, xs, wrt=wrt, native=False)
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(48, len(xs)))
    X[5], X[7] = 0.0, -0.0
    seeds = rng.normal(size=(48, p.n_outputs))
    Y, G = p.grad(X, per_sample=True)
    _, Gs = p.grad(X, seed=seeds, per_sample=True)
    for r in range(48):
        x = X[r:r + 1]
        assert same(p(x), Y[r:r + 1])
        assert same(p.grad(x, per_sample=True), (Y[r:r + 1], G[r:r + 1]))
        assert same(p.grad(x)[1], G[r])
        assert same(p.grad(x, seed=seeds[r:r + 1], per_sample=True)[1], Gs[r:r + 1])


def test_a_failing_call_of_one_row_names_what_failed():
    x, w = Value(2.0), Value(0.5)
    y = (x * w).log() + x * x
    p = tapead.compile(y, [x], wrt=[w])
    with pytest.raises(ValueError, match="math domain error: log\\(-1.0\\) \\(at row 0\\)"):
        p.grad([[-2.0]])
    assert p.grad([[4.0]])[1].tolist() == [4.0 / (4.0 * 0.5)]     # d/dw log(x w) = x / (x w)
