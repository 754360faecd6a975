"""The one module that touches the compiled library.

It owns the FFI boundary: the C functions bound once as module globals (the
per-op hot path reads them directly), the mapping from C status codes to
Python exceptions, and the per-thread tape owners and per-segment tokens
that tell C which segments Python can still reach (see csrc/tape.c).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, SupportsInt, Tuple

from ._tapead_c import ffi as ffi, lib as lib  # re-exported (the "as" tells type checkers)


class TapeadError(Exception):
    """Base class of tapead's own exceptions.

    For example, differentiating a Value computed under no_grad():

    >>> import tapead
    >>> with tapead.no_grad():
    ...     y = tapead.Value(2.0) * 3
    >>> y.backward()
    Traceback (most recent call last):
      ...
    tapead._core.TapeadError: this Value was computed under tapead.no_grad(): it has no graph to differentiate or replay
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
    tapead._core.TapeError: this Value was recorded by another thread: each thread records on its own tape, so use Values only in the thread that made them
    """


class GuardError(TapeadError):
    """A comparison made while recording comes out differently at the new point.

    >>> import tapead
    >>> x = tapead.Value(1.0)
    >>> y = x * 2 if x > 0 else -x
    >>> x.data = -1.0; y.recompute()
    Traceback (most recent call last):
      ...
    tapead._core.GuardError: guard flipped: the recorded comparison x > y was True, but at the new point x = -1.0, y = 0.0 makes it False; the recorded graph does not hold there (record again)
    >>> tapead.clear_guards()
    """


_CMP = ("<", "<=", ">", ">=")


def guard_error(kind: int, outcome: int, xv: float, yv: float, where: str = "") -> GuardError:
    """The GuardError for a recorded comparison `x kind y` that no longer comes out `outcome`."""
    return GuardError(f"guard flipped{where}: the recorded comparison x {_CMP[kind]} y was "
                      f"{bool(outcome)}, but at the new point x = {xv!r}, y = {yv!r} makes it "
                      f"{not outcome}; the recorded graph does not hold there (record again)")


class AnomalyError(TapeadError, FloatingPointError):
    """Raised inside detect_anomaly() by the first op or adjoint that goes non-finite.

    >>> import tapead
    >>> with tapead.detect_anomaly():
    ...     tapead.Value(1e200) * tapead.Value(1e200)
    Traceback (most recent call last):
      ...
    tapead._core.AnomalyError: detect_anomaly: op '*' with inputs (1e+200, 1e+200) produced a non-finite value
    """


# ---------------------------------------------------------------- op table
OP_NAMES = tuple(ffi.string(lib.ta_op_name(i)).decode() for i in range(lib.ta_nops()))
OP_KINDS = tuple(lib.ta_op_kind(i) for i in range(lib.ta_nops()))


# Python's Op codes come from the C table, the single source (csrc/ops.def).
OP = {ffi.string(lib.ta_op_ident(i)).decode(): i for i in range(lib.ta_nops())}

# ------------------------------------------------------- hot-path bindings
leaf = lib.ta_leaf
op1 = lib.ta_op1
op2 = lib.ta_op2
opc = lib.ta_opc
val = lib.ta_val
adj = lib.ta_adj
set_val = lib.ta_set_val
set_adj = lib.ta_set_adj
NEWSEG = lib.TA_NEWSEG
SHIFT = lib.TA_SHIFT

# -------------------------------------------------------------- errors
_ZERO_POW = "0.0 cannot be raised to a negative power"


def _op_error(code: int) -> Exception:
    opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
    lib.ta_last_error(opn, x, y)
    return op_error(code, opn[0], x[0], y[0])


def op_error(code: int, op: int, x: float, y: float) -> Exception:
    """The exception for op error `code` of op `op` at inputs x, y (y: its constant, if any)."""
    name = OP_NAMES[op]
    pow_like = name in ("**", "**c", "c**")
    if name == "c**":
        x, y = y, x  # the constant is the base
    if code == lib.TA_EZERODIV:
        return ZeroDivisionError(_ZERO_POW if pow_like else "float division by zero")
    if code == lib.TA_EDOMAIN:
        if pow_like:
            return ValueError(f"math domain error: negative number {x!r} cannot be raised "
                              f"to the fractional power {y!r}")
        return ValueError(f"math domain error: {name}({x!r})")
    if pow_like:
        return OverflowError(f"math range error: {x!r} ** {y!r} overflows")
    return OverflowError(f"math range error: {name}({x!r}) overflows")


def error(code: int) -> Exception:
    """The exception for a negative C status code."""
    if code in (lib.TA_EZERODIV, lib.TA_EDOMAIN, lib.TA_ERANGE):
        return _op_error(code)
    if code == lib.TA_ENOMEM:
        return MemoryError("tapead: could not allocate tape memory")
    if code == lib.TA_ELIMIT:
        st = stats()
        return MemoryError(f"tapead: the tape node limit ({st['limit']}) is reached "
                           f"({st['nodes']} nodes held); see tapead.set_limit")
    if code == lib.TA_ETHREAD:
        return TapeError("this Value was recorded by another thread: each thread records on "
                         "its own tape, so use Values only in the thread that made them")
    if code == lib.TA_EBADID:
        return TapeError("this Value names no node on the tape (a handle not made by tapead?)")
    if code == lib.TA_ENOGRAD:
        return TapeadError("this Value was computed under tapead.no_grad(): it has no graph "
                           "to differentiate or replay")
    if code == lib.TA_EANOMALY:
        opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
        lib.ta_last_error(opn, x, y)
        return AnomalyError(f"detect_anomaly: op {OP_NAMES[opn[0]]!r} with inputs "
                            f"({x[0]!r}, {y[0]!r}) produced a non-finite value")
    if code == lib.TA_EGUARD:
        out = [ffi.new(t) for t in ("int *", "int64_t *", "int64_t *", "double *",
                                    "int *", "double *", "double *")]
        lib.ta_guard_info(lib.ta_guard_failed(), *out)
        return guard_error(out[0][0], out[4][0], out[5][0], out[6][0])
    if code == lib.TA_EARG:
        return ValueError("tapead: bad argument (not a leaf, a duplicate input, ...)")
    if code == lib.TA_ECORRUPT:
        return TapeError("tape invariant broken (please report this as a bug)")
    if code == lib.TA_EBADOP:
        return TapeError("internal error: op code unknown or of the wrong kind")
    return TapeError(f"tapead: unexpected status {code}")


def check(status: int) -> None:
    if status:
        raise error(status)


# ------------------------------------------------- tapes and segment tokens
_tl = threading.local()
_ack = lib.ta_ack
_release = lib.ta_release


class _Tape:
    """Owns one thread's C tape; freed when the thread and every token of it are gone."""
    __slots__ = ("ptr", "pending")
    ptr: Any
    pending: List[Tuple[int, int]]

    def __init__(self) -> None:
        self.ptr = lib.ta_tape_current()
        if self.ptr == ffi.NULL:
            raise MemoryError("tapead: could not allocate a tape")
        self.pending = []   # segments released from other threads

    def __del__(self) -> None:
        try:
            lib.ta_tape_free(self.ptr)
        except Exception:  # interpreter shutdown
            pass


