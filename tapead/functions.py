"""Module-level math functions on Values: tapead.sin(x) is x.sin().

Thin wrappers for code written in the functional style (tapead.exp(x));
a plain number becomes a leaf first.
"""
from __future__ import annotations

from .engine import Operand, Value, as_value


def sin(x: Operand) -> Value:
    """sin(x) as a Value."""
    return as_value(x).sin()


def cos(x: Operand) -> Value:
    """cos(x) as a Value."""
    return as_value(x).cos()


def sqrt(x: Operand) -> Value:
    """sqrt(x) as a Value; ValueError for x < 0."""
    return as_value(x).sqrt()


def abs(x: Operand) -> Value:  # noqa: A001 (shadows the builtin inside this module only)
    """|x| as a Value."""
    return as_value(x).abs()


def exp(x: Operand) -> Value:
    """e**x as a Value."""
    return as_value(x).exp()


def log(x: Operand) -> Value:
    """Natural log of x as a Value; ValueError for x <= 0."""
    return as_value(x).log()


def tanh(x: Operand) -> Value:
    """tanh(x) as a Value."""
    return as_value(x).tanh()


def relu(x: Operand) -> Value:
    """max(0, x) as a Value."""
    return as_value(x).relu()


def sigmoid(x: Operand) -> Value:
    """1 / (1 + e**-x) as a Value."""
    return as_value(x).sigmoid()
