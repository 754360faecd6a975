"""Forward (tangent) mode: directional derivatives by one C tangent sweep.

jvp(output, inputs, tangents) seeds each input with its tangent and sweeps
the tape behind `output` upward once (csrc/diff/tangent.c), so it costs about
one forward pass whatever the number of inputs, and it changes no Value's
data or grad.
"""
from __future__ import annotations

from typing import Any, Iterable, List, SupportsFloat, Tuple

from ._c import higher as _ch
from .engine import Value, _real, ids_of, values_of


def seeds(inputs: Iterable[Value], tangents: Iterable[SupportsFloat],
          who: str = "jvp") -> Tuple[int, Any, List[float]]:
    """(n, int64 ids, tangents as floats) for C, checking the Python side; `who` names the caller."""
    vals = values_of(inputs, f"{who}: inputs")
    try:
        ts = [_real(t) for t in tangents]
    except TypeError as e:
        raise TypeError(f"{who}: tangents must be real numbers ({e})") from None
    if len(vals) != len(ts):
        raise ValueError(f"{who}: {len(vals)} inputs but {len(ts)} tangents")
    return len(vals), ids_of(vals), ts     # (the ids last: _real may run Python)


def jvp(output: Value, inputs: Iterable[Value], tangents: Iterable[SupportsFloat]) -> float:
    """d output along `tangents` (one per input): sum_i d output/d input_i * tangents[i].

    An input the output does not depend on contributes 0; repeated inputs add.

    >>> from tapead import Value
    >>> x, y = Value(2.0), Value(5.0)
    >>> jvp(x * y + x, [x, y], [1.0, 0.0])
    6.0
    """
    if not isinstance(output, Value):
        raise TypeError(f"jvp: output must be a Value, not {type(output).__name__}")
    n, ids, ts = seeds(inputs, tangents)
    return _ch.jvp(output._i, n, ids, ts)
