"""Module-level math functions on Values: tapead.sin(x) is x.sin().

Thin wrappers for code written in the functional style (tapead.exp(x));
a plain number becomes a leaf first.
"""
from .engine import as_value


def sin(x):
    """sin(x) as a Value."""
    return as_value(x).sin()


def cos(x):
    """cos(x) as a Value."""
    return as_value(x).cos()


def sqrt(x):
    """sqrt(x) as a Value; ValueError for x < 0."""
    return as_value(x).sqrt()


def abs(x):  # noqa: A001 (shadows the builtin inside this module only)
    """|x| as a Value."""
    return as_value(x).abs()


def exp(x):
    """e**x as a Value."""
    return as_value(x).exp()


def log(x):
    """Natural log of x as a Value; ValueError for x <= 0."""
    return as_value(x).log()


def tanh(x):
    """tanh(x) as a Value."""
    return as_value(x).tanh()


def relu(x):
    """max(0, x) as a Value."""
    return as_value(x).relu()


def sigmoid(x):
    """1 / (1 + e**-x) as a Value."""
    return as_value(x).sigmoid()
