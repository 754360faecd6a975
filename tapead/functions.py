"""Module-level math functions on Values: tapead.sin(x) is x.sin().

Thin wrappers for code written in the functional style (tapead.exp(x));
a plain number becomes a leaf first.  One per unary op, generated from
csrc/api/ops.def by build_ext.py: edit the table, not this file.

>>> import tapead
>>> tapead.sqrt(9)
Value(data=3.0, grad=0.0)
"""
from __future__ import annotations

from .engine import Operand, Value, as_value


def relu(x: Operand) -> Value:
    """max(0, x), with micrograd's conventions: relu(-0.0) is -0.0, d/dx at 0 is 0.

    >>> import tapead
    >>> x = tapead.Value(-2.0); y = tapead.relu(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 0.0)
    """
    return as_value(x).relu()


def tanh(x: Operand) -> Value:
    """tanh(x) (C's tanh: accurate near 0 and never overflows, unlike micrograd's formula).

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.tanh(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).tanh()


def exp(x: Operand) -> Value:
    """e**x; OverflowError when it overflows, as math.exp.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.exp(x)
    >>> y.backward(); (y.data, x.grad)
    (1.0, 1.0)
    """
    return as_value(x).exp()


def log(x: Operand) -> Value:
    """Natural log; ValueError for x <= 0, as math.log.

    >>> import tapead
    >>> x = tapead.Value(1.0); y = tapead.log(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).log()


def sigmoid(x: Operand) -> Value:
    """1 / (1 + e**-x), evaluated without overflow.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.sigmoid(x)
    >>> y.backward(); (y.data, x.grad)
    (0.5, 0.25)
    """
    return as_value(x).sigmoid()


def sin(x: Operand) -> Value:
    """sin(x); ValueError for infinite x, as math.sin.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.sin(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).sin()


def cos(x: Operand) -> Value:
    """cos(x); ValueError for infinite x, as math.cos.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.cos(x)
    >>> y.backward(); (y.data, x.grad)
    (1.0, 0.0)
    """
    return as_value(x).cos()


def sqrt(x: Operand) -> Value:
    """sqrt(x); ValueError for x < 0, as math.sqrt.

    >>> import tapead
    >>> x = tapead.Value(4.0); y = tapead.sqrt(x)
    >>> y.backward(); (y.data, x.grad)
    (2.0, 0.25)
    """
    return as_value(x).sqrt()


def abs(x: Operand) -> Value:  # noqa: A001 (shadows the builtin inside this module only)
    """|x|; its derivative at 0 is taken as 0.

    >>> import tapead
    >>> x = tapead.Value(-3.0); y = tapead.abs(x)
    >>> y.backward(); (y.data, x.grad)
    (3.0, -1.0)
    """
    return as_value(x).abs()


def log1p(x: Operand) -> Value:
    """ln(1 + x), exact for x near 0 (softplus: log1p(exp(x))); ValueError for x <= -1, as math.log1p.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.log1p(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).log1p()


def detach(x: Operand) -> Value:
    """x's value, through which no gradient flows (JAX's stop_gradient); a replay computes it again from x, whose graph it keeps alive (for a number, x.data).

    >>> import tapead
    >>> x = tapead.Value(2.0); y = tapead.detach(x)
    >>> y.backward(); (y.data, x.grad)
    (2.0, 0.0)
    """
    return as_value(x).detach()
