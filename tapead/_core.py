"""The one module that touches the compiled library (imports _tapead_c).

It owns the FFI boundary: the C functions bound once as module globals (the
hot paths of engine.py, custom.py, nodedata.py and modes.py bind them), one typed
wrapper per bulk call (Python values, numpy arrays and C arrays made here in
and out: off those hot paths no other module makes cdata, sees NULL or reads
a status), the mapping from C status
codes to Python exceptions, and the segment tokens through which the cffi
front holds the segments its Values live in (csrc/tapead.h: holds).
tests/test_layout.py keeps it the only one.
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

from ._tapead_c import ffi as ffi, lib as lib  # re-exported for the tests (the "as" tells type checkers)
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
backward = lib.ta_backward
recompute = lib.ta_recompute
cmp2 = lib.ta_cmp2
cmpc = lib.ta_cmpc
check_node = lib.ta_check
peek = lib.ta_peek
orphaned = lib.ta_orphaned
node_stamp = lib.ta_node_stamp
mode_leave = lib.ta_mode_leave
# the statuses a hot path tells apart from errors (everything else goes to error())
ELIMIT, ENOGRAD = lib.TA_ELIMIT, lib.TA_ENOGRAD

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
        kind, outcome, xv, yv = out = [ffi.new(t) for t in ("int *", "int *", "double *", "double *")]
        lib.ta_guard_info(lib.ta_guard_failed(), *out)
        return guard_error(kind[0], outcome[0], xv[0], yv[0])
    if code in (lib.TA_ECUSTOM, lib.TA_EPYTHON, lib.TA_EBUSY):
        return _refusal("python" if code == lib.TA_EPYTHON else
                        "busy" if code == lib.TA_EBUSY else "custom")
    return TapeError(f"tapead: unexpected status {code}")


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


# ------------------------------------------- typed wrappers (bulk calls)
# One per C call a feature module makes: Python values and numpy arrays in,
# Python values and numpy arrays out; a failed status raises here.  An id or
# double array below is an opaque C array made here, for calls that take it.

def int64s(ids: Any) -> Any:
    """A C int64 array of the ints in ids (at least one slot: C never gets a
    zero-length allocation), or of n zeros for an int n."""
    if isinstance(ids, int):
        return ffi.new("int64_t[]", max(ids, 1))
    return ffi.new("int64_t[]", ids or [0])


def doubles(n: int) -> Any:
    """A C double array of n zeros (at least one slot); it slices like a list."""
    return ffi.new("double[]", max(n, 1))


def _f64(a: Any) -> Any:
    """A C pointer into the contiguous float64 numpy array a (which it keeps alive)."""
    return ffi.from_buffer("double[]", a)


def native_install() -> bool:
    """Install the native Value type (as sys.modules["tapead._native"]);
    False where this build has none (PyPy)."""
    return lib.ta_native_install() == 0


def hold_ids(ids: List[int], h: Any) -> None:
    """Put a hold on each existing node of ids into the held list h."""
    check(lib.ta_held_ids(int64s(ids), len(ids), h))


def node(i: int) -> Optional[Tuple[int, int, int, float]]:
    """(op code, input x id or -1, input y id or -1, constant) of node i;
    None for a no_grad value (no node)."""
    p, x, y, c = ffi.new("int *"), ffi.new("int64_t *"), ffi.new("int64_t *"), ffi.new("double *")
    st = lib.ta_node(i, p, x, y, c)
    if st == lib.TA_ENOGRAD:
        return None
    check(st)
    return p[0], x[0], y[0], c[0]


# ----- arrays, optimizers, layers
def leaves(a: Any, h: Any) -> None:
    """New leaves holding the float64 array a's entries, their holds into h."""
    n = within_limit(lib.ta_leaves, _f64(a), a.size, h)
    if n < 0:
        raise error(n)


def gather(ids: Any, n: int, what: int, out: Any) -> None:
    """out[k] = the value (what=0) or adjoint (what=1) of node ids[k]."""
    check(lib.ta_gather(ids, n, what, _f64(out)))


def scatter(ids: Any, n: int, a: Any) -> None:
    """Set the value of node ids[k] to a[k], all or nothing."""
    check(lib.ta_scatter(ids, n, 0, _f64(a)))


