"""Holds: how the cffi front keeps the tape segments its Values live in.

A Value of the cffi front holds a token, shared by every Value whose node
lives in the same segment; the token owns one hold on that segment
(csrc/api/tapead.h: holds), dropped by C when the token dies.  A bulk call
returns its new nodes in a held list, each id held once, which adopt()
turns into tokens; HeldIds keeps the ids of given Values (an optimizer's
parameters) in one, following them when __init__ moves one.  Each thread has a current token, for the segment the
next node goes to: every recording call passes its key, and slow() takes
a new one when C says the node would land elsewhere.  What the holds decide (which segments are garbage) is
here too: reclaim() and collect(), the node limit (within_limit,
set_limit) and the tape's counters (stats).
"""
from __future__ import annotations

import gc
from _thread import get_ident
from _weakref import ref as _weakref

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, SupportsInt, Tuple

from . import SHIFT, _tl, ffi, int64s, lib
from .status import check, error, on_limit

NEEDSEG, NEEDNG = lib.TA_NEEDSEG, lib.TA_NEEDNG
_ELIMIT = lib.TA_ELIMIT
_orphaned = lib.ta_orphaned


class _Token:
    """A hold on one tape segment (csrc/api/tapead.h: holds), shared by every
    cffi-front Value whose node lives there; `key` is the segment's key
    (node id >> SHIFT), `box` the box the hold sits in (csrc/api/cdef.h).

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


def hold_current(st: int) -> _Token:
    """A token holding the segment the next node goes to (st: NEEDSEG for
    the tape, NEEDNG for the no_grad arena); raises for any other status."""
    if st != NEEDSEG and st != NEEDNG:
        raise error(st)
    box, key = _box(), ffi.new("int64_t *")
    check(lib.ta_cur_hold(st == NEEDNG, box, key))
    return _Token(key[0], box)


def held_list(cap: int) -> Any:
    """An empty held list (csrc/api/cdef.h) for up to cap node ids: what a bulk
    call fills, each id held once; the holds still in it when it dies are
    dropped by C."""
    h = ffi.new("int64_t[]", 1 + 2 * cap)
    h[0] = cap
    return ffi.gc(h, lib.ta_held_drop)


def held_ids(h: Any, n: int) -> List[int]:
    """The first n ids of the held list h."""
    return ffi.unpack(ffi.cast("int64_t *", h) + 1, n)  # type: ignore[return-value]  # (ffi.gc's array has no length)


def held_bytes(h: Any) -> Any:
    """The whole held list h as a writable buffer (the CPython front's adopt)."""
    p = ffi.cast("int64_t *", h)
    return ffi.buffer(p, 8 * (1 + 2 * p[0]))


def adopt(h: Any, n: int, current: Optional[_Token] = None) -> Tuple[List[int], List[_Token]]:
    """(ids, tokens) for the first n ids of the held list h: the first id of
    each segment moves its hold into a new token (one C call), and the other
    holds on that segment are dropped.  tokens[k] is the token of ids[k].
    Ids in the segment of `current` (this thread's token, which holds it
    already) share it: no new token, whose box PyPy's collector counts as a
    segment's worth of memory."""
    ids = held_ids(h, n)
    toks: Dict[int, _Token] = {} if current is None else {current.key: current}
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


# ------------------------------------------------------ the current token
# Every recording call of the cffi front passes the key of its thread's
# current token: the one holding the segment the next node goes to.  The
# current token of one thread (the first to record) sits in this module's
# global _tok, read by every recording call (engine, custom); other threads
# keep theirs in a threading.local and reach it through slow().  Either way
# C checks the key.
_tok: _Token = NOTOKEN
_fast: Optional[int] = None   # that thread's ident


class _FastExit:
    """Lives in the fast thread's threading.local: when that thread ends,
    the global lets go of its token so another thread can take the place.
    (PyPy may run this late, or not at all: slow() also hands the place
    over once C says the fast thread's tape has no thread.)"""
    __slots__ = ("me",)

    def __init__(self, me: int) -> None:
        self.me = me

    def __del__(self) -> None:
        global _tok, _fast
        if _fast == self.me:
            _tok, _fast = NOTOKEN, None


def _let_go_of_an_ended_fast_thread() -> None:
    """If the fast thread has ended without its _FastExit running (PyPy may
    run it late or never; C knows the thread is gone), free its place and
    the segment its token holds."""
    global _tok, _fast
    if _fast is not None and _fast != get_ident() and _orphaned(_tok.box):
        _tok, _fast = NOTOKEN, None


def mine() -> _Token:
    """This thread's current token."""
    return _tok if _fast == get_ident() else getattr(_tl, "tok", NOTOKEN)


def slow(st: int, used: _Token, fn: Callable[..., int], *args: Any) -> Tuple[int, _Token]:
    """Slow path of every recording call `fn(*args, key)`: raise for an error
    status, or (TA_NEEDSEG/NEEDNG) retry with this thread's own current token,
    holding the segment the node goes to first if that token is not it; or
    (TA_ELIMIT, once) retry after reclaim(), as within_limit.  Returns the
    new node's id and the token that holds it."""
    global _tok, _fast
    t = used
    reclaimed = False
    while True:
        if st == _ELIMIT and not reclaimed:
            reclaimed = True
            reclaim()
        elif st != NEEDSEG and st != NEEDNG:
            raise error(st)
        else:
            t = mine()
            if t is used:
                t = hold_current(st)
                me = get_ident()
                _let_go_of_an_ended_fast_thread()
                if _fast is None:
                    _fast = me
                    _tl.fast_exit = _FastExit(me)
                if _fast == me:
                    _tok = t
                    _tl.tok = NOTOKEN   # a token from its slow days must not hold on
                else:
                    _tl.tok = t
        st = fn(*args, t.key)
        if st >= 0:
            return st, t
        used = t


def adopt_here(h: Any, n: int) -> Tuple[List[int], List[_Token]]:
    """adopt() for this thread, whose current token the ids in its segment
    share; the segment of the last id, most likely the current one, becomes
    the fast thread's current token (the next calls share it)."""
    global _tok
    cur = mine()
    ids, toks = adopt(h, n, cur)
    if toks and toks[-1] is not cur and _fast == get_ident():
        _tok = toks[-1]
    return ids, toks


def let_go() -> None:
    """Let this thread's current token go (tapead.collect(): it need not hold
    its segment now); the next recording call takes a new one."""
    global _tok
    if _fast == get_ident():
        _tok = NOTOKEN
    else:
        _tl.tok = NOTOKEN
        _let_go_of_an_ended_fast_thread()


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



def hold_ids(ids: List[int], h: Any) -> None:
    """Put a hold on each existing node of ids into the held list h."""
    check(lib.ta_held_ids(int64s(ids), len(ids), h))


_rebinds = lib.ta_rebinds


class HeldIds:
    """The node ids of some Values as a C array, for C calls made again and
    again across user code (an optimizer's steps, a fused layer's calls).

    Ids carry no generation: once a Value moves to another node
    (v.__init__(x)) and the tape reclaims the old one, its id names
    whatever node takes the slot.  So the nodes are held (a held list):
    the ids never name another Value's node.  And each Value is weakly
    referenced, which makes re-initialising it move the rebind count
    (csrc/api/cdef.h: ta_rebinds); current() compares that count, one C call,
    and takes the ids again from the Values when it has moved, so the
    calls follow the Values, not the nodes they had.  The ids are taken at
    the first current(), in the thread that makes the calls (which may not
    be the one that made this), and raise as ta_held_ids does (TapeError
    for another thread's Value), taking nothing."""
    __slots__ = ("vals", "ids", "_refs", "_gen", "_h")

    def __init__(self, vals: Any) -> None:
        self.vals = vals
        self._refs = [_weakref(v) for v in vals]   # a move from here on counts
        self._gen = -1                              # (the count never is: the first call takes them)
        self.ids = self._h = None

    def _take(self) -> None:
        gen = _rebinds()                            # (before the ids: a move after it shows next time)
        ids = [v._i for v in self.vals]
        h = held_list(max(len(ids), 1))
        check(lib.ta_held_ids(int64s(ids), len(ids), h))
        self._h, self._gen = h, gen
        self.ids = ffi.cast("int64_t *", h) + 1

    def current(self) -> Any:
        """The ids (an int64_t *), taken again from the Values if one may have moved."""
        if self._gen != _rebinds():
            self._take()
        return self.ids


on_limit(stats)
