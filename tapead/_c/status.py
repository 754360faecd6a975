"""C's status codes as Python exceptions, in one place.

Every fallible C call returns a status; error() turns a negative one into
the exception it stands for, with its message, from C's status table
(csrc/api/status.def) and, for the statuses whose message names the failing op
or guard, from what C recorded about the failure.  The classes are
tapead.errors'.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

from . import KIND_CST, KIND_NARY, KIND_UN, OP_KINDS, OP_NAMES, ffi, lib
from ..errors import AnomalyError, GuardError, TapeadError, TapeError
from .._opsurface import FORMS, POW_LIKE


_CMP = ("<", "<=", ">", ">=")


def guard_error(kind: int, outcome: int, xv: float, yv: float, where: str = "") -> GuardError:
    """The GuardError for a recorded comparison `x kind y` that no longer comes out `outcome`."""
    return GuardError(f"guard flipped{where}: the recorded comparison x {_CMP[kind]} y was "
                      f"{bool(outcome)}, but at the new point x = {xv!r}, y = {yv!r} makes it "
                      f"{not outcome}; the recorded graph does not hold there (record again)")


def lost_error(n: int) -> GuardError:
    """The GuardError for a replay that comparisons lost with their freed Values (n of them
    since clear_guards()) may bind (csrc/replay/guard.c: the reach)."""
    one = n == 1
    return GuardError(
        f"guards lost: {n} comparison{'' if one else 's'} recorded on this thread since the last "
        f"tapead.clear_guards() {'was' if one else 'were'} forgotten because the Values "
        f"{'it' if one else 'they'} compared were freed, so tapead can neither check "
        f"{'it' if one else 'them'} at the new point nor tell whether "
        f"{'it' if one else 'one of them'} chose or steered these outputs. Call "
        f"tapead.clear_guards() before recording the graph you compile (or recompute), or "
        f"keep the compared Values alive until compile() (or recompute())")


_ZERO_POW = "0.0 cannot be raised to a negative power"


def _op_error(st: int) -> Exception:
    opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
    lib.ta_last_error(opn, x, y)
    return op_error(st, opn[0], x[0], y[0])


def op_error(st: int, op: int, x: float, y: float) -> Exception:
    """The exception for op error `st` of op `op` at inputs x, y (y: its constant, if any)."""
    if st == lib.TA_EINDEX:
        return index_error(x, int(y))
    pow_like = op in POW_LIKE
    at = FORMS[op].format(x=repr(x), y=repr(y), c=repr(y))   # as the op shows: log(-1.0), 2.0 ** 0.5
    if st == lib.TA_EZERODIV:
        return ZeroDivisionError(_ZERO_POW if pow_like else "float division by zero")
    if st == lib.TA_EDOMAIN:
        if pow_like:
            base, power = at.split(" ** ")
            return ValueError(f"math domain error: negative number {base} cannot be raised "
                              f"to the fractional power {power}")
        return ValueError(f"math domain error: {at}")
    return OverflowError(f"math range error: {at} overflows")


def index_error(x: float, m: int) -> IndexError:
    """tapead.take's bad index: x, the index's value, among m items."""
    if x != x or x in (float("inf"), float("-inf")) or x != int(x):
        return IndexError(f"tapead.take: the index is {x!r}, not a whole number (it picks one of "
                          f"{m} items)")
    return IndexError(f"tapead.take: index {int(x)} is out of range for {m} items")


def _inputs(op: int, x: float, y: float) -> str:
    """An op's inputs as an error message shows them: one, two, or one and its constant."""
    kind = OP_KINDS[op]
    if kind == KIND_UN:
        return f"input {x!r}"
    if kind == KIND_CST:
        return f"input {x!r} and constant {y!r}"
    return f"inputs ({x!r}, {y!r})"


