"""Thread-local recording modes: no_grad() and detect_anomaly().

Both are context managers and decorators, and nest.  They are per thread,
as the tapes are.

Each block holds a C token (ta_mode_tok) that C arms when the block is
entered; the mode is on while an armed token lives, and freeing a token
disarms it (it is an ffi.gc object whose destructor is C's ta_mode_leave).

A `with` statement leaves the mode without running Python code: it looks
__exit__ up before it calls __enter__ (the language reference fixes that
order), so the lookup makes the token this block will arm and hands the
statement that token's own __exit__ (cffi's release, in C, which runs the
destructor).  So a KeyboardInterrupt -- which Python delivers only between
bytecodes or as a call returns -- has no Python frame to land in between
the block's end and the disarming, on any interpreter: if it aborts
__enter__ after the arming, __enter__ disarms.  __enter__ and __exit__
called by hand (contextlib.ExitStack, or directly) keep their tokens in a
list; there an interrupted __exit__ leaves the token to be disarmed when
the manager is freed (at once under CPython's reference counting, at the
next collection on PyPy).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Literal, Optional, TypeVar

import functools

from ._c import modes as _cm

if TYPE_CHECKING:
    from typing_extensions import ParamSpec
    _P = ParamSpec("_P")
_R = TypeVar("_R")
_M = TypeVar("_M", bound="_Mode")


class _ExitSlot:
    """_Mode.__exit__: for a `with` statement (looked up on an instance before
    __enter__ runs), the C-level __exit__ of the token __enter__ will arm;
    looked up after a hand-called __enter__, or on the class (ExitStack),
    the Python method that leaves the innermost hand-entered block."""

    def __get__(self, mgr: Optional[_Mode], cls: Any = None) -> Callable[..., Any]:
        if mgr is None:
            return _Mode._leave
        if mgr._held:          # a block entered by hand is open: this is its __exit__
            return mgr._leave
        tok = _token()
        mgr._next = tok
        release: Callable[..., Any] = tok.__exit__   # ffi.release: runs ta_mode_leave, no Python frame
        return release


def _token() -> Any:
    return _cm.mode_token()   # unarmed until C arms it


class _Mode:
    """Base of a context manager / decorator that holds a C per-thread mode."""
    _mode = 0          # ta_mode_enter's mode: 1 no_grad, 2 detect_anomaly

    def __init__(self) -> None:
        self._next: Any = None       # the token a `with` statement's __exit__ releases
        self._held: List[Any] = []   # tokens of blocks entered by hand, innermost last

    def __enter__(self: _M) -> _M:
        tok, self._next = self._next, None
        by_hand = tok is None
        if by_hand:
            tok = _token()
        try:
            _cm.mode_enter(tok, self._mode)
            if by_hand:
                self._held.append(tok)
            return self            # nothing that can be interrupted after the arming but this
        except BaseException:      # refused, or KeyboardInterrupt as a call returned: undo, in C
            _cm.mode_leave(tok)
            if self._held and self._held[-1] is tok:
                self._held.pop()
            raise

    __exit__ = _ExitSlot()

    def _leave(self, *exc: object) -> Literal[False]:
        """__exit__ of a block entered by hand: disarm (in C) before anything can be interrupted."""
        if self._held:
            _cm.mode_leave(self._held[-1])
            self._held.pop()
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
    tapead.errors.AnomalyError: detect_anomaly: op '*c' with input 1e+308 and constant 10.0 produced a non-finite value
    """
    _mode = 2