def fill_adj(ids: Any, n: int, x: float = 0.0) -> None:
    check(lib.ta_fill_adj(ids, n, x))


def sgd_step(ids: Any, n: int, lr: float, momentum: float, decay: float, buf: Any,
             first: bool) -> None:
    check(lib.ta_sgd_step(ids, n, lr, momentum, decay, buf, first))


def adam_step(ids: Any, n: int, lr: float, b1: float, b2: float, eps: float, decay: float,
              t: int, m: Any, v: Any) -> None:
    check(lib.ta_adam_step(ids, n, lr, b1, b2, eps, decay, t, m, v))


def layer(w: Any, b: Any, nout: int, nin: int, xid: Any, xc: Any, relu: int, out: Any) -> bool:
    """One fused layer into the held list out (xc None: every input a Value);
    False where it cannot run fused (a mode, a no_grad input)."""
    # (within_limit spelled out: a model's forward calls this once per layer)
    xp = ffi.NULL if xc is None else xc
    st = lib.ta_layer(w, b, nout, nin, xid, xp, relu, out)
    if not st:
        return True
    if st == ELIMIT:
        reclaim()
        st = lib.ta_layer(w, b, nout, nin, xid, xp, relu, out)
        if not st:
            return True
    if st in (lib.TA_EMODEPATH, ENOGRAD):
        return False
    raise error(st)


# ----- modes
def mode_token() -> Any:
    """An unarmed mode token (csrc/cdef.h): ta_mode_leave runs when it dies."""
    return ffi.gc(ffi.new("ta_mode_tok *"), lib.ta_mode_leave)


def mode_enter(tok: Any, mode: int) -> None:
    """Arm tok with mode (1 no_grad, 2 detect_anomaly)."""
    st = lib.ta_mode_enter(tok, mode)
    if st < 0:
        raise error(st)


# ----- forward mode, traces, higher order
def jvp(out: int, n: int, ids: Any, ts: List[float]) -> float:
    """d node out along tangents ts of the n nodes ids."""
    r = ffi.new("double *")
    check(lib.ta_jvp(out, n, ids, ffi.new("double[]", ts or [0.0]), r))
    return r[0]  # type: ignore[no-any-return]  # (a cdata double: a float)


_ROWS = (("op", "int[]"), ("x", "int64_t[]"), ("y", "int64_t[]"), ("c", "double[]"),
         ("val", "double[]"), ("id", "int64_t[]"), ("tan", "double[]"), ("adj", "double[]"))


def trace(out: int, n: int, ids: Any, ts: Optional[List[float]], adjoints: bool) -> Dict[str, List[Any]]:
    """The rows of the graph of node out (csrc/cdef.h: ta_rows_t) as lists
    by column; "tan" (tangents ts of the n nodes ids) only if ts is given,
    "adj" only if adjoints."""
    tp = ffi.NULL if ts is None else ffi.new("double[]", ts or [0.0])
    ip = ffi.NULL if ts is None else ids
    m = lib.ta_trace(out, 0, n, ip, tp, ffi.NULL)
    if m < 0:
        raise error(m)
    rows: Any = ffi.new("ta_rows_t *")
    want = {"tan": ts is not None, "adj": adjoints}
    keep = {k: ffi.new(t, max(m, 1)) for k, t in _ROWS if want.get(k, True)}
    for k, a in keep.items():
        setattr(rows, k, a)
    got = lib.ta_trace(out, m, n, ip, tp, rows)
    if got < 0:
        raise error(got)
    assert got == m
    return {k: list(a[0:m]) for k, a in keep.items()}


def grad(outs: Any, w: Optional[List[float]], nout: int, ins: Any, nin: int,
         h: Any = None) -> List[float]:
    """The gradients of sum_k w_k outs_k at the nin nodes ins (w None: all 1);
    with a held list h, recorded: their nodes' holds go into h (and [] is returned)."""
    wp = ffi.NULL if w is None else ffi.new("double[]", w or [0.0])
    if h is not None:
        check(within_limit(lib.ta_grad_graph, outs, wp, nout, ins, nin, h))
        return []
    g = ffi.new("double[]", max(nin, 1))
    check(lib.ta_grad(outs, wp, nout, ins, nin, g))
    return list(g[0:nin])


