"""Bad input raises Python's own exceptions and changes nothing; NaN and inf
as data follow IEEE as plain floats do."""
import math
import re

import numpy as np
import pytest

import tapead
from tapead import Value
from tapead._c import lib
from conftest import same
from opcases import FORMS, form_cases

INF, NAN = math.inf, math.nan


def snapshot(values):
    return tapead.tape_stats()["nodes"], [(v.data, v.grad) for v in values]


# (exception, form, x, y, c): every op's domain errors in the op cases
CASES = form_cases("errors")


def _ids(e):
    exc, form, x, y, c = e
    return f"{form}-{x}-{y}-{c!r}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(e) for e in CASES])
def test_bad_input_raises_and_changes_nothing(case):
    exc, form, x, y, c = case
    f = FORMS[form]
    v = dict(x=Value(3.0), zero=Value(0.0), m1=Value(-1.0), neg=Value(-2.0), half=Value(0.5),
             inf=Value(INF), ninf=Value(-INF), big=Value(1000.0))
    a, b = Value(x), Value(0.0 if y is None else y)
    y_ = v["x"] * v["m1"] + v["neg"] + a + b  # a recorded graph with gradients, a and b in it
    y_.backward()
    values = list(v.values()) + [y_, a, b]
    before = snapshot(values)
    with pytest.raises(exc):
        f.ta(a, b, c)
    assert snapshot(values) == before
    # the tape still works afterwards
    z = v["x"] * 2
    z.backward()
    assert z.data == 6.0 and v["x"].grad == before[1][0][1] + 2.0


@pytest.mark.parametrize("case", CASES, ids=[_ids(e) for e in CASES])
def test_plain_python_raises_the_same_error(case):
    exc, form, x, y, c = case
    with pytest.raises(exc):
        FORMS[form].py(x, y, c)


def test_plain_python_agrees_on_the_error_types():
    for exc, f in ((ZeroDivisionError, lambda: 3.0 / 0.0), (ZeroDivisionError, lambda: 0.0 ** -1),
                   (ValueError, lambda: math.log(0.0)), (ValueError, lambda: math.sqrt(-1)),
                   (ValueError, lambda: math.sin(INF)), (OverflowError, lambda: math.exp(1000)),
                   (OverflowError, lambda: 3.0 ** 2000)):
        with pytest.raises(exc):
            f()


def test_error_messages_name_the_problem():
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        Value(1.0) / Value(0.0)
    with pytest.raises(ZeroDivisionError, match="negative power"):
        Value(0.0) ** -1
    with pytest.raises(ValueError, match="domain"):
        Value(-1.0).log()


SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.5, -2.0]
# (form, c): every op's `ieee` entries in the op cases
IEEE = [(FORMS[name], c) for name, c in form_cases("ieee")]
BIN = [(f, c) for f, c in IEEE if f.nargs == 2]
UN = [(f, c) for f, c in IEEE if f.nargs == 1]


def test_nan_and_inf_binary_ops_follow_ieee():
    for x in SPECIALS:
        for y in SPECIALS:
            for f, c in BIN:
                r = f.ta(Value(x), Value(y), c)
                assert same(r.data, float(f.py(x, y, c))), (f.name, x, y, r.data)


def test_nan_and_inf_unary_ops_follow_ieee():
    for x in SPECIALS:
        for f, c in UN:
            try:
                expect = float(f.py(x, None, c))
            except (OverflowError, ValueError, ZeroDivisionError) as e:
                with pytest.raises(type(e)):
                    f.ta(Value(x), None, c)
                continue
            got = f.ta(Value(x), None, c).data
            assert same(got, expect), (f.name, x, got, expect)


def test_nan_and_inf_in_unguarded_domains():
    for x in (NAN, INF):
        assert same(Value(x).log().data, math.log(x))
        assert same(Value(x).sqrt().data, math.sqrt(x))
    assert same(Value(NAN).sin().data, math.sin(NAN))
    assert same((1 / Value(INF)).data, 1 / INF)
    assert same((Value(INF) / Value(INF)).data, INF / INF)
    with pytest.raises(ZeroDivisionError):
        Value(NAN) / 0.0


def test_nan_and_inf_gradients():
    x = Value(INF)
    y = x * x
    y.backward()
    assert y.data == INF and x.grad == INF
    n = Value(NAN)
    z = n * 2.0 + 1.0
    z.backward()
    assert z.data != z.data and n.grad == 2.0


# ------------------------------------- bad arguments get a clear exception
def test_numpy_bool_scalars_are_numbers():
    """numpy 2 names its bool scalar type 'bool', so a check by the name
    'bool_' refused it with "needs ... bool ..., not bool"."""
    for b, want in ((np.True_, 1.0), (np.False_, 0.0), (np.float32(2.0) > 1, 1.0)):
        assert Value(b).data == want
        assert (Value(1.0) + b).data == 1.0 + want
    assert tapead.maximum(np.False_, Value(-0.5)).data == 0.0


def test_value_takes_what_the_operators_take():
    from decimal import Decimal
    from fractions import Fraction
    x = Value(1.0)
    for c in (Decimal("1.5"), Fraction(3, 2), np.float32(1.5), np.int8(3)):
        assert Value(c).data == float(c) == (x * c).data
    for bad in ("1.5", 1j, None, [1.0], object()):
        with pytest.raises(TypeError, match=r"Value\(\) needs a real number"):
            Value(bad)