class _Token:
    """One per tape segment, shared by every Value whose node lives there.

    Its single __del__ (when the last such Value dies) tells C the segment
    has no Python handle left, which is what lets the collector reclaim it.
    """
    __slots__ = ("tape", "key", "current")
    tape: _Tape
    key: int
    current: int

    def __del__(self) -> None:
        try:
            if self.current < 0:
                return
            if getattr(_tl, "tape", None) is self.tape:
                _release(self.key, self.current)
            else:  # dying in another thread: the owner thread releases it
                self.tape.pending.append((self.key, self.current))
        except Exception:  # interpreter shutdown
            pass


def new_token(key: int, current: int = 1) -> Tuple[_Token, bool]:
    """Make this thread's token for the tape segment `key` (node id >> SHIFT) and tell C.

    current=1: the token for the segment being appended to (shared by the
    Values the fast path makes next); current=0: an extra token for a node
    C created elsewhere (results of a sweep that records).

    Returns (token, fast): fast is True when this thread owns the fast path
    (its current token may live in engine's module global).  Segments of the
    no_grad arena get their own cached token (_tl.ngtok)."""
    try:
        tape = _tl.tape
    except AttributeError:
        tape = _tl.tape = _Tape()
        _tl.exit_guard = _ThreadExit(tape)
    pending = tape.pending
    while pending:
        _release(*pending.pop())
    tok = _Token()
    tok.tape = tape
    tok.key = key
    tok.current = current
    fast = _ack(key, current)
    if fast < 0:
        tok.current = -1  # never acknowledged: nothing to release
        raise error(fast)
    if fast == 2:
        _tl.ngtok = tok
    elif current:
        _tl.tok = tok
    return tok, fast == 1


on_thread_exit: List[Callable[[_Tape], object]] = []  # callables(tape) run when a recording thread ends


class _ThreadExit:
    """Lives in the thread's threading.local: its __del__ runs when the thread ends."""
    __slots__ = ("tape",)

    def __init__(self, tape: _Tape) -> None:
        self.tape = tape

    def __del__(self) -> None:
        for f in on_thread_exit:
            try:
                f(self.tape)
            except Exception:
                pass


def stats() -> Dict[str, int]:
    """Counters of this thread's tape (tapead.tape_stats).

    >>> import tapead
    >>> st = tapead.tape_stats()
    >>> sorted(st)
    ['bytes', 'capacity', 'collections', 'limit', 'nodes', 'peak_nodes', 'segments']
    >>> st["nodes"] <= st["capacity"]
    True
    """
    st = ffi.new("ta_stats_t *")
    check(lib.ta_stats(st))
    return {k: getattr(st, k) for k in
            ("nodes", "capacity", "bytes", "segments", "collections", "limit", "peak_nodes")}


def collect() -> int:
    """Reclaim every segment no Value can reach now; returns segments freed."""
    tape = getattr(_tl, "tape", None)
    if tape is not None:
        while tape.pending:
            _release(*tape.pending.pop())
    n = lib.ta_collect()
    if n < 0:
        raise error(n)
    return n


def set_limit(max_nodes: Optional[SupportsInt]) -> None:
    """Cap this thread's tape at max_nodes nodes (None or 0: no cap).

    >>> import tapead
    >>> tapead.set_limit(1_000_000); tapead.tape_stats()["limit"]
    1000000
    >>> tapead.set_limit(None); tapead.tape_stats()["limit"]
    0
    """
    n = 0 if max_nodes is None else int(max_nodes)
    if n < 0:
        raise ValueError("the node limit must be >= 0")
    check(lib.ta_set_limit(n))
