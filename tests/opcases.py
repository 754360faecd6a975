"""The op cases: one row per math op of the op table (csrc/api/ops.def), the one
place the tests list the op vocabulary.  Every test module that runs "every
op" draws from ROWS (or FORMS) here, and test_opcases.py fails when an op of
the table has no row, or a row names no op, so a new op cannot go untested.
(Two tests pick ops on purpose instead: test_dropin's numpy arrays on the left
of Python's five arithmetic operators, and test_graphs' check that +, * and
relu give micrograd's own graph shape.)

A row (OpCase) holds:
  forms   the ways Python spells the op (a Form each: `a - c` and `c + a`
          both record ADDC), each with
            ta(a, b, c)   on tapead Values a, b and a number c,
            py(x, y, c)   on plain floats, through Python's operators, builtins
                          and math (the independent reference; it raises where
                          Python raises),
            mg(a, b, c)   on micrograd Values (conftest.MG), or None where
                          micrograd has no such op, with bound (the error
                          scale against it, err_*) and exact (rounds as
                          micrograd does, to the bit),
            d(x, y, c, r) the closed-form local partials (d r/dx, d r/dy) in
                          micrograd's conventions (relu'(0) = 0, |x|'(0) = 0,
                          max/min split a tie, d(b**y)/dy = 0 at b == 0, y >= 0);
  total   True when the op raises neither a domain nor a range error anywhere
          on [-2, 2] (for every constant there too), so random graphs over
          such points may apply it without a guard;
  tame    a spelling (a, b, c) -> Value defined, and moderate, for every finite
          input, for random graphs that compare derivatives (exp(tanh a), not
          exp a), or None to leave the op out of them;
  grad    (id, form, c, x strategy[, y strategy[, keep(x, y)]]): where the
          gradient is checked against a central difference (test_ops), away
          from kinks and domain edges;
  second  (id, f of Values, f of floats, points): second derivatives
          (test_higher), composed so that a linear op's is not just zero;
  errors  (exception, form, x, y, c): domain errors, as Python raises them;
  ieee    (form, c): spellings checked to follow IEEE at nan, inf and -0.0
          exactly as plain floats do (test_errors);
  kink    True where the op is not differentiable somewhere in its domain
          (relu, abs at 0; max, min at a tie): left out of finite differences
          of random graphs;
  anomaly (form, x, y, c): finite-or-not inputs where the op's result is inf
          or nan, which detect_anomaly refuses, naming the op and its inputs;
  stop    True for an op whose derivative is zero by definition (detach):
          finite differences do not see it, so it has no grad or second
          entries (test_ops checks its derivatives of every order are 0).

Adding an op: one OpCase in ROWS."""
import math
import sys
from typing import Callable, NamedTuple, Optional

import numpy as np
from hypothesis import strategies as st

import tapead

INF, NAN = math.inf, math.nan


# --------------------------------------------------- plain-float references
def py_pow(x, y):
    """Python's float ** float, except that a complex result is a ValueError
    (also where Python's complex power would overflow instead).  CPython's
    rule that finite operands overflowing raise OverflowError is spelled out:
    PyPy 7.3's x ** 2.0 gives inf there."""
    if x < 0 and math.isfinite(x) and math.isfinite(y) and y != math.floor(y):
        raise ValueError("negative number to a fractional power")
    r = x ** y
    if isinstance(r, complex):
        raise ValueError("negative number to a fractional power")
    if math.isinf(r) and math.isfinite(x) and math.isfinite(y):
        raise OverflowError("float power")
    return r


def py_sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def py_recip(c):
    """micrograd's a / c is a * c**-1: tapead keeps that, bit for bit, where
    c**-1 is a normal float, and records the true a / c where it is not.
    Returns (c**-1, or None where a / c is the true quotient)."""
    if c == 0:
        raise ZeroDivisionError("float division by zero")
    try:
        r = c ** -1.0
    except OverflowError:
        return None
    return r if not -sys.float_info.min < r < sys.float_info.min else None


def py_divc(x, c):
    r = py_recip(c)
    return x / c if r is None else x * r