@pytest.mark.parametrize("call,exc,match", [
    (lambda x, f: tapead.values(None), TypeError, r"values\(\) needs real numbers.*NoneType"),
    (lambda x, f: tapead.values(["1.5", "2"]), TypeError, r"values\(\) needs real numbers"),
    (lambda x, f: tapead.values([1.0, 2j]), TypeError, "complex"),
    (lambda x, f: tapead.set_data([x], None), TypeError, r"set_data\(\) needs real numbers"),
    (lambda x, f: tapead.hvp(f, [x], None), TypeError, r"hvp\(\): v needs real numbers"),
    (lambda x, f: tapead.set_limit(0.5), TypeError, "whole number"),
    (lambda x, f: tapead.set_limit("1000"), TypeError, "whole number"),
    (lambda x, f: tapead.set_limit(2 ** 64), ValueError, r"2\*\*64"),
    (lambda x, f: tapead.set_limit(-1), ValueError, "node limit"),
    (lambda x, f: tapead.grad(1.0, [x]), TypeError, "outputs must be a Value or an iterable"),
    (lambda x, f: tapead.grad(f, 2.0), TypeError, "inputs must be a Value or an iterable"),
    (lambda x, f: tapead.grad(f, [x], grad_outputs=[None]), TypeError, "grad_outputs"),
    (lambda x, f: tapead.get_label(1), TypeError, "get_label needs a Value, not int"),
    (lambda x, f: tapead.wengert(f, [x], [1.0, 2.0]), ValueError, "^wengert: 1 inputs but 2"),
    (lambda x, f: tapead.jvp(f, [x], ["a"]), TypeError, "jvp: tangents must be real"),
])
def test_bad_arguments_name_the_problem_and_change_nothing(call, exc, match):
    """Each of these gave a silent nan, a silently ignored setting, a bare
    cffi/numpy error or a message naming another function."""
    x = Value(2.0)
    f = x * x
    before = snapshot([x, f]), tapead.tape_stats()["limit"]
    with pytest.raises(exc, match=match):
        call(x, f)
    assert (snapshot([x, f]), tapead.tape_stats()["limit"]) == before


def test_good_arguments_of_those_calls_still_work():
    x = Value(2.0)
    f = x * x
    assert tapead.grad(f, [x], grad_outputs=np.array(2.0)) == [8.0]   # a 0-d array weight
    assert tapead.grad(f, x, grad_outputs=3) == 12.0
    assert [v.data for v in tapead.values([True, 2, np.float32(0.5)])] == [1.0, 2.0, 0.5]
    tapead.set_limit(1e7)
    assert tapead.tape_stats()["limit"] == 10 ** 7
    tapead.set_limit(np.int64(0))
    assert tapead.tape_stats()["limit"] == 0


@pytest.mark.parametrize("make,op", [
    (lambda: Value(-1.0).relu() * INF, "ReLU"),
    (lambda: Value(0.0).sqrt() * 0.0, "sqrt"),
    (lambda: Value(0.0) ** 0.5 * 0.0, "**c"),          # a CST op's case of the sweep
    (lambda: Value(0.0) ** Value(0.5) * 0.0, "**"),    # a BIN op's
])
def test_anomaly_in_backward_names_a_gradient_not_a_value(make, op):
    """relu(-1) and sqrt(0) are finite: what goes nan in backward() is the
    gradient through them (0 * inf), and the message must say so.  The aborted
    sweep leaves no marks: outside the context the same backward runs."""
    y = make()
    with tapead.detect_anomaly():
        with pytest.raises(tapead.AnomalyError,
                           match=rf"in backward\(\), the gradient through op '{re.escape(op)}' with input"):
            y.backward()
    y.backward()
    assert y.grad == 1.0 and tapead._c.lib.ta_validate() == 0


def test_submodules_are_reachable_from_a_bare_import():
    """The README names tapead.nn and tapead.optim; `import tapead` alone must reach them."""
    import subprocess
    import sys
    code = "import tapead; tapead.nn.MLP(2, [3, 1]); tapead.optim.SGD([], lr=0.1)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_status_table_each_status_one_meaning():
    """Every status C returns is one row of csrc/api/status.def, with its own
    value and its own exception: no code stands for two things."""
    from tapead._c import status
    consts = {n: getattr(lib, n) for n in dir(lib)
              if n.startswith("TA_E") or n.startswith("TA_NEED")}
    assert len(set(consts.values())) == len(consts), consts           # one value, one name
    assert set(status._STATUS) == set(consts.values()) | {lib.TA_OK}   # and each is in the table
    for code in consts.values():
        e = status.error(code) if code not in (lib.TA_EGUARD, lib.TA_EANOMALY) else None
        if e is not None:
            assert isinstance(e, Exception) and str(e)
    # ta_backward is done with TA_OK, Python rules or not (nothing is left to let go of)
    x = Value(0.5)
    plain = x * 2
    assert lib.ta_backward(plain._i) == lib.TA_OK
    c = Value(x.data, (x,), "ident")

    def _backward():
        x.grad += c.grad
    c._backward = _backward
    assert lib.ta_backward((c * 1.0)._i) == lib.TA_OK and x.grad == 2.0 + 1.0
    # the meanings TA_EBADOP used to share each have their own status now
    assert lib.ta_nograd(-1) == lib.TA_EMODE
    assert lib.ta_nograd(0) == 0
