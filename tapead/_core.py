"""The one module that touches the compiled library.

It owns the FFI boundary: the C functions bound once as module globals (the
per-op hot path reads them directly), the mapping from C status codes to
Python exceptions, and the segment tokens through which the cffi front holds
the segments its Values live in (csrc/tapead.h: holds).
"""
from __future__ import annotations

import gc
try:                                   # threading.local itself, without importing threading
    from _thread import _local as _local
except ImportError:  # pragma: no cover
    from threading import local as _local

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, SupportsInt, Tuple

from ._tapead_c import ffi as ffi, lib as lib  # re-exported (the "as" tells type checkers)
from .errors import AnomalyError as AnomalyError, GuardError as GuardError  # re-exported
from .errors import TapeadError as TapeadError, TapeError as TapeError
from ._opsurface import FORMS, IDENTS, POW_LIKE


_CMP = ("<", "<=", ">", ">=")


def guard_error(kind: int, outcome: int, xv: float, yv: float, where: str = "") -> GuardError:
    """The GuardError for a recorded comparison `x kind y` that no longer comes out `outcome`."""
    return GuardError(f"guard flipped{where}: the recorded comparison x {_CMP[kind]} y was "
                      f"{bool(outcome)}, but at the new point x = {xv!r}, y = {yv!r} makes it "
                      f"{not outcome}; the recorded graph does not hold there (record again)")


# ---------------------------------------------------------------- op table
OP_NAMES = tuple(ffi.string(lib.ta_op_name(i)).decode() for i in range(lib.ta_nops()))
OP_KINDS = tuple(lib.ta_op_kind(i) for i in range(lib.ta_nops()))


# Python's Op codes come from the C table, the single source (csrc/ops.def);
# the op surface generated from the same table must agree with it.
OP = {ffi.string(lib.ta_op_ident(i)).decode(): i for i in range(lib.ta_nops())}
if tuple(OP) != IDENTS:  # pragma: no cover (a build from a table edited since the generation)
    raise ImportError("tapead/_opsurface.py does not match the compiled op table (csrc/ops.def): "
                      "run `python build_ext.py`, which regenerates it")

# ------------------------------------------------------- hot-path bindings
leaf = lib.ta_leaf
op1 = lib.ta_op1
op2 = lib.ta_op2
opc = lib.ta_opc
val = lib.ta_val
adj = lib.ta_adj
set_val = lib.ta_set_val
set_adj = lib.ta_set_adj
SHIFT = lib.TA_SHIFT

# -------------------------------------------------------------- errors
_ZERO_POW = "0.0 cannot be raised to a negative power"


def _op_error(code: int) -> Exception:
    opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
    lib.ta_last_error(opn, x, y)
    return op_error(code, opn[0], x[0], y[0])


def op_error(code: int, op: int, x: float, y: float) -> Exception:
    """The exception for op error `code` of op `op` at inputs x, y (y: its constant, if any)."""
    pow_like = op in POW_LIKE
    at = FORMS[op].format(x=repr(x), y=repr(y), c=repr(y))   # as the op shows: log(-1.0), 2.0 ** 0.5
    if code == lib.TA_EZERODIV:
        return ZeroDivisionError(_ZERO_POW if pow_like else "float division by zero")
    if code == lib.TA_EDOMAIN:
        if pow_like:
            base, power = at.split(" ** ")
            return ValueError(f"math domain error: negative number {base} cannot be raised "
                              f"to the fractional power {power}")
        return ValueError(f"math domain error: {at}")
    return OverflowError(f"math range error: {at} overflows")


def _inputs(op: int, x: float, y: float) -> str:
    """An op's inputs as an error message shows them: one, two, or one and its constant."""
    kind = OP_KINDS[op]
    if kind == 1:
        return f"input {x!r}"
    if kind == 3:
        return f"input {x!r} and constant {y!r}"
    return f"inputs ({x!r}, {y!r})"