# ---- for partials: IEEE results where Python would raise
def ieee_div(a, b):
    if b == 0:
        if a == 0 or a != a:
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)
    return a / b


def ieee_pow(x, e):
    """C's pow(x, e): infinities where Python raises."""
    odd = math.isfinite(e) and e == math.floor(e) and e % 2 == 1
    try:
        r = x ** e
    except ZeroDivisionError:
        return math.copysign(INF, x) if odd else INF
    except OverflowError:
        return -INF if (x < 0 and odd) else INF
    return NAN if isinstance(r, complex) else r


def ieee_log(x):
    if x != x or x < 0:
        return NAN
    return -INF if x == 0 else math.log(x)


def dpow_dx(x, y):
    if y == 0:
        return 0.0                             # x**0 is the constant 1
    return y * ieee_pow(x, y - 1.0)           # micrograd: other * self.data**(other-1)


def dpow_dy(x, y, r):
    return 0.0 if (x == 0 and y >= 0) else r * ieee_log(x)


def d_max(x, y):
    return (0.5, 0.5) if x == y else ((0.0, 1.0) if y > x else (1.0, 0.0))


def d_min(x, y):
    return (0.5, 0.5) if x == y else ((0.0, 1.0) if y < x else (1.0, 0.0))


def sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)


# ------------------------------------------------------------------ forms
class Form(NamedTuple):
    name: str        # unique over all forms
    nargs: int       # Value inputs: 1 (a, and maybe c) or 2 (a, b)
    ta: Callable     # (a, b, c) -> Value
    py: Callable     # (x, y, c) -> float
    mg: Optional[Callable]
    d: Callable      # (x, y, c, r) -> (dr/dx, dr/dy)
    leafc: str = ""  # "after"/"before": c becomes a tape leaf, the op's second/first input
                     # (d then takes the inputs in that order)
    op: str = ""     # filled in from the row
    bound: Optional[Callable] = None   # (x, y, c, mx, my) -> error scale, see err_*
    exact: bool = False  # rounds as micrograd's spelling does, to the bit


def un(name, ta, py, d, mg=None, bound=None, exact=False):
    """A spelling with one Value input a (and maybe the constant c)."""
    return Form(name, 1, ta, py, mg, lambda x, y, c, r: (d(x, c, r), 0.0),
                bound=bound, exact=exact)


def bi(name, ta, py, d, mg=None, bound=None, exact=False):
    """A spelling with two Value inputs a, b."""
    return Form(name, 2, lambda a, b, c: ta(a, b), lambda x, y, c: py(x, y), mg,
                lambda x, y, c, r: d(x, y, r), bound=bound, exact=exact)


# ---- error scales against micrograd (test_graphs): bound(x, y, c, mx, my),
# with mx, my the inputs' scales (the sum of magnitudes of the terms that made
# them), gives (the result's scale, [the scale of each input's partial]), or
# None where the step is too near a pole, a kink or overflow to compare
def err_add(x, y, c, mx, my):
    return mx + my, [1, 1]


def err_mul(x, y, c, mx, my):
    return mx * my, [my, mx]


def err_div(x, y, c, mx, my):
    if abs(y) < 0.05:
        return None
    q = abs(x / y)
    return (mx + q * my) / abs(y), [(1 + my / abs(y)) / abs(y), (mx + 2 * q * my) / abs(y)]


def err_pow(n=None):
    def bound(x, y, c, mx, my):
        e = c if n is None else n
        if abs(x) < 0.05 or (x < 0 and e != int(e)) or abs(x) ** e > 1e6:
            return None
        rel = 1 + abs(e) * mx / abs(x)
        return abs(x) ** e * rel, [abs(e) * abs(x) ** (e - 1) * (1 + abs(e - 1) * mx / abs(x))]
    return bound


def err_addc(x, y, c, mx, my):
    return mx + abs(c), [1]


def err_mulc(x, y, c, mx, my):
    return mx * abs(c), [abs(c)]


def err_neg(x, y, c, mx, my):
    return mx, [1]


def err_divc(x, y, c, mx, my):
    return mx / abs(c), [1 / abs(c)]