def hvp(out: int, ins: Any, nin: int, v: Any, hv: Any) -> None:
    """hv = the Hessian of node out at the nin nodes ins, times v (float64 arrays)."""
    check(lib.ta_hvp(out, ins, nin, _f64(v), _f64(hv)))


def hessian(out: int, ins: Any, nin: int, H: Any) -> None:
    check(lib.ta_hessian(out, ins, nin, _f64(H)))


def jacobian(outs: Any, nout: int, ins: Any, nin: int, J: Any) -> None:
    check(lib.ta_jacobian(outs, nout, ins, nin, _f64(J)))


def custom_plain(ids: List[int]) -> bool:
    """Whether no custom node is in the graphs of ids."""
    # (any other failure is the next call's to report: wengert's)
    return lib.ta_custom_plain(int64s(ids), len(ids)) != lib.TA_ECUSTOM


# ----- custom nodes
def _bufs() -> Any:
    """This thread's out-arguments for the custom-node calls (cffi releases the GIL)."""
    try:
        return _tl.custom_bufs
    except AttributeError:
        b = _tl.custom_bufs = (ffi.new("uint32_t *"), ffi.new("uint32_t *"), ffi.new("int64_t *"),
                               ffi.new("int64_t[]", 16), ffi.new("int64_t[256]"))
        return b


def custom_info(i: int) -> Optional[Tuple[int, int, Tuple[int, ...]]]:
    """(key, name id, input ids) of node i if it is a custom node, else None."""
    n, name, key, ins = _bufs()[:4]
    st = lib.ta_custom_info(i, n, ins, 16, name, key)
    if st == lib.TA_ENOTCUSTOM or st == lib.TA_ENOGRAD:
        return None
    check(st)
    if n[0] > 16:
        ins = ffi.new("int64_t[]", n[0])
        check(lib.ta_custom_info(i, n, ins, n[0], name, key))
    return key[0], name[0], tuple(ins[0:n[0]])


def custom_failed() -> Optional[Tuple[int, int]]:
    """(key, name id) of the custom node of the last TA_ECUSTOM, None if unknown."""
    n, name, key = ffi.new("uint32_t *"), ffi.new("uint32_t *"), ffi.new("int64_t *")
    if lib.ta_custom_info(lib.ta_custom_failed(), n, ffi.NULL, 0, name, key) != 0:
        return None
    return key[0], name[0]


# The record path of a custom node (Value(data, _children, _op), precomputed
# and out._backward = fn on the cffi front) reuses this thread's C arrays:
# cffi makes a new one from a list on every call, half a recording's cost on
# PyPy.  A call takes them while it fills and passes them and puts them back
# after, so a finalizer that runs meanwhile (the collector, at any
# allocation) and records in this thread gets new ones.  No loop on the path
# of one or two inputs (most ops): PyPy's JIT does not inline a function
# that has a loop, and the call it makes instead costs ~100 ns, twice a whole
# op (a comprehension is such a function too).
_ta_custom_rec, _ta_rule_set, _NULL = lib.ta_custom_rec, lib.ta_custom_rule_set, ffi.NULL


def custom_rec(xs: Any, value: float, partials: Any, name: int, V: Any, what: str,
               key: int) -> int:
    """Record into the segment of key a custom node of `value` whose inputs
    are the Values xs (a tuple or list; V their class: TypeError, worded
    `what`, for anything else) and whose partials are the floats `partials`
    (a tuple or list, one per input), or None: a node with a Python rule.
    Returns the node's id, or a status for engine._slow (key last: its
    retry passes a new one)."""
    try:
        b = _tl.rec_bufs
    except AttributeError:
        b = _tl.rec_bufs = [ffi.new("int64_t[8]"), ffi.new("double[8]")]
    n = len(xs)
    ids, ps = b
    if ids is None or n > 8:
        ids = ffi.new("int64_t[]", n if n > 8 else 8)
        ps = ffi.new("double[]", n if n > 8 else 8)
    else:
        b[0] = b[1] = None
    if n > 2:
        for k in range(n):
            ids[k] = _input_id(xs[k], V, what)
    elif n:
        ids[0] = _input_id(xs[0], V, what)
        if n == 2:
            ids[1] = _input_id(xs[1], V, what)
    if partials is None:
        r = _ta_custom_rec(ids, n, value, _NULL, name, key)
    else:       # (never NULL: NULL asks for a Python rule)
        if n > 2:
            for k in range(n):
                ps[k] = partials[k]
        elif n:
            ps[0] = partials[0]
            if n == 2:
                ps[1] = partials[1]
        r = _ta_custom_rec(ids, n, value, ps, name, key)
    b[0] = ids
    b[1] = ps
    return r


