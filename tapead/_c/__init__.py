"""The compiled library as Python sees it; this package is the FFI boundary.

The modules of tapead._c, and no other, import tapead._tapead_c or use its
`lib` and `ffi` (tests/test_layout.py keeps it so).  Each holds one idea,
and callers import from the module that owns it:

- _c (this module): the library (ffi, lib), the op table, the C functions
  bound once as module globals for the hot paths (engine.py, custom.py,
  nodedata.py and modes.py bind them in turn), this thread's Python-side
  state, and the C arrays every wrapper hands to C;
- _c.status: C's status codes as Python exceptions;
- _c.holds: the segment tokens through which the cffi front holds the
  segments its Values live in (csrc/tapead.h: holds), held lists,
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

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any

from .._tapead_c import ffi as ffi, lib as lib  # (the "as" makes them public to type checkers)
from .._opsurface import IDENTS

# This thread's Python-side state (C keeps one tape per thread: csrc/thread.c).
_tl = _local()

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
rebound = lib.ta_rebound
# the statuses a hot path tells apart from errors (everything else goes to _c.status.error())
ELIMIT, ENOGRAD = lib.TA_ELIMIT, lib.TA_ENOGRAD


def native_install() -> bool:
    """Install the native Value type (as sys.modules["tapead._native"]);
    False where this build has none (PyPy)."""
    return lib.ta_native_install() == 0


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
