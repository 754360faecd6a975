"""Bulk calls on many Values at once: arrays of Values (tapead.arrays),
optimizer steps (tapead.optim), the fused layer (tapead.nn) and
tapead.dot / tapead.linear (tapead.dots).
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any

from . import _tl, f64, ffi, lib
from .holds import held_list, within_limit
from .status import check, error


def leaves(a: Any, h: Any) -> None:
    """New leaves holding the float64 array a's entries, their holds into h."""
    n = within_limit(lib.ta_leaves, f64(a), a.size, h)
    if n < 0:
        raise error(n)


def gather(ids: Any, n: int, what: int, out: Any) -> None:
    """out[k] = the value (what=0) or adjoint (what=1) of node ids[k]."""
    check(lib.ta_gather(ids, n, what, f64(out)))


def scatter(ids: Any, n: int, a: Any) -> None:
    """Set the value of node ids[k] to a[k], all or nothing."""
    check(lib.ta_scatter(ids, n, 0, f64(a)))


def add_grads(ids: Any, n: int, a: Any) -> None:
    """Add a (n doubles) to the adjoints (.grad) of the nodes ids."""
    check(lib.ta_scatter(ids, n, 2, f64(a)))


def fill_adj(ids: Any, n: int, x: float = 0.0) -> None:
    check(lib.ta_fill_adj(ids, n, x))


def sgd_step(ids: Any, n: int, lr: float, momentum: float, decay: float, buf: Any,
             first: bool) -> None:
    check(lib.ta_sgd_step(ids, n, lr, momentum, decay, buf, first))


# How this interpreter squares a float with ** 2: CPython calls libm's pow,
# PyPy multiplies; they part at this value (glibc's pow rounds its square
# the other way), so Adam's g**2 is computed as the user's Python computes it.
_PROBE = -127.51853245733109
SQ_MUL = int(_PROBE ** 2 == _PROBE * _PROBE)


def adam_step(ids: Any, n: int, lr: float, b1: float, b2: float, eps: float, decay: float,
              t: int, m: Any, v: Any) -> None:
    check(lib.ta_adam_step(ids, n, lr, b1, b2, eps, decay, t, m, v, SQ_MUL))


def layer(w: Any, b: Any, nout: int, nin: int, xid: Any, xc: Any, relu: int, out: Any) -> bool:
    """One fused layer into the held list out (xc None: every input a Value);
    False where it cannot run fused (a mode, a no_grad input)."""
    st = within_limit(lib.ta_layer, w, b, nout, nin, xid, ffi.NULL if xc is None else xc,
                      relu, out)
    if not st:      # the hot path, first: a model's forward calls this once per layer
        return True
    if st in (lib.TA_EMODEPATH, lib.TA_ENOGRAD):
        return False
    raise error(st)


class _DotScratch:
    """One thread's C arrays for ta_dots, reused call after call (PyPy pays
    for every cffi allocation, a held list's ffi.gc most of all)."""
    __slots__ = ("cells", "nin", "nout", "w", "wc", "x", "xc", "c0", "start", "h")

    def __init__(self, cells: int, nin: int, nout: int) -> None:
        self.cells, self.nin, self.nout = cells, nin, nout
        self.w, self.wc = ffi.new("int64_t[]", cells), ffi.new("double[]", cells)
        self.x, self.xc = ffi.new("int64_t[]", nin), ffi.new("double[]", nin)
        self.c0, self.start = ffi.new("double[]", nout), ffi.new("uint32_t[]", nout)
        self.h = held_list(nout)