def _status_table() -> Dict[int, Tuple[Any, str]]:
    """status -> (exception class, message), from C's status table
    (csrc/status.def); an empty message is formatted by error()."""
    classes = {"TapeadError": TapeadError, "TapeError": TapeError, "AnomalyError": AnomalyError,
               "GuardError": GuardError, "MemoryError": MemoryError, "ValueError": ValueError,
               "ZeroDivisionError": ZeroDivisionError, "OverflowError": OverflowError, "None": None}
    code, name, exc, msg = (ffi.new("int *"), ffi.new("const char **"), ffi.new("const char **"),
                            ffi.new("const char **"))
    table = {}
    k = 0
    while lib.ta_status_row(k, code, name, exc, msg) == lib.TA_OK:
        table[code[0]] = (classes[ffi.string(exc[0]).decode()], ffi.string(msg[0]).decode())
        k += 1
    return table


_STATUS = _status_table()


def error(code: int, sweep: str = "") -> Exception:
    """The exception for a negative C status code; sweep="backward" for one
    from a reverse sweep (an anomaly there is a gradient, not a value)."""
    cls, msg = _STATUS.get(code, (TapeError, ""))
    if msg:
        return cls(msg)  # type: ignore[no-any-return]
    if code in (lib.TA_EZERODIV, lib.TA_EDOMAIN, lib.TA_ERANGE):
        return _op_error(code)
    if code == lib.TA_ELIMIT:
        st = stats()
        return MemoryError(f"tapead: the tape node limit ({st['limit']}) is reached "
                           f"({st['nodes']} nodes held); see tapead.set_limit")
    if code == lib.TA_EANOMALY:
        opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
        lib.ta_last_error(opn, x, y)
        at = f"op {OP_NAMES[opn[0]]!r} with {_inputs(opn[0], x[0], y[0])}"
        if sweep:
            return AnomalyError(f"detect_anomaly: in {sweep}(), the gradient through {at} "
                                f"became nan (its local derivative times the gradient "
                                f"arriving there: 0 * inf, or inf - inf)")
        return AnomalyError(f"detect_anomaly: {at} produced a non-finite value")
    if code == lib.TA_EGUARD:
        out = [ffi.new(t) for t in ("int *", "int64_t *", "int64_t *", "double *",
                                    "int *", "double *", "double *")]
        lib.ta_guard_info(lib.ta_guard_failed(), *out)
        return guard_error(out[0][0], out[4][0], out[5][0], out[6][0])
    if code in (lib.TA_ECUSTOM, lib.TA_EPYTHON, lib.TA_EBUSY):
        from .custom import refusal
        return refusal(code)
    return TapeError(f"tapead: unexpected status {code}")


def check(status: int) -> None:
    if status:
        raise error(status)


# ------------------------------------------------------ holds (segment tokens)
_tl = _local()
NEEDSEG, NEEDNG = lib.TA_NEEDSEG, lib.TA_NEEDNG


class _Token:
    """A hold on one tape segment (csrc/tapead.h: holds), shared by every
    cffi-front Value whose node lives there; `key` is the segment's key
    (node id >> SHIFT), `box` the box the hold sits in (csrc/cdef.h).

    The box is owned through ffi.gc before C puts the hold in it, and C
    drops the hold when the box dies (ffi.gc calls ta_unhold directly): no
    Python code runs between taking a hold and owning it, or when it is
    dropped, so a Ctrl-C can neither leak one nor land halfway; and a box
    may die in any thread (C frees an exited thread's tape when its last
    hold goes)."""
    __slots__ = ("key", "box")
    key: int
    box: Any

    def __init__(self, key: int, box: Any) -> None:
        self.key = key
        self.box = box


_SEG_BYTES = lib.ta_seg_bytes()
NOTOKEN = _Token(-2, ffi.NULL)  # holds nothing; its key matches no segment


def _box() -> Any:
    """An empty box for one hold, owned by the returned object."""
    # size tells a tracing GC (PyPy's) what the hold in it keeps alive
    return ffi.gc(ffi.new("ta_seg *[1]"), lib.ta_unhold, size=_SEG_BYTES)


