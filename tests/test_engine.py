"""The drop-in API of tapead.Value, checked against micrograd and plain floats."""
import math
import platform

import numpy as np
import pytest
from micrograd.engine import Value as MGValue

import tapead
from tapead.bench import readme_expr
from tapead import Value
from opcases import FORMS
from conftest import this_tapead


# ------------------------------------------------------------ construction
@pytest.mark.parametrize("x, expect", [
    (3, 3.0), (-2.5, -2.5), (True, 1.0), (False, 0.0),
    (np.float64(1.25), 1.25), (np.int64(-7), -7.0), (np.float32(0.5), 0.5),
])
def test_value_accepts_real_numbers(x, expect):
    v = Value(x)
    assert v.data == expect and type(v.data) is float
    assert v.grad == 0


@pytest.mark.parametrize("bad", ["1.0", None, 1 + 2j, [1.0], (1.0,)])
def test_value_rejects_non_reals_naming_the_type(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        Value(bad)


def test_value_of_a_value_is_a_type_error():
    with pytest.raises(TypeError, match="Value"):
        Value(Value(1.0))


def test_data_and_grad_read_write():
    p = Value(2.0)
    y = p * p
    y.backward()
    assert p.grad == 4.0
    lr = 0.1
    p.data -= lr * p.grad
    assert p.data == 2.0 - 0.1 * 4.0
    p.grad = 0
    assert p.grad == 0.0
    p.data = 5
    assert p.data == 5.0


def test_repr_like_micrograd():
    v = Value(3.0)
    assert repr(v) == repr(MGValue(3.0)).replace("grad=0", "grad=0.0")
    assert repr(v) == "Value(data=3.0, grad=0.0)"
    w = v * 2
    w.backward()
    assert repr(v) == "Value(data=3.0, grad=2.0)"


# ------------------------------------------------------------ operators
A, B = 1.75, -0.625


def _pairs():
    """(tapead result, plain-float result) for every operator form: every
    spelling in the op cases, both ways round, with a few constants (where
    Python gives a float), and numbers of numpy's types as operands."""
    out = []
    for f in FORMS.values():
        for x, y in ((A, B), (B, A)):
            for c in (0.5, 1, 2, 3, 4, 10):
                try:
                    expect = f.py(x, y, c)
                except (ArithmeticError, ValueError):
                    continue                      # a domain error: test_errors.py
                out.append((f.ta(Value(x), Value(y), c), expect))
    a, b = Value(A), Value(B)
    return out + [
        (np.int64(-1) * a, -A), (np.float64(2.5) + a, 2.5 + A), (np.float64(2.5) - a, 2.5 - A),
        (np.float32(2.0) * a, 2.0 * A), (np.float64(3.0) / a, 3.0 / A), (a * np.int64(3), 3 * A),
        (0.5 * b, 0.5 * B),
    ]


def test_every_operator_form_returns_a_value_with_the_float_result():
    for v, expect in _pairs():
        assert type(v) is Value
        assert v.data == pytest.approx(expect, rel=1e-15, abs=0)


def test_numpy_scalar_on_the_left_returns_a_value():
    v = Value(2.0)
    for r in (np.int64(-1) * v, np.float64(2) * v, np.float64(1) + v, np.int64(1) - v,
              np.float64(1) / v, np.float32(3) * v):
        assert type(r) is Value
    r = np.int64(-1) * v
    r.backward()
    assert r.data == -2.0 and v.grad == -1.0


def test_sum_of_values():
    vs = [Value(float(i)) for i in range(5)]
    s = sum(vs)
    assert type(s) is Value and s.data == 10.0
    s.backward()
    assert [v.grad for v in vs] == [1.0] * 5


def test_pow_with_value_exponent():
    x, y = Value(2.0), Value(3.0)
    z = x ** y
    z.backward()
    assert z.data == 8.0
    assert x.grad == 3.0 * 2.0 ** 2
    assert y.grad == pytest.approx(8.0 * math.log(2.0), rel=1e-15)


def test_unsupported_operand_types():
    v = Value(1.0)
    for bad in ("a", None, [1.0]):
        with pytest.raises(TypeError):
            v + bad
        with pytest.raises(TypeError):
            bad * v


def test_values_hash_by_identity():
    a, b = Value(1.0), Value(1.0)
    assert len({a, b}) == 2 and {a: 1}[a] == 1


# --------------------------------------------------------------- backward
def test_backward_seeds_root_with_one():
    x = Value(3.0)
    x.backward()
    assert x.grad == 1.0
    y = x * 2
    y.backward()
    assert y.grad == 1.0


def test_leaves_accumulate_across_backward_calls():
    x = Value(3.0)
    y = x * x
    y.backward()
    y.backward()
    assert x.grad == 12.0
    x.grad = 0
    y.backward()
    assert x.grad == 6.0


def test_intermediates_hold_this_passes_adjoint():
    x = Value(3.0)
    h = x * 2          # intermediate
    y = h * h
    y.backward()
    assert h.grad == 12.0
    y.backward()
    assert h.grad == 12.0   # not accumulated (intended difference from micrograd)
    assert x.grad == 48.0   # the leaf accumulates


def test_nodes_not_reached_are_untouched():
    x, w = Value(3.0), Value(5.0)
    other = w * 2
    other.backward()
    assert w.grad == 2.0 and other.grad == 1.0
    y = x * 4
    y.backward()
    assert x.grad == 4.0
    assert w.grad == 2.0 and other.grad == 1.0
    # a node used to build the root, but after it on the tape, is not reached
    later = y + x
    assert later.grad == 0.0


def test_backward_from_an_intermediate():
    x = Value(2.0)
    h = x * x
    y = h * 3
    h.backward()
    assert x.grad == 4.0 and y.grad == 0.0


# ---------------------------------------------------- micrograd's examples
def _readme(V):
    a, b, g = readme_expr(V)   # micrograd's README expression, also the benchmark's workload
    g.backward()
    return a, b, g


def test_micrograd_readme_expression():
    a, b, g = _readme(Value)
    assert f"{g.data:.4f}" == "24.7041"
    assert f"{a.grad:.4f}" == "138.8338"
    assert f"{b.grad:.4f}" == "645.5773"
    ma, mb, mgv = _readme(MGValue)
    assert g.data == pytest.approx(mgv.data, rel=1e-14)
    assert a.grad == pytest.approx(ma.grad, rel=1e-14)
    assert b.grad == pytest.approx(mb.grad, rel=1e-14)


def _sanity(V):
    x = V(-4.0)
    z = 2 * x + 2 + x
    q = z.relu() + z * x
    h = (z * z).relu()
    y = h + q + q * x
    y.backward()
    return x, y


def test_micrograd_sanity_check_exact():
    x, y = _sanity(Value)
    mx, my = _sanity(MGValue)
    assert y.data == my.data
    assert x.grad == mx.grad
    assert (y.data, x.grad) == (-20.0, 46.0)


# ------------------------------------------------------------ the fronts
def test_front_is_named_and_cpython_on_cpython_by_default():
    import os
    want = os.environ.get("TAPEAD_FRONT", "cpython")
    expect = ("cpython" if (want in ("cpython", "native") and platform.python_implementation() == "CPython")
              else "cffi")
    assert tapead.FRONT == expect


@pytest.mark.skipif(tapead.FRONT != "cpython", reason="the C type's size")
def test_a_cpython_value_is_small_and_untracked_without_custom_nodes():
    """Node, weakref list and _o (40 bytes), plus the collector's header
    (16 bytes); tracked by the collector only while it carries something."""
    import gc
    import sys
    assert sys.getsizeof(Value(1.0)) <= 56
    assert not gc.is_tracked(Value(1.0) * 2)


def test_a_python_subclass_keeps_its_methods_on_top_of_the_operators():
    class ValueExt(Value):
        def cube(self):
            return self * self * self

    a = ValueExt(2.0)
    a.note = "mine"                       # a subclass has a __dict__
    y = a.cube() + ValueExt(1.0) * a
    y.backward()
    assert (y.data, a.grad, a.note) == (10.0, 13.0, "mine")
    assert isinstance(a, Value) and type(a.cube()) is Value


def test_an_unknown_front_is_refused():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import tapead"], capture_output=True, text=True,
                       env={**__import__("os").environ, "TAPEAD_FRONT": "fast"})
    assert r.returncode != 0 and "TAPEAD_FRONT must be 'cpython' or 'cffi'" in r.stderr


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="the CPython front")
@pytest.mark.parametrize("name", ["cpython", "native"])
def test_the_cpython_front_is_chosen_by_its_name_or_its_older_one(name):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import tapead; print(tapead.FRONT)"], capture_output=True,
                       text=True, env=this_tapead(TAPEAD_FRONT=name))
    assert r.returncode == 0 and r.stdout.split() == ["cpython"], r.stderr


@pytest.mark.skipif(tapead.FRONT != "cpython", reason="the CPython front's binding")
def test_the_cpython_front_is_bound_by_name_and_refuses_a_wrong_binding_whole():
    """bind takes every hook the CPython front calls, by name: one missing,
    unknown, positional or not callable is a TypeError that names it, and
    the hooks bound before stay as they were."""
    import sys
    import tapead.engine as E
    front = sys.modules["tapead._cpython"]
    hooks = E.cpython_hooks()
    some = next(iter(hooks))
    for args, kw, says in [((), {k: v for k, v in hooks.items() if k != some}, f"hook {some} is missing"),
                           ((), {**hooks, "errror": hooks["error"]}, "no hook is named 'errror'"),
                           ((hooks["error"],), hooks, "by name only"),
                           ((), {**hooks, "real": 1.5}, "hook real must be callable, not float")]:
        with pytest.raises(TypeError, match=says):
            front.bind(*args, **kw)
    front.bind(**hooks)                 # the whole set again: the same hooks
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        Value(1.0) / Value(0.0)          # (the error hook, still bound)
    with pytest.raises(TypeError, match="str"):
        Value("1")                       # (the real hook)
    assert (Value(2.0) * 3).data == 6.0
