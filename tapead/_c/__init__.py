"""The compiled library as Python sees it; this package is the FFI boundary.

The modules of tapead._c, and no other, import tapead._tapead_c or use its
`lib` and `ffi` (tests/test_layout.py keeps it so).  Each holds one idea,
and callers import from the module that owns it:

- _c (this module): the library (ffi, lib), the op table, the C functions
  bound once as module globals for the hot paths (engine.py, custom.py,
  nodedata.py and modes.py bind them in turn), the Python-side state of
  each thread and of each tape, and the C arrays every wrapper hands to C;
- _c.status: C's status codes as Python exceptions;
- _c.holds: the segment tokens through which the cffi front holds the
  segments its Values live in (csrc/api/tapead.h: holds), held lists,
  reclamation, the node limit and the tape's counters;
- _c.custom: custom nodes (recording, rules, their side table);
- _c.graph: what the tape recorded, read back (one node; a graph's rows);
- _c.higher: forward mode and higher order over a node's graph;
- _c.bulk: arrays of Values, optimizer steps, the fused layer;
- _c.modes: the per-thread modes (no_grad, detect_anomaly);
- _c.program: guards and compiled programs (replay.py).

Off the hot paths the typed wrappers take and return Python values and
numpy arrays: no module outside _c makes cdata, sees NULL or reads a status.
The modules a bare `import tapead` needs are this one, status, holds and
custom; the others load with the feature that uses them.
"""
from __future__ import annotations

try:                                   # threading.local itself, without importing threading
    from _thread import _local as _local
except ImportError:  # pragma: no cover
    from threading import local as _local
from _weakref import ref as _weakref
try:                                   # (one atomic step: drop key if its reference is dead)
    from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover (PyPy has it in weakref)
    from weakref import _remove_dead_weakref  # type: ignore[attr-defined]

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

from .._tapead_c import ffi as ffi, lib as lib  # (the "as" makes them public to type checkers)
from .._opsurface import IDENTS

# This thread's scratch for a call on its way through (C arrays reused call
# after call, a rule's exception on its way up to backward()): what the
# call's own stack uses, so it may be per greenlet where a greenlet library
# makes threading.local so.  What Python keeps about nodes is per tape: Tape.
_tl = _local()


# ---------------------------------------------------------------- per tape
class Tape:
    """The Python side of one tape: what Python keeps about its nodes, which
    node ids and custom-node keys name (they are the tape's).  C keeps one
    tape per OS thread (csrc/tape/thread.c), so this is found by the tape's tag
    (tape()), never through a threading.local: gevent and its like make
    that per greenlet, while the greenlets of a thread share its tape.

    It lives while anything can name its nodes: the thread that made it (or
    each greenlet that has used it) keeps it in _tl, and so does each
    owner and node-data entry made in it, which the Values that need them
    carry; then tape() makes a new one (nothing then names the old one's)."""
    __slots__ = ("tag", "owners", "purge_at", "limit", "table", "__weakref__")

    def __init__(self, tag: int) -> None:
        self.tag = tag
        # custom.py: custom node key -> weak reference to its owner, when to
        # drop the dead references next, and the tape size _pressure allows
        self.owners: Dict[int, Any] = {}
        self.purge_at = 256
        self.limit = 0
        self.table: Any = None          # nodedata.py: its node data (made on first use)

    def __repr__(self) -> str:
        return f"<tapead tape {self.tag}: {len(self.owners)} owner entries>"


_tape_tag = lib.ta_tape_tag
_tapes: Dict[int, Any] = {}            # tag -> weak reference to its Tape (dead ones dropped as it grows)
_tapes_purge_at = 64
_last: Tuple[int, Any] = (-1, None)    # the Tape found last, with its tag (one tuple: read at once)


def tape() -> Tape:
    """This thread's tape's Python side (made if need be)."""
    last = _last
    if last[0] == _tape_tag():
        return last[1]  # type: ignore[no-any-return]
    return _find(_tape_tag())


def _find(tag: int) -> Tape:
    """The Tape of tag (this thread's tape's), registered if need be."""
    global _last, _tapes_purge_at
    if tag < 0:
        raise MemoryError("tapead: no memory for this thread's tape")
    r = _tapes.get(tag)
    t: Optional[Tape] = r() if r is not None else None
    if t is None:
        # registered with one atomic step each (setdefault; dropping only a
        # dead reference), so that the Tape of a tag is the one registered,
        # whatever runs meanwhile (a finalizer here, another thread purging)
        t = Tape(tag)
        r = _weakref(t)
        while True:
            got = _tapes.setdefault(tag, r)
            if got is r:
                break
            old = got()
            if old is not None:
                t = old
                break
            _remove_dead_weakref(_tapes, tag)
        if len(_tapes) > _tapes_purge_at:        # the Tapes of ended threads, gone with their Values
            for k in list(_tapes):
                _remove_dead_weakref(_tapes, k)
            _tapes_purge_at = max(64, 2 * len(_tapes))
    _tl.tape = t
    _last = (tag, t)
    return t

# ---------------------------------------------------------------- op table
OP_NAMES = tuple(ffi.string(lib.ta_op_name(i)).decode() for i in range(lib.ta_nops()))
OP_KINDS = tuple(lib.ta_op_kind(i) for i in range(lib.ta_nops()))
# an op's kind, as OP_KINDS gives it (cdef.h: ta_op_kind)
KIND_LEAF, KIND_UN, KIND_BIN, KIND_CST, KIND_NARY = range(5)


# Python's Op codes come from the C table, the single source (csrc/api/ops.def);
# the op surface generated from the same table must agree with it.
OP = {ffi.string(lib.ta_op_ident(i)).decode(): i for i in range(lib.ta_nops())}
if tuple(OP) != IDENTS:  # pragma: no cover (a build from a table edited since the generation)
    raise ImportError("tapead/_opsurface.py does not match the compiled op table (csrc/api/ops.def): "
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
rebound = lib.ta_rebound
# the statuses a hot path tells apart from errors (everything else goes to _c.status.error())
ELIMIT, ENOGRAD = lib.TA_ELIMIT, lib.TA_ENOGRAD


def cpython_install() -> bool:
    """Install the C Value type (as sys.modules["tapead._cpython"]);
    False where this build has none (PyPy), else binds its tape_tag (the
    same C function, called without cffi's cost) for tape()."""
    global _tape_tag
    if lib.ta_cpython_install() != 0:
        return False
    import sys
    _tape_tag = sys.modules["tapead._cpython"].tape_tag
    return True


# ------------------------------------------------------------- C arrays
# What the typed wrappers hand to C: an id or double array is an opaque C
# array made here, for the calls that take one.

def int64s(ids: Any) -> Any:
    """A C int64 array of the ints in ids (at least one slot: C never gets a
    zero-length allocation), or of n zeros for an int n."""
    if isinstance(ids, int):
        return ffi.new("int64_t[]", max(ids, 1))
    return ffi.new("int64_t[]", ids or [0])


def doubles(n: int) -> Any:
    """A C double array of n zeros (at least one slot); it slices like a list."""
    return ffi.new("double[]", max(n, 1))


def f64(a: Any) -> Any:
    """A C pointer into the contiguous float64 numpy array a (which it keeps alive)."""
    return ffi.from_buffer("double[]", a)