def hold_current(code: int) -> _Token:
    """A token holding the segment the next node goes to (code: NEEDSEG for
    the tape, NEEDNG for the no_grad arena); raises for any other status."""
    if code != NEEDSEG and code != NEEDNG:
        raise error(code)
    box, key = _box(), ffi.new("int64_t *")
    check(lib.ta_cur_hold(code == NEEDNG, box, key))
    return _Token(key[0], box)


def held_list(cap: int) -> Any:
    """An empty held list (csrc/cdef.h) for up to cap node ids: what a bulk
    call fills, each id held once; the holds still in it when it dies are
    dropped by C."""
    h = ffi.new("int64_t[]", 1 + 2 * cap)
    h[0] = cap
    return ffi.gc(h, lib.ta_held_drop)


def held_ids(h: Any, n: int) -> List[int]:
    """The first n ids of the held list h."""
    return ffi.unpack(ffi.cast("int64_t *", h) + 1, n)  # type: ignore[return-value]  # (ffi.gc's array has no length)


def held_bytes(h: Any) -> Any:
    """The whole held list h as a writable buffer (the native front's adopt)."""
    p = ffi.cast("int64_t *", h)
    return ffi.buffer(p, 8 * (1 + 2 * p[0]))


def adopt(h: Any, n: int) -> Tuple[List[int], List[_Token]]:
    """(ids, tokens) for the first n ids of the held list h: the first id of
    each segment moves its hold into a new token (one C call), and the other
    holds on that segment are dropped.  tokens[k] is the token of ids[k]."""
    ids = held_ids(h, n)
    toks: Dict[int, _Token] = {}
    out: List[_Token] = []
    for k, i in enumerate(ids):
        key = i >> SHIFT
        t = toks.get(key)
        if t is None:
            box = _box()
            check(lib.ta_held_move(h, k, box))
            t = toks[key] = _Token(key, box)
        out.append(t)
    lib.ta_held_drop(h)
    return ids, out


def reclaim() -> None:
    """Let the interpreter's garbage collector drop the holds of Values that
    are garbage, so the tape's next collection frees their segments.  Under
    CPython's reference counting they are dropped at once (this only finds
    cycles); on PyPy, only when its collector runs."""
    gc.collect()


def within_limit(fn: Callable[..., int], *args: Any) -> int:
    """fn(*args), a C call that records nodes; if the node limit refuses it
    (TA_ELIMIT: such a call changes nothing), once more after reclaim(), so
    garbage never counts against the limit, whatever the interpreter."""
    st = fn(*args)
    if st == lib.TA_ELIMIT:
        reclaim()
        st = fn(*args)
    return st


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
    n = lib.ta_collect()
    if n < 0:
        raise error(n)
    return n


def set_limit(max_nodes: Optional[SupportsInt]) -> None:
    """Cap this thread's tape at max_nodes nodes (None or 0: no cap).

    Garbage does not count: the tape reclaims before it refuses (the cffi
    front runs the garbage collector first: on PyPy, dead Values let go of
    the tape only then).

    >>> import tapead
    >>> tapead.set_limit(1_000_000); tapead.tape_stats()["limit"]
    1000000
    >>> tapead.set_limit(None); tapead.tape_stats()["limit"]
    0
    """
    if max_nodes is None:
        n = 0
    else:
        try:
            import operator    # here, not at import: `import tapead` stays cheap
            n = operator.index(max_nodes)  # type: ignore[arg-type]  # (checked right here)
        except TypeError:
            if not (isinstance(max_nodes, float) and max_nodes.is_integer()):   # 1e6 is fine
                raise TypeError(f"set_limit needs a whole number of nodes (or None), "
                                f"not {max_nodes!r}") from None
            n = int(max_nodes)
    if not 0 <= n < 1 << 64:
        raise ValueError(f"the node limit must be in 0 .. 2**64 - 1 (0: no cap), not {n}")
    check(lib.ta_set_limit(n))
