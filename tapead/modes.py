"""Thread-local recording modes: no_grad() and detect_anomaly().

Both are context managers and decorators, and nest.  They are per thread,
as the tapes are.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal, TypeVar

import functools

from . import _core

if TYPE_CHECKING:
    from typing_extensions import ParamSpec
    _P = ParamSpec("_P")
_R = TypeVar("_R")
_M = TypeVar("_M", bound="_Mode")


class _Mode:
    """Base of a context manager / decorator that bumps a C per-thread counter."""
    _toggle: Callable[[int], int] = None  # type: ignore[assignment]  # lib function taking +1 / -1

    def __enter__(self: _M) -> _M:
        st = self._toggle(1)
        if st < 0:
            raise _core.error(st)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._toggle(-1)
        return False

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_Mode):
    """Compute without recording, like torch.no_grad().

    Results are Values with no graph: they live in a small leaf-only arena
    beside the tape, so the tape itself does not grow.  Used later in
    recorded code they enter as constants.

    >>> import tapead
    >>> w = tapead.Value(3.0)
    >>> with tapead.no_grad():
    ...     y = w * w
    >>> y.data
    9.0
    """
    _toggle = staticmethod(_core.lib.ta_nograd)


class detect_anomaly(_Mode):
    """Raise AnomalyError at the first op whose result is nan or inf, and at the
    first nan adjoint in backward(), naming the op and its inputs.

    >>> import tapead
    >>> (tapead.Value(1e308) * 10).data
    inf
    >>> with tapead.detect_anomaly():
    ...     tapead.Value(1e308) * 10
    Traceback (most recent call last):
      ...
    tapead._core.AnomalyError: detect_anomaly: op '*c' with inputs (1e+308, 10.0) produced a non-finite value
    """
    _toggle = staticmethod(_core.lib.ta_anomaly)