def dots(w: Any, wc: Any, nout: int, nin: int, x: Any, xc: Any, c0: Any, start: Any,
         handles: Any) -> Any:
    """Rows of sum(w * x ...) in one call (csrc/api/cdef.h: ta_dots), from lists:
    w, wc (nout * nin) and x, xc (nin) ids (-1: the constant at that index),
    c0 and start per row.  handles(h, nout) of the held list the rows' nodes
    are in, or None where the call cannot run fused (a mode, a no_grad
    Value).  The arrays are this thread's, taken out while in use (a
    finalizer that runs a dot meanwhile makes its own)."""
    cells = nout * nin
    s = _tl.__dict__.pop("dots", None)
    if s is None or s.cells < cells or s.nin < nin or s.nout < nout:
        s = _DotScratch(max(cells, 256), max(nin, 64), max(nout, 16))
    s.w[0:cells] = w
    s.wc[0:cells] = wc
    s.x[0:nin] = x
    s.xc[0:nin] = xc
    s.c0[0:nout] = c0
    s.start[0:nout] = start
    st = within_limit(lib.ta_dots, s.w, s.wc, nout, nin, s.x, s.xc, s.c0, s.start, s.h)
    try:
        if not st:
            return handles(s.h, nout)
        if st in (lib.TA_EMODEPATH, lib.TA_ENOGRAD):
            return None
        raise error(st)
    finally:
        _tl.dots = s


def _fill(seq: Any, n: int, ids: Any, cs: Any, off: int, V: Any) -> bool:
    """ids/cs[off:off + n] from the list or tuple seq of Values (of type V)
    and floats; False for anything else (the general path decides)."""
    if (type(seq) is not list and type(seq) is not tuple) or len(seq) != n:
        return False
    for i in range(n):
        v = seq[i]
        if type(v) is V:
            ids[off + i] = v._i
        elif type(v) is float:
            ids[off + i] = -1
            cs[off + i] = v
        else:
            return False
    return True


def sums_fast(rows: Any, x: Any, V: Any, carrying: Any) -> Any:
    """tapead.linear(x, rows) for the common case on the cffi front (the
    CPython front's va_linear): lists or tuples of Values and floats, every
    row's first term with a Value.  The list of row Values, or None where
    the general path (tapead/dots.py) must decide: nothing recorded then.

    The operands are read from copies, each list taken in one step
    (list(), which reads its argument only after making the new list): a
    finalizer may change the caller's lists at any allocation, and the
    copies are then what is read, recorded and joined (carrying(rows, x)
    gives the handles() of the Values they carry), and they keep their
    Values, and so the nodes named, alive until the call has recorded."""
    if (type(rows) is not list and type(rows) is not tuple) or \
            (type(x) is not list and type(x) is not tuple):
        return None
    if type(rows) is list:
        rows = list(rows)
    rows = [list(r) if type(r) is list else r for r in rows]
    if type(x) is list:
        x = list(x)
    nout, nin = len(rows), len(x)
    if not nout or not nin:
        return None
    cells = nout * nin
    s = _tl.__dict__.pop("dots", None)
    if s is None or s.cells < cells or s.nin < nin or s.nout < nout:
        s = _DotScratch(max(cells, 256), max(nin, 64), max(nout, 16))
    try:
        if not _fill(x, nin, s.x, s.xc, 0, V):
            return None
        for j in range(nout):
            if not _fill(rows[j], nin, s.w, s.wc, j * nin, V) or (s.w[j * nin] < 0 and s.x[0] < 0):
                return None
            s.c0[j] = 0.0
            s.start[j] = 0
        if lib.ta_dots(s.w, s.wc, nout, nin, s.x, s.xc, s.c0, s.start, s.h):
            return None
        return carrying(rows, x)(s.h, nout)
    finally:
        _tl.dots = s


def take(idx: int, cands: Any, m: int, ncols: int, handles: Any) -> Any:
    """ncols take nodes picking among the m rows of candidates cands (ids, m
    * ncols) by node idx's value (csrc/api/cdef.h: ta_take): handles(h,
    ncols) of the held list they are in; or, where the call cannot record
    them, "no_grad" (inside no_grad()) or "constant" (a no_grad value
    among idx and cands)."""
    h = held_list(ncols)
    st = within_limit(lib.ta_take, idx, ffi.new("int64_t[]", cands), m, ncols, h)
    if not st:
        return handles(h, ncols)
    if st == lib.TA_EMODEPATH:
        return "no_grad"
    if st == lib.TA_ENOGRAD:
        return "constant"
    raise error(st)


def take_pick(x: float, m: int) -> int:
    """The item index value x picks among m (csrc/api/cdef.h: ta_take_pick)."""
    k = lib.ta_take_pick(x, m)
    if k < 0:
        raise error(k)
    return int(k)
