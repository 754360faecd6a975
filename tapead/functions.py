"""Module-level math functions on Values: tapead.sin(x) is x.sin().

Thin wrappers for code written in the functional style (tapead.exp(x));
a plain number becomes a leaf first.
"""
from __future__ import annotations

from .engine import Operand, Value, as_value


def sin(x: Operand) -> Value:
    """sin(x) as a Value.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.sin(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).sin()


def cos(x: Operand) -> Value:
    """cos(x) as a Value.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.cos(x)
    >>> y.backward(); (y.data, x.grad)
    (1.0, 0.0)
    """
    return as_value(x).cos()


def sqrt(x: Operand) -> Value:
    """sqrt(x) as a Value; ValueError for x < 0.

    >>> import tapead
    >>> x = tapead.Value(4.0); y = tapead.sqrt(x)
    >>> y.backward(); (y.data, x.grad)
    (2.0, 0.25)
    >>> tapead.sqrt(9)
    Value(data=3.0, grad=0.0)
    """
    return as_value(x).sqrt()


def abs(x: Operand) -> Value:  # noqa: A001 (shadows the builtin inside this module only)
    """|x| as a Value.

    >>> import tapead
    >>> x = tapead.Value(-3.0); y = tapead.abs(x)
    >>> y.backward(); (y.data, x.grad)
    (3.0, -1.0)
    """
    return as_value(x).abs()


def exp(x: Operand) -> Value:
    """e**x as a Value.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.exp(x)
    >>> y.backward(); (y.data, x.grad)
    (1.0, 1.0)
    """
    return as_value(x).exp()


def log(x: Operand) -> Value:
    """Natural log of x as a Value; ValueError for x <= 0.

    >>> import tapead
    >>> x = tapead.Value(1.0); y = tapead.log(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).log()


def tanh(x: Operand) -> Value:
    """tanh(x) as a Value.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.tanh(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 1.0)
    """
    return as_value(x).tanh()


def relu(x: Operand) -> Value:
    """max(0, x) as a Value.

    >>> import tapead
    >>> x = tapead.Value(-2.0); y = tapead.relu(x)
    >>> y.backward(); (y.data, x.grad)
    (0.0, 0.0)
    """
    return as_value(x).relu()


def sigmoid(x: Operand) -> Value:
    """1 / (1 + e**-x) as a Value.

    >>> import tapead
    >>> x = tapead.Value(0.0); y = tapead.sigmoid(x)
    >>> y.backward(); (y.data, x.grad)
    (0.5, 0.25)
    """
    return as_value(x).sigmoid()
