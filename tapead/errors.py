"""tapead's exceptions: every one is a TapeadError.

They are public here (tracebacks name `tapead.errors.TapeError`) and
re-exported from `tapead`.  Which C status raises which is in
tapead._c.status (error()).
"""
from __future__ import annotations

__all__ = ["TapeadError", "TapeError", "GuardError", "AnomalyError"]


class TapeadError(Exception):
    """Base class of tapead's own exceptions.

    For example, differentiating a Value computed under no_grad():

    >>> import tapead
    >>> with tapead.no_grad():
    ...     y = tapead.Value(2.0) * 3
    >>> y.backward()
    Traceback (most recent call last):
      ...
    tapead.errors.TapeadError: this Value was computed under tapead.no_grad(): it has no graph to differentiate or replay
    """


class TapeError(TapeadError, RuntimeError):
    """A Value used where its node does not exist: another thread's tape, or a forged handle.

    >>> import threading, tapead
    >>> box = []
    >>> t = threading.Thread(target=lambda: box.append(tapead.Value(1.0)))
    >>> t.start(); t.join()
    >>> box[0].data
    Traceback (most recent call last):
      ...
    tapead.errors.TapeError: this Value was recorded by another thread: each thread records on its own tape, so use Values only in the thread that made them (also after it has ended; to hand values across threads, pass .data)
    """


class GuardError(TapeadError):
    """A recorded comparison comes out differently at the new point, or was lost with the Values it compared.

    >>> import tapead
    >>> x = tapead.Value(1.0)
    >>> y = x * 2 if x > 0 else -x
    >>> x.data = -1.0; y.recompute()
    Traceback (most recent call last):
      ...
    tapead.errors.GuardError: guard flipped: the recorded comparison x > y was True, but at the new point x = -1.0, y = 0.0 makes it False; the recorded graph does not hold there (record again)
    >>> tapead.clear_guards()
    """


class AnomalyError(TapeadError, FloatingPointError):
    """Raised inside detect_anomaly() by the first op or adjoint that goes non-finite.

    >>> import tapead
    >>> with tapead.detect_anomaly():
    ...     tapead.Value(1e200) * tapead.Value(1e200)
    Traceback (most recent call last):
      ...
    tapead.errors.AnomalyError: detect_anomaly: op '*' with inputs (1e+200, 1e+200) produced a non-finite value
    """