def _input_id(c: Any, V: Any, what: str) -> int:
    if not isinstance(c, V):
        raise TypeError(f"{what}, not {type(c).__name__}")
    return c._i  # type: ignore[no-any-return]


def rule_set(i: int, ids: List[int]) -> Optional[Tuple[int, List[int]]]:
    """None if node i is not a custom node; else (its key, 0 for a precomputed
    node; ok: ok[k] is 1 where the node now keeps node ids[k] alive).
    (On a custom node's record path: kept cheap, as custom_rec.)"""
    n = len(ids)
    if n:
        try:
            buf = _tl.rule_ok
        except AttributeError:
            buf = None
        if buf is None or n > 64:
            buf = ffi.new("int8_t[]", n if n > 64 else 64)
        else:
            _tl.rule_ok = None      # taken (see above), put back below
        key = _ta_rule_set(i, ids, n, buf)
        ok: List[int] = ffi.unpack(buf, n)  # type: ignore[assignment]  # (a list of ints here)
        _tl.rule_ok = buf
    else:
        key = _ta_rule_set(i, _NULL, 0, _NULL)   # (an empty list would cost a cffi array)
        ok = []
    if key > 0:
        return key, ok
    if key == lib.TA_ENOTCUSTOM or key == lib.TA_ENOGRAD:
        return None
    if key < 0:
        raise error(key)
    return 0, ok


def step(i: int) -> None:
    """Node i's own local chain-rule step (a built-in or precomputed rule)."""
    check(lib.ta_step(i))


def custom_dead() -> List[int]:
    """Keys of custom nodes the tape has reclaimed since the last call (up
    to 256 a call; [] when none are left)."""
    buf = _bufs()[4]
    n = lib.ta_custom_dead(buf, 256)
    return ffi.unpack(buf, n) if n > 0 else []  # type: ignore[return-value]  # (a list of ints here)


def on_custom_rule(fn: Callable[[int, int], int]) -> Callable[[int, int], int]:
    """Make fn(node, key) the Python function C's sweep calls at a node with
    a Python rule (csrc/sweep.c: ta_custom_rule)."""
    return ffi.def_extern(name="ta_custom_rule")(fn)


# ----- guards and compiled programs (replay.py)
def guard_clear() -> None:
    check(lib.ta_guard_clear())


def guard_count() -> int:
    return lib.ta_guard_count()


def _prog_box() -> Any:
    """An empty box a C call puts a new program in, owned before the call
    (csrc/cdef.h: ta_prog_drop)."""
    return ffi.gc(ffi.new("ta_prog *[1]"), lib.ta_prog_drop)


def _ptr(a: Any, ctype: str = "double[]") -> Any:
    """A C pointer into the contiguous array a (which it keeps alive), NULL for None:
    ~0.3 us, a fifth of ffi.cast(a.ctypes.data)."""
    return ffi.NULL if a is None else ffi.from_buffer(ctype, a)


def prog_new(oid: Any, nout: int, iid: Any, nin: int, wid: Any, nwrt: int) -> Any:
    """A new program's box (its program is box[0]); None for arguments C
    refuses (TA_EARG: no outputs, inputs or wrt not leaves, inputs repeated)."""
    p = _prog_box()
    st = lib.ta_prog_new(oid, nout, iid, nin, wid, nwrt, p)
    if st == lib.TA_EARG:
        return None
    check(st)
    return p


_PS = {"inputs": lib.TA_PS_INPUTS, "outputs": lib.TA_PS_OUTPUTS, "wrt": lib.TA_PS_WRT,
       "params": lib.TA_PS_PARAMS, "nodes": lib.TA_PS_NODES, "guards": lib.TA_PS_GUARDS,
       "live": lib.TA_PS_LIVE, "block": lib.TA_PS_BLOCK}