def err_rdivc(x, y, c, mx, my):
    if abs(x) < 0.05:
        return None
    return abs(c) * (1 + mx / abs(x)) / abs(x), [abs(c) * (1 + 2 * mx / abs(x)) / x ** 2]


def err_relu(x, y, c, mx, my):
    if abs(x) <= 1e-6 * mx:      # the sign itself is uncertain: a kink
        return None
    return (mx, [1]) if x > 0 else (0.0, [0])


def err_tanh(x, y, c, mx, my):
    if abs(x) > 20:
        return None
    t = math.tanh(x)
    mag = (1 - t * t) * mx + 1
    return mag, [(1 - t * t) + 2 * mag]


def err_exp(x, y, c, mx, my):
    if x > 12:
        return None
    mag = math.exp(x) * (1 + mx)
    return mag, [mag]


def fl(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def away(s, *points, gap=1e-3):
    """s with draws at least gap from each of points."""
    return s.filter(lambda x: all(abs(x - p) > gap for p in points))


def off_tie(x, y):
    """Points of max/min away from the tie, their kink."""
    return abs(x - y) > 1e-3


def _sig(x):
    return 1 / (1 + math.exp(-x))


class OpCase(NamedTuple):
    op: str
    forms: tuple
    total: bool
    tame: Optional[Callable]
    grad: tuple = ()
    second: tuple = ()
    errors: tuple = ()
    ieee: tuple = ()
    kink: bool = False
    anomaly: tuple = ()
    stop: bool = False


def row(op, forms, total, tame=None, grad=(), second=(), errors=(), ieee=(), kink=False,
        anomaly=(), stop=False):
    return OpCase(op, tuple(f._replace(op=op) for f in forms), total, tame,
                  tuple(grad), tuple(second), tuple(errors), tuple(ieee), kink, tuple(anomaly), stop)


X2 = [[0.7, 1.3], [1.6, 0.4]]     # the points of a binary op's second derivatives

ROWS = (
    # ------------------------------------------------------------ binary
    row("ADD", [bi("add", lambda a, b: a + b, lambda x, y: x + y, lambda x, y, r: (1.0, 1.0),
                   mg=lambda a, b, c: a + b, bound=err_add, exact=True)],
        total=True, tame=lambda a, b, c: a + b,
        grad=[("add", "add", None, fl(-5, 5), fl(-5, 5))],
        second=[("ADD", lambda x, y: (x + y) * x, lambda x, y: (x + y) * x, X2)],
        ieee=[("add", None)],
        anomaly=[("add", INF, -INF, None)]),
    row("SUB", [bi("sub", lambda a, b: a - b, lambda x, y: x - y, lambda x, y, r: (1.0, -1.0),
                   mg=lambda a, b, c: a - b, bound=err_add, exact=True)],
        total=True, tame=lambda a, b, c: a - b,
        grad=[("sub", "sub", None, fl(-5, 5), fl(-5, 5))],
        second=[("SUB", lambda x, y: (x - y) * y, lambda x, y: (x - y) * y, X2)],
        ieee=[("sub", None)],
        anomaly=[("sub", 1e308, -1e308, None)]),
    row("MUL", [bi("mul", lambda a, b: a * b, lambda x, y: x * y, lambda x, y, r: (y, x),
                   mg=lambda a, b, c: a * b, bound=err_mul, exact=True)],
        total=True, tame=lambda a, b, c: a * b,
        grad=[("mul", "mul", None, fl(-5, 5), fl(-5, 5))],
        second=[("MUL", lambda x, y: x * y, lambda x, y: x * y, X2)],
        ieee=[("mul", None)],
        anomaly=[("mul", INF, 0.0, None)]),
    row("DIV", [bi("div", lambda a, b: a / b, lambda x, y: x / y,
                   lambda x, y, r: (1.0 / y, -r / y), mg=lambda a, b, c: a / b, bound=err_div)],
        total=False, tame=lambda a, b, c: a / (b * b + 1.0),
        grad=[("div", "div", None, fl(-5, 5), away(fl(-5, 5), 0, gap=0.1))],
        second=[("DIV", lambda x, y: x / y, lambda x, y: x / y, X2)],
        errors=[(ZeroDivisionError, "div", 3.0, 0.0, None)],
        anomaly=[("div", 1e308, 5e-324, None)]),
    row("POW", [bi("pow", lambda a, b: a ** b, py_pow,
                   lambda x, y, r: (dpow_dx(x, y), dpow_dy(x, y, r)))],
        total=False, tame=None,
        grad=[("pow", "pow", None, fl(0.1, 5), fl(-3, 3))],
        second=[("POW", lambda x, y: x ** y, lambda x, y: x ** y, X2)],
        errors=[(ZeroDivisionError, "pow", 0.0, -1.0, None),
                (ValueError, "pow", -2.0, 0.5, None),
                (OverflowError, "pow", 3.0, 1000.0, None)]),
    row("MAX", [bi("max", lambda a, b: a.maximum(b), max, lambda x, y, r: d_max(x, y)),
                bi("maximum", tapead.maximum, max, lambda x, y, r: d_max(x, y)),
                Form("maxc", 1, lambda a, b, c: tapead.maximum(a, c), lambda x, y, c: max(x, c),
                     None, lambda x, y, c, r: d_max(x, y), leafc="after")],
        total=True, tame=lambda a, b, c: tapead.maximum(a, b),
        grad=[("maximum", "maximum", None, fl(-5, 5), fl(-5, 5), off_tie),
              ("maximum_m", "max", None, fl(-5, 5), fl(-5, 5), off_tie)],
        second=[("MAX", lambda x, y: x.maximum(y) * x, lambda x, y: max(x, y) * x, X2)],
        ieee=[("maximum", None)], kink=True),
    row("MIN", [bi("min", lambda a, b: a.minimum(b), min, lambda x, y, r: d_min(x, y)),
                bi("minimum", tapead.minimum, min, lambda x, y, r: d_min(x, y)),
                # minimum(c, a): c, made a leaf, is the first input (which
                # one a tie with nan picks depends on the order)
                Form("minc", 1, lambda a, b, c: tapead.minimum(c, a), lambda x, y, c: min(c, x),
                     None, lambda x, y, c, r: d_min(x, y), leafc="before")],
        total=True, tame=lambda a, b, c: tapead.minimum(a, b),
        grad=[("minimum", "minimum", None, fl(-5, 5), fl(-5, 5), off_tie),
              ("minimum_m", "min", None, fl(-5, 5), fl(-5, 5), off_tie)],
        second=[("MIN", lambda x, y: x.minimum(y) * y, lambda x, y: min(x, y) * y, X2)],
        ieee=[("minimum", None)], kink=True),
    # ------------------------------------------- one input and a constant
    row("ADDC", [un("addc", lambda a, b, c: a + c, lambda x, y, c: x + c, lambda x, c, r: 1.0,
                    mg=lambda a, b, c: a + c, bound=err_addc, exact=True),
                 un("raddc", lambda a, b, c: c + a, lambda x, y, c: c + x, lambda x, c, r: 1.0,
                    mg=lambda a, b, c: c + a, bound=err_addc, exact=True),
                 un("subc", lambda a, b, c: a - c, lambda x, y, c: x - c, lambda x, c, r: 1.0,
                    mg=lambda a, b, c: a - c, bound=err_addc, exact=True)],
        total=True, tame=lambda a, b, c: a + c,
        grad=[("addc", "addc", 1.5, fl(-5, 5)), ("raddc", "raddc", 1.5, fl(-5, 5)),
              ("subc", "subc", 2.25, fl(-5, 5))],
        second=[("ADDC", lambda x: (x + 2.5) * x, lambda x: (x + 2.5) * x, [[0.7]])],
        ieee=[("addc", 1)], anomaly=[("addc", 3.0, None, NAN)]),
    row("RSUBC", [un("rsubc", lambda a, b, c: c - a, lambda x, y, c: c - x, lambda x, c, r: -1.0,
                     mg=lambda a, b, c: c - a, bound=err_addc, exact=True)],
        total=True, tame=lambda a, b, c: c - a,
        grad=[("rsubc", "rsubc", 2.25, fl(-5, 5))],
        second=[("RSUBC", lambda x: (2.5 - x) * x, lambda x: (2.5 - x) * x, [[0.7]])],
        ieee=[("rsubc", 1)]),
    row("MULC", [un("mulc", lambda a, b, c: a * c, lambda x, y, c: x * c, lambda x, c, r: c,
                    mg=lambda a, b, c: a * c, bound=err_mulc, exact=True),
                 un("rmulc", lambda a, b, c: c * a, lambda x, y, c: c * x, lambda x, c, r: c,
                    mg=lambda a, b, c: c * a, bound=err_mulc, exact=True),
                 un("neg", lambda a, b, c: -a, lambda x, y, c: x * -1.0, lambda x, c, r: -1.0,
                    mg=lambda a, b, c: -a, bound=err_neg, exact=True)],
        total=True, tame=lambda a, b, c: a * c,
        grad=[("neg", "neg", None, fl(-5, 5)), ("mulc", "mulc", -3.5, fl(-5, 5)),
              ("rmulc", "rmulc", 0.75, fl(-5, 5))],
        second=[("MULC", lambda x: (x * 3.0) * x, lambda x: (x * 3.0) * x, [[0.7]])],
        ieee=[("neg", None), ("mulc", 2)], anomaly=[("mulc", 1e308, None, 10)]),
    # x / c records MULC (x * c**-1, micrograd's value) where c**-1 is a
    # normal float, DIVC (the true x / c) where it is not
    row("DIVC", [un("divc", lambda a, b, c: a / c, lambda x, y, c: py_divc(x, c),
                    lambda x, c, r: py_recip(c) or 1.0 / c, mg=lambda a, b, c: a / c, bound=err_divc)],
        total=False, tame=None,
        grad=[("divc", "divc", 3.0, fl(-5, 5))],
        second=[("DIVC", lambda x: (x / 1e308) * x * 1e308, lambda x: (x / 1e308) * x * 1e308,
                 [[0.7]])],
        errors=[(ZeroDivisionError, "divc", 3.0, None, 0), (ZeroDivisionError, "divc", 3.0, None, 0.0),
                (ZeroDivisionError, "divc", 3.0, None, np.float64(0))]),
    row("RDIVC", [un("rdivc", lambda a, b, c: c / a, lambda x, y, c: c / x, lambda x, c, r: -r / x,
                     mg=lambda a, b, c: c / a, bound=err_rdivc)],
        total=False, tame=None,
        grad=[("rdivc", "rdivc", 2.0, away(fl(-5, 5), 0, gap=0.1))],
        second=[("RDIVC", lambda x: 2.0 / x, lambda x: 2.0 / x, [[0.7]])],
        errors=[(ZeroDivisionError, "rdivc", 0.0, None, 1)]),
    row("POWC", [un("powc", lambda a, b, c: a ** c, lambda x, y, c: py_pow(x, c),
                    lambda x, c, r: dpow_dx(x, c), mg=lambda a, b, c: a ** c, bound=err_pow()),
                 # x ** 0.5 as a spelling of its own: random graphs meet its
                 # infinite partial at 0 often, not only where they draw c = 0.5
                 un("pow.5", lambda a, b, c: a ** 0.5, lambda x, y, c: py_pow(x, 0.5),
                    lambda x, c, r: dpow_dx(x, 0.5), mg=lambda a, b, c: a ** 0.5, bound=err_pow(0.5))],
        total=False, tame=lambda a, b, c: a ** 2,
        grad=[("pow2", "powc", 2, fl(-5, 5)), ("pow3", "powc", 3, fl(-5, 5)),
              ("pow-1", "powc", -1, away(fl(-5, 5), 0, gap=0.1)),
              ("pow-2", "powc", -2, away(fl(-5, 5), 0, gap=0.1)),
              ("pow0.5", "powc", 0.5, fl(0.05, 10)), ("pow-1.5", "powc", -1.5, fl(0.1, 10))],
        second=[("POWC", lambda x: x ** 3.5, lambda x: x ** 3.5, [[0.7]]),
                ("POWC_neg", lambda x: x ** -1.5, lambda x: x ** -1.5, [[0.7]])],
        errors=[(ZeroDivisionError, "powc", 0.0, None, -1), (ZeroDivisionError, "powc", 0.0, None, -2.5),
                (ValueError, "powc", -2.0, None, 0.5), (ValueError, "powc", -2.0, None, 1 / 3),
                (OverflowError, "powc", 3.0, None, 2000)],
        ieee=[("powc", 2), ("powc", 0)]),
    row("RPOWC", [un("rpowc", lambda a, b, c: c ** a, lambda x, y, c: py_pow(c, x),
                     lambda x, c, r: dpow_dy(c, x, r))],
        total=False, tame=None,
        grad=[("rpowc", "rpowc", 2.5, fl(-5, 5))],
        second=[("RPOWC", lambda x: 2.5 ** x, lambda x: 2.5 ** x, [[0.7]])],
        errors=[(ZeroDivisionError, "rpowc", -1.0, None, 0), (ValueError, "rpowc", 0.5, None, -2.0),
                (OverflowError, "rpowc", 1000.0, None, 10)]),
    # ------------------------------------------------------------- unary
    row("RELU", [un("relu", lambda a, b, c: a.relu(), lambda x, y, c: 0.0 if x < 0 else x,
                    lambda x, c, r: 1.0 if r > 0 else 0.0, mg=lambda a, b, c: a.relu(), bound=err_relu, exact=True)],
        total=True, tame=lambda a, b, c: a.relu(),
        grad=[("relu", "relu", None, away(fl(-5, 5), 0))],
        second=[("RELU+", lambda x: x.relu() * x, lambda x: max(x, 0) * x, [[0.7]]),
                ("RELU-", lambda x: x.relu() * x, lambda x: max(x, 0) * x, [[-0.7]])],
        ieee=[("relu", None)], kink=True, anomaly=[("relu", INF, None, None)]),
    row("TANH", [un("tanh", lambda a, b, c: a.tanh(), lambda x, y, c: math.tanh(x),
                    lambda x, c, r: 1.0 - r * r, mg=lambda a, b, c: a.tanh(), bound=err_tanh)],
        total=True, tame=lambda a, b, c: a.tanh(),
        grad=[("tanh", "tanh", None, fl(-5, 5))],
        second=[("TANH", lambda x: x.tanh(), math.tanh, [[0.7]])],
        ieee=[("tanh", None)], anomaly=[("tanh", NAN, None, None)]),
    row("EXP", [un("exp", lambda a, b, c: a.exp(), lambda x, y, c: math.exp(x),
                   lambda x, c, r: r, mg=lambda a, b, c: a.exp(), bound=err_exp)],
        total=True, tame=lambda a, b, c: a.tanh().exp(),
        grad=[("exp", "exp", None, fl(-10, 10))],
        second=[("EXP", lambda x: x.exp(), math.exp, [[0.7]])],
        errors=[(OverflowError, "exp", 1000.0, None, None)],
        ieee=[("exp", None)], anomaly=[("exp", INF, None, None)]),
    row("LOG", [un("log", lambda a, b, c: a.log(), lambda x, y, c: math.log(x),
                   lambda x, c, r: 1.0 / x)],
        total=False, tame=None,
        grad=[("log", "log", None, fl(0.01, 100))],
        second=[("LOG", lambda x: x.log(), math.log, [[0.7]])],
        errors=[(ValueError, "log", 0.0, None, None), (ValueError, "log", -2.0, None, None)]),
    row("LOG1P", [un("log1p", lambda a, b, c: a.log1p(), lambda x, y, c: math.log1p(x),
                     lambda x, c, r: 1.0 / (1.0 + x))],
        total=False, tame=None,
        grad=[("log1p", "log1p", None, fl(-0.99, 100))],
        second=[("LOG1P", lambda x: x.log1p(), math.log1p, [[0.7]])],
        errors=[(ValueError, "log1p", -1.0, None, None), (ValueError, "log1p", -2.0, None, None)]),
    row("SIGMOID", [un("sigmoid", lambda a, b, c: a.sigmoid(), lambda x, y, c: py_sigmoid(x),
                       lambda x, c, r: r * (1.0 - r))],
        total=True, tame=lambda a, b, c: a.sigmoid(),
        grad=[("sigmoid", "sigmoid", None, fl(-20, 20))],
        second=[("SIGMOID", lambda x: x.sigmoid(), _sig, [[0.7]])],
        ieee=[("sigmoid", None)]),
    row("SIN", [un("sin", lambda a, b, c: a.sin(), lambda x, y, c: math.sin(x),
                   lambda x, c, r: math.cos(x))],
        total=True, tame=lambda a, b, c: a.sin(),      # sin(inf) is a ValueError
        grad=[("sin", "sin", None, fl(-10, 10))],
        second=[("SIN", lambda x: x.sin(), math.sin, [[0.7]])],
        errors=[(ValueError, "sin", INF, None, None), (ValueError, "sin", -INF, None, None)]),
    row("COS", [un("cos", lambda a, b, c: a.cos(), lambda x, y, c: math.cos(x),
                   lambda x, c, r: -math.sin(x))],
        total=True, tame=lambda a, b, c: a.cos(),
        grad=[("cos", "cos", None, fl(-10, 10))],
        second=[("COS", lambda x: x.cos(), math.cos, [[0.7]])],
        errors=[(ValueError, "cos", INF, None, None)]),
    row("SQRT", [un("sqrt", lambda a, b, c: a.sqrt(), lambda x, y, c: math.sqrt(x),
                    lambda x, c, r: ieee_div(0.5, r))],
        total=False, tame=None,
        grad=[("sqrt", "sqrt", None, fl(0.01, 100))],
        second=[("SQRT", lambda x: x.sqrt(), math.sqrt, [[0.7]])],
        errors=[(ValueError, "sqrt", -2.0, None, None), (ValueError, "sqrt", -1.0, None, None)]),
    row("ABS", [un("abs", lambda a, b, c: abs(a), lambda x, y, c: abs(x),
                   lambda x, c, r: sign(x)),
                un("absm", lambda a, b, c: a.abs(), lambda x, y, c: abs(x),
                   lambda x, c, r: sign(x))],
        total=True, tame=lambda a, b, c: abs(a),
        grad=[("abs", "abs", None, away(fl(-5, 5), 0)), ("absm", "absm", None, away(fl(-5, 5), 0))],
        second=[("ABS+", lambda x: abs(x) * x, lambda x: abs(x) * x, [[0.7]]),
                ("ABS-", lambda x: abs(x) * x, lambda x: abs(x) * x, [[-0.7]])],
        ieee=[("abs", None)], kink=True, anomaly=[("abs", -INF, None, None)]),
    # x's value with a zero derivative: finite differences see x, so it takes
    # no part in the random graphs that compare them (tame None)
    row("DETACH", [un("detach", lambda a, b, c: a.detach(), lambda x, y, c: x, lambda x, c, r: 0.0),
                   un("detachf", lambda a, b, c: tapead.detach(a), lambda x, y, c: x, lambda x, c, r: 0.0)],
        total=True, tame=None, ieee=[("detach", None)], stop=True),
)

BY_OP = {r.op: r for r in ROWS}
FORMS = {f.name: f for r in ROWS for f in r.forms}

# The op table's entries that are not math ops: LEAF and DEAD (kind LEAF: a
# leaf, a reclaimed slot) and CUSTOM (kind NARY: a node computed in Python,
# tested in test_custom.py).
KIND_LEAF, KIND_UN, KIND_CST, KIND_NARY = 0, 1, 3, 4


def math_ops():
    """The op table's math ops, by identifier, read from the compiled table."""
    from tapead._c import OP, OP_KINDS
    return {name for name, i in OP.items() if OP_KINDS[i] not in (KIND_LEAF, KIND_NARY)}


def form_cases(field):
    """(id, form, ...) of every row's `field` entries, flattened, for parametrize."""
    return [e for r in ROWS for e in getattr(r, field)]
