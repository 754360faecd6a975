"""Custom nodes (tapead.custom): recording one, setting its rule, running
a rule's step, and reading the C side table that keeps them (csrc/custom/custom.c).

custom_rec sits on a custom node's record path: it reuses this thread's
C arrays rather than make new ones per call.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _tl, ffi, lib
from .status import check, error


def _take() -> Any:
    """This thread's out-arguments for the custom-node calls (cffi releases
    the GIL), taken: a finalizer that runs while they are in use (any
    allocation may run one, PyPy's between any two bytecodes) and calls
    here gets new ones, so what a call reads is what its C call wrote.
    _put gives them back (an exception drops them: new ones next time)."""
    b = getattr(_tl, "custom_bufs", None)
    if b is None:
        return (ffi.new("uint32_t *"), ffi.new("uint32_t *"), ffi.new("int64_t *"),
                ffi.new("int64_t[]", 16), None, ffi.new("char[]", 64))
    _tl.custom_bufs = None
    return b


def _put(b: Any) -> None:
    _tl.custom_bufs = b


def _info(i: int, b: Any, ins: Any, cap: int) -> Tuple[int, int, str, Tuple[int, ...]]:
    """ta_custom_info of node i into the taken buffers b: (status, key,
    name, input ids, at most cap of them, into ins); ins NULL: no ids.
    Asks again with larger buffers where the first were short."""
    n, namelen, key, _, _, name = b
    st = lib.ta_custom_info(i, n, ins, cap, name, 64, namelen, key)
    if st != 0:
        return st, 0, "", ()
    m, size = n[0], namelen[0]
    if size > 64 or (ins != ffi.NULL and m > cap):
        name = ffi.new("char[]", size)
        if ins != ffi.NULL:
            ins = ffi.new("int64_t[]", max(m, 1))
            cap = m
        st = lib.ta_custom_info(i, n, ins, cap, name, size, namelen, key)
        if st != 0:
            return st, 0, "", ()
    got = ffi.buffer(name, size)[:].decode("utf-8", "surrogatepass")
    return st, key[0], got, (tuple(ins[0:m]) if ins != ffi.NULL else ())


def custom_info(i: int) -> Optional[Tuple[int, str, Tuple[int, ...]]]:
    """(key, name, input ids) of node i if it is an n-ary node (custom or
    take: key 0, no name), else None."""
    b = _take()
    st, key, nm, ids = _info(i, b, b[3], 16)
    _put(b)
    if st == lib.TA_ENOTCUSTOM or st == lib.TA_ENOGRAD:
        return None
    check(st)
    return key, nm, ids


def custom_failed() -> Optional[Tuple[int, str]]:
    """(key, name) of the custom node of the last TA_ECUSTOM, None if unknown."""
    b = _take()
    st, key, nm, _ = _info(lib.ta_custom_failed(), b, ffi.NULL, 0)
    _put(b)
    return None if st != 0 else (key, nm)


# The record path of a custom node (Value(data, _children, _op), precomputed
# and out._backward = fn on the cffi front) reuses this thread's C arrays:
# cffi makes a new one from a list on every call, half a recording's cost on
# PyPy.  A call takes them while it fills and passes them and puts them back
# after, so a finalizer that runs meanwhile (the collector, at any
# allocation) and records in this thread gets new ones.  No loop on the path
# of one or two inputs (most ops): PyPy's JIT does not inline a function
# that has a loop, and the call it makes instead costs ~100 ns, twice a whole
# op (a comprehension is such a function too).
_ta_custom_rec, _ta_custom_key, _NULL = lib.ta_custom_rec, lib.ta_custom_key, ffi.NULL


def custom_rec(xs: Any, value: float, partials: Any, name: bytes, V: Any, what: str,
               key: int) -> int:
    """Record into the segment of key a custom node of `value` whose inputs
    are the Values xs (a tuple or list; V their class: TypeError, worded
    `what`, for anything else) and whose partials are the floats `partials`
    (a tuple or list, one per input), or None: a node with a Python rule;
    name: its op name in UTF-8 (name_bytes).  Returns the node's id, or a status for engine._slow (key last: its
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
        r = _ta_custom_rec(ids, n, value, _NULL, name, len(name), key)
    else:       # (never NULL: NULL asks for a Python rule)
        if n > 2:
            for k in range(n):
                ps[k] = partials[k]
        elif n:
            ps[0] = partials[0]
            if n == 2:
                ps[1] = partials[1]
        r = _ta_custom_rec(ids, n, value, ps, name, len(name), key)
    b[0] = ids
    b[1] = ps
    return r


_ENC: Dict[str, bytes] = {}   # recent names, encoded (a cache: cleared when it is full)


def name_bytes(op: Any) -> bytes:
    """A custom node's name as C keeps it (with the node: no table of names
    outlives the nodes): op (a str; '' for None; str() of anything else) in
    UTF-8, lone surrogates kept."""
    b = _ENC.get(op) if type(op) is str else None
    if b is None:
        s = "" if op is None else op if isinstance(op, str) else str(op)
        b = s.encode("utf-8", "surrogatepass")
        if type(op) is str:
            if len(_ENC) >= 256:
                _ENC.clear()
            _ENC[op] = b
    return b


def _input_id(c: Any, V: Any, what: str) -> int:
    if not isinstance(c, V):
        raise TypeError(f"{what}, not {type(c).__name__}")
    return c._i  # type: ignore[no-any-return]


def custom_key(i: int, other: Any = 0) -> Any:
    """The key of custom node i's Python rule (0: a node of partials), or
    `other` where i is no custom node (a no_grad value among them)."""
    k: int = _ta_custom_key(i)
    if k == lib.TA_ENOTCUSTOM or k == lib.TA_ENOGRAD:
        return other
    if k < 0:
        raise error(k)
    return k


def step(i: int) -> None:
    """Node i's own local chain-rule step (a built-in or precomputed rule)."""
    check(lib.ta_step(i))


def on_custom_rule(fn: Callable[[int, int], int],
                   escaped: Callable[[Any, Any, Any], None]) -> Callable[[int, int], int]:
    """Make fn(node, key) the Python function C's sweep calls at a node with
    a Python rule (csrc/diff/sweep.c: ta_custom_rule).  An exception that escapes
    fn anyway (a Ctrl-C landing outside its try) makes the call return -1,
    so the sweep stops as for a rule that raised, and goes to
    escaped(type, value, traceback) to keep, instead of being printed and
    dropped by cffi."""
    return ffi.def_extern(name="ta_custom_rule", error=-1, onerror=escaped)(fn)