def prog_size(p: Any, what: str) -> int:
    """A size of program p: "inputs", "outputs", "wrt", "params", "nodes",
    "guards", "block" (rows per gradient block), or "live" (1 while it reads
    its parameters' Values)."""
    return lib.ta_prog_size(p, _PS[what])


def prog_params(p: Any, npar: int) -> List[int]:
    """The node ids of program p's npar parameters."""
    pid = ffi.new("int64_t[]", max(npar, 1))
    lib.ta_prog_params(p, pid)
    return list(pid[0:npar])


def prog_param_values(p: Any, out: Any) -> None:
    check(lib.ta_prog_param_values(p, _f64(out), out.size))


def prog_set_params(p: Any, v: Any) -> None:
    check(lib.ta_prog_set_params(p, _f64(v), v.size))


def prog_follow(p: Any) -> bool:
    """Read p's parameters from their Values again; False if it has none to follow."""
    return lib.ta_prog_follow(p) == 0


def prog_run(p: Any, fields: Dict[str, Any], row0: int) -> None:
    """Run program p (csrc/cdef.h: ta_run_t, numpy arrays for its pointers,
    ints for the rest); a failure raises, naming its row (row0: the first
    row's number in the message)."""
    r: Any = ffi.new("ta_run_t *")
    keep = []
    for k, x in fields.items():
        if hasattr(x, "dtype"):
            x = _f64(x)
            keep.append(x)
        setattr(r, k, x)
    f: Any = ffi.new("ta_fail_t *")
    st = lib.ta_prog_run(p, r, f)
    del keep
    if st:
        raise _run_error(st, f, row0)


def _run_error(st: int, f: Any, row0: int) -> Exception:
    where = f" at row {f.row + row0}"
    if st == lib.TA_EGUARD:
        return guard_error(f.kind, f.outcome, f.x, f.y, where)
    if st in (lib.TA_EZERODIV, lib.TA_EDOMAIN, lib.TA_ERANGE):
        e = op_error(st, f.op, f.x, f.y)
    elif st == lib.TA_EARG:
        return ValueError("Program: an argument does not match the program's sizes")
    else:
        return error(st)
    e.args = (f"{e.args[0]} ({where.strip()})",)
    return e


_CTYPE = {1: "uint8_t[]", 4: "uint32_t[]", 8: "double[]"}   # the flat form's arrays, by item size


def _flat(sizes: Optional[Dict[str, int]], arrs: Optional[Dict[str, Any]]) -> Tuple[Any, List[Any]]:
    """A ta_flat_t with the given sizes, its arrays pointing into arrs (the
    pointers returned keep them alive)."""
    f: Any = ffi.new("ta_flat_t *")
    for k, n in (sizes or {}).items():
        setattr(f, k, n)
    keep = []
    for k, a in (arrs or {}).items():
        ptr = _ptr(a, _CTYPE[a.dtype.itemsize])
        setattr(f, k, ptr)
        keep.append(ptr)
    return f, keep


def prog_flat_sizes(p: Any, names: Tuple[str, ...]) -> Dict[str, int]:
    """The sizes of program p's flat form (csrc/cdef.h: ta_flat_t)."""
    f, _ = _flat(None, None)
    check(lib.ta_prog_flat(p, f))
    return {k: getattr(f, k) for k in names}


def prog_flat(p: Any, sizes: Dict[str, int], arrs: Dict[str, Any]) -> None:
    """Fill arrs (numpy arrays, one per array of ta_flat_t, each as long as
    sizes make it) with program p's flat form."""
    f, keep = _flat(sizes, arrs)
    check(lib.ta_prog_flat(p, f))
    del keep


def prog_load(sizes: Dict[str, int], arrs: Dict[str, Any], params: Any) -> Any:
    """A program's box from its flat form (prog_flat) and parameter values, every field
    checked in C; None for a form C refuses (TA_EARG)."""
    f, keep = _flat(sizes, arrs)
    p = _prog_box()
    st = lib.ta_prog_load(f, _f64(params), p)
    del keep
    if st == lib.TA_EARG:
        return None
    check(st)
    return p