def _status_table() -> Dict[int, Tuple[Any, str]]:
    """status -> (exception class, message), from C's status table
    (csrc/api/status.def); an empty message is formatted by error()."""
    classes = {"TapeadError": TapeadError, "TapeError": TapeError, "AnomalyError": AnomalyError,
               "GuardError": GuardError, "MemoryError": MemoryError,
               "ValueError": ValueError, "IndexError": IndexError,
               "ZeroDivisionError": ZeroDivisionError, "OverflowError": OverflowError, "None": None}
    st, name, exc, msg = (ffi.new("int *"), ffi.new("const char **"), ffi.new("const char **"),
                          ffi.new("const char **"))
    table = {}
    k = 0
    while lib.ta_status_row(k, st, name, exc, msg) == lib.TA_OK:
        table[st[0]] = (classes[ffi.string(exc[0]).decode()], ffi.string(msg[0]).decode())
        k += 1
    return table


_STATUS = _status_table()


def error(st: int, sweep: str = "") -> Exception:
    """The exception for a negative C status st; sweep="backward" for one
    from a reverse sweep (an anomaly there is a gradient, not a value)."""
    cls, msg = _STATUS.get(st, (TapeError, ""))
    if msg:
        return cls(msg)  # type: ignore[no-any-return]
    if st in (lib.TA_EZERODIV, lib.TA_EDOMAIN, lib.TA_ERANGE, lib.TA_EINDEX):
        return _op_error(st)
    if st == lib.TA_ELIMIT:
        now = _stats()
        return MemoryError(f"tapead: the tape node limit ({now['limit']}) is reached "
                           f"({now['nodes']} nodes held); see tapead.set_limit")
    if st == lib.TA_EANOMALY:
        opn, x, y = ffi.new("int *"), ffi.new("double *"), ffi.new("double *")
        lib.ta_last_error(opn, x, y)
        if OP_KINDS[opn[0]] == KIND_NARY:      # a custom node: its name is tapead.custom's
            return _refusal("anomaly")
        at = f"op {OP_NAMES[opn[0]]!r} with {_inputs(opn[0], x[0], y[0])}"
        if sweep:
            return AnomalyError(f"detect_anomaly: in {sweep}(), the gradient through {at} "
                                f"became nan (its local derivative times the gradient "
                                f"arriving there: 0 * inf, or inf - inf)")
        return AnomalyError(f"detect_anomaly: {at} produced a non-finite value")
    if st == lib.TA_EGUARD:
        kind, outcome, xv, yv = out = [ffi.new(t) for t in ("int *", "int *", "double *", "double *")]
        lib.ta_guard_info(lib.ta_guard_failed(), *out)
        return guard_error(kind[0], outcome[0], xv[0], yv[0])
    if st == lib.TA_ELOST:
        return lost_error(lib.ta_guard_lost())
    if st in (lib.TA_ECUSTOM, lib.TA_EPYTHON, lib.TA_EBUSY):
        return _refusal("python" if st == lib.TA_EPYTHON else
                        "busy" if st == lib.TA_EBUSY else "custom")
    return TapeError(f"tapead: unexpected status {st}")


def _no_refusal_yet(why: str) -> Exception:   # until tapead.custom registers its own
    return TapeError(f"tapead: a custom node refused ({why})")


_refusal: Callable[[str], Exception] = _no_refusal_yet


def on_refusal(fn: Callable[[str], Exception]) -> None:
    """Make fn(why) the exception for a custom node's refusals (TA_ECUSTOM,
    TA_EPYTHON, TA_EBUSY): tapead.custom's, registered when it loads (it
    sits above this module, which imports no feature module)."""
    global _refusal
    _refusal = fn


def check(status: int) -> None:
    if status:
        raise error(status)



def _no_stats_yet() -> Dict[str, int]:   # until tapead._c.holds registers its stats
    raise TapeError("tapead: the tape's counters are not loaded (tapead._c.holds)")


_stats: Callable[[], Dict[str, int]] = _no_stats_yet


def on_limit(fn: Callable[[], Dict[str, int]]) -> None:
    """Make fn() the tape's counters the node limit's message quotes:
    tapead._c.holds' stats, registered when it loads (it sits above this
    module, which it needs to raise)."""
    global _stats
    _stats = fn
