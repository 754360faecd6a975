"""What the tape recorded, read back: one node's op, inputs and constant,
and the rows of the graph a node depends on (csrc/diff/subtape.c), which the
Wengert list and the graph drawing show.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

from . import ffi, int64s, lib
from .status import check, error


def node(i: int) -> Optional[Tuple[int, int, int, float]]:
    """(op code, input x id or -1, input y id or -1, constant) of node i;
    None for a no_grad value (no node)."""
    p, x, y, c = ffi.new("int *"), ffi.new("int64_t *"), ffi.new("int64_t *"), ffi.new("double *")
    st = lib.ta_node(i, p, x, y, c)
    if st == lib.TA_ENOGRAD:
        return None
    check(st)
    return p[0], x[0], y[0], c[0]


def partials(i: int) -> Optional[Tuple[float, ...]]:
    """Node i's local partial derivatives, one per input in the order of its
    inputs (csrc/diff/sweep.c: ta_local_grads); () for a leaf or a no_grad value;
    None for a custom node with a Python rule (it has none)."""
    d = ffi.new("double[2]")
    n = lib.ta_local_grads(i, d, 2)
    if n == lib.TA_ENOGRAD or n == lib.TA_EPYRULE:
        return () if n == lib.TA_ENOGRAD else None
    if n < 0:
        raise error(n)
    if n > 2:
        d = ffi.new("double[]", n)
        m = lib.ta_local_grads(i, d, n)
        if m != n:
            raise error(m if m < 0 else lib.TA_ECORRUPT)
    return tuple(d[0:n])


_ROWS = (("op", "int[]"), ("x", "int64_t[]"), ("y", "int64_t[]"), ("c", "double[]"),
         ("val", "double[]"), ("id", "int64_t[]"), ("tan", "double[]"), ("adj", "double[]"))


def trace(out: int, n: int, ids: Any, ts: Optional[List[float]], adjoints: bool) -> Dict[str, List[Any]]:
    """The rows of the graph of node out (csrc/api/cdef.h: ta_rows_t) as lists
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


def custom_plain(ids: List[int]) -> bool:
    """Whether no custom node is in the graphs of ids."""
    # (any other failure is the next call's to report: wengert's)
    return lib.ta_custom_plain(int64s(ids), len(ids)) != lib.TA_ECUSTOM
