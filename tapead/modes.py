"""Thread-local recording modes: no_grad() and detect_anomaly().

Both are context managers and decorators, and nest.  They are per thread,
as the tapes are.

Each block holds a C token (ta_mode_tok) that C arms when the block is
entered; the mode is on while an armed token lives, and freeing a token
disarms it (it is an ffi.gc object whose destructor is C's ta_mode_leave).
So a KeyboardInterrupt delivered right after a C call -- which is where
Python handles pending signals -- cannot leave the thread in the mode for
good: if it aborts __enter__ after the arming, __enter__ disarms; if it
aborts __exit__ before the disarming, the token is freed with the manager
(at once for `with tapead.no_grad():`; a manager you keep in a variable
holds the mode until it is freed or its next block exits).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Literal, TypeVar

import functools

from . import _core

if TYPE_CHECKING:
    from typing_extensions import ParamSpec
    _P = ParamSpec("_P")
_R = TypeVar("_R")
_M = TypeVar("_M", bound="_Mode")
_ffi, _lib = _core.ffi, _core.lib


class _Mode:
    """Base of a context manager / decorator that holds a C per-thread mode."""
    _mode = 0          # ta_mode_enter's mode: 1 no_grad, 2 detect_anomaly

    def __init__(self) -> None:
        self._held: List[Any] = []   # tokens of this manager's open blocks (it may nest in itself)

    def __enter__(self: _M) -> _M:
        tok = _ffi.gc(_ffi.new("ta_mode_tok *"), _lib.ta_mode_leave)   # unarmed until C arms it
        try:
            st = _lib.ta_mode_enter(tok, self._mode)
            if st >= 0:
                self._held.append(tok)
                return self        # nothing that can be interrupted after the arming but this
        except BaseException:      # KeyboardInterrupt as a call returned: undo, in C
            _ffi.release(tok)
            if self._held and self._held[-1] is tok:
                self._held.pop()
            raise
        raise _core.error(st)

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._held:
            _ffi.release(self._held.pop())   # interrupted before this: freed with the manager
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
    _mode = 1


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
    tapead._core.AnomalyError: detect_anomaly: op '*c' with input 1e+308 and constant 10.0 produced a non-finite value
    """
    _mode = 2
