"""Custom nodes: new ops written micrograd's way, or from their partials.

Two ways to add an op (csrc/custom.c holds the nodes' side table):

* micrograd's idiom, unchanged: ``out = Value(f(x.data), (x,), 'softplus')``
  then ``out._backward = _backward``.  The node's inputs are the children;
  its rule is the Python callable, which backward() calls (one C sweep that
  calls back into Python only at such nodes).  Inside it ``out.grad`` is the
  node's adjoint and ``x.grad += ...`` accumulates into this pass's adjoint
  of x, so micrograd's closures run as they are.
* ``precomputed(value, inputs, partials)``: the value and its local partial
  derivatives as numbers (Stan Math's ``precomputed_gradients``); backward()
  runs it in C, no Python in the sweep.

Neither can be replayed, compiled or differentiated twice: those sweeps run
the tape in C at new points, where a Python rule cannot run and recorded
partials no longer hold; they refuse such a graph, naming the node.

Lifetime.  A node's Python rule lives in this thread's record table until
the node dies on the tape (C puts its key on a dead list; drain() drops the
record).  micrograd's closure captures ``out``, ``self`` and ``other``, and a
Value holds its tape segment, which holds the node itself: a cycle through C
that no collector sees.  So scan() finds the Values that nothing but rules'
closure cells and default arguments refer to (CPython's reference counts
tell: trial deletion over the rules, as a cycle collector does) and puts a
stand-in naming the node there; when the rule runs, a live Value for the node
stands in for the call.  A rule therefore holds its node only while user
code does.  Only Values of the node, of its inputs, or of earlier nodes it
then keeps alive as extra inputs (set_backward) are released so: a stand-in
always names a live node.  (PyPy has no reference counts: there a rule that
captures its own output keeps that node's segment.)
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False   # typing is not imported at run time (see tapead._c)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, SupportsFloat, Tuple

from . import _c
from ._c import OP, OP_KINDS, OP_NAMES
from ._c import custom as _cc
from ._c.holds import collect as _collect
from ._c.status import on_refusal
from .errors import ReleasedError, TapeadError

CUSTOM = OP["CUSTOM"]
_tl = _c._tl
_refcount = getattr(sys, "getrefcount", None)   # None on PyPy: no swapping
_SHIFT = _c.SHIFT
_new = object.__new__

# ------------------------------------------------------------------ names
# A node's name is stored on the tape as a small int; names are few (one
# per kind of op), so they are interned here for the process.
_NAMES: List[str] = []
_NAME_ID: Dict[str, int] = {}


def name_id(op: Any) -> int:
    """The id of an op name ('' or None: unnamed)."""
    s = "" if op is None else op if isinstance(op, str) else str(op)
    i = _NAME_ID.get(s)
    if i is None:
        i = _NAME_ID.setdefault(s, len(_NAMES))
        if i == len(_NAMES):
            _NAMES.append(s)
    return i


def name_of(i: int) -> str:
    return _NAMES[i] if 0 <= i < len(_NAMES) else "?"


# -------------------------------------------------------------- records
class _Rec:
    """A Python rule and the places in it that hold the Values of its own
    node or of its inputs: closure cells, and positions of its default
    arguments (`def _backward(out=out)`); scan() puts stand-ins there."""
    __slots__ = ("fn", "cells", "defs", "stood", "ids")

    def __init__(self, fn: Callable[[], Any], cells: Tuple[Any, ...], defs: Tuple[int, ...]) -> None:
        self.fn = fn
        self.cells = cells
        self.defs = defs
        self.stood: List[Tuple[Any, int, "_Stand"]] = []   # where scan() put stand-ins
        self.ids: List[int] = []                           # their nodes, once each

    def holders(self) -> List[Tuple[Any, int, Any]]:
        """(cell or fn, default index or -1, what it holds now)."""
        out: List[Tuple[Any, int, Any]] = []
        for c in self.cells:
            try:
                out.append((c, -1, c.cell_contents))
            except ValueError:   # emptied since
                pass
        d = getattr(self.fn, "__defaults__", None) or ()
        for k in self.defs:
            if k < len(d):
                out.append((self.fn, k, d[k]))
        return out


def _put(holder: Any, k: int, v: Any) -> None:
    if k < 0:
        holder.cell_contents = v
    else:
        d = list(holder.__defaults__)
        d[k] = v
        holder.__defaults__ = tuple(d)


class _Stand(int):
    """Stands for a Value in a rule's closure between runs (see scan): the
    id of its node (an int, so the native front makes one in C)."""
    __slots__ = ()

    @property
    def node(self) -> int:
        return int(self)

    def __getattr__(self, name: str) -> Any:
        raise ReleasedError("a Value captured by a custom node's _backward is only there while "
                            "the rule runs (inside backward(), or through out._backward())")

    def __repr__(self) -> str:
        return "<tapead: a Value captured by a custom node's rule, released between runs>"


class _State:
    """One thread's records (key -> _Rec), the keys awaiting a scan, and the
    segment tokens and sweeping flag of a running backward()."""
    __slots__ = ("recs", "pending", "next_scan", "toks", "sweeping")

    def __init__(self) -> None:
        self.recs: Dict[int, _Rec] = {}
        self.pending: List[int] = []
        self.next_scan = 64
        self.toks: Dict[int, Any] = {}    # segment key -> token, inside backward() only
        self.sweeping = False             # (set by ta_custom_rule, cleared by swept())


class _PerThread(_c._local):
    """This thread's _State, None until it first needs one (_state).  A
    class default, not a missing attribute: backward() asks after every
    sweep (swept), and a caught AttributeError there cost the cffi front
    ~30 ns a node of the README expression's backward."""
    state: Optional[_State] = None


_pt = _PerThread()


def _state() -> _State:
    S = _pt.state
    if S is None:
        S = _pt.state = _State()
    return S


def _raw_info(v: Any) -> Optional[Tuple[int, int, Tuple[int, ...]]]:
    """(key, name id, input ids) of v's node if it is a custom node, else None
    (the cffi front's; the native front replaces it by _native.custom_info)."""
    return _cc.custom_info(v._i)


def _held_ids(ids: List[int]) -> List[Any]:
    """Values for the nodes of a rule's stand-ins, for one run (the cffi
    front's; the native front's is _native.held).  Inside backward() the
    tokens are shared: one per segment for the whole sweep (_State.toks),
    not a held list, a box and a token per rule run."""
    S = _state()
    toks = S.toks
    V = _engine.PyValue
    out: List[Any] = []
    for i in ids:
        t = toks.get(i >> _SHIFT)
        if t is None:
            out = _engine.held(ids)
            if S.sweeping:
                for v in out:
                    toks.setdefault(v._i >> _SHIFT, v._t)
            return out
        v = _new(V)
        v._i = i
        v._t = t
        out.append(v)
    return out


def swept() -> None:
    """backward() has returned: let go of the tokens its rule runs shared
    (they held segments only the sweep needed; Values a rule kept hold
    their own)."""
    S = _pt.state
    if S is None or not S.sweeping:   # (no rule ran: the common case, kept cheap)
        return
    S.sweeping = False
    if S.toks:
        S.toks = {}


# the native front's C helpers (None on the cffi front)
_native_pre: Optional[Callable[..., Any]] = None
_stand_fast: Optional[Callable[..., List[int]]] = None


# The front this module records through and hands Values out of: tapead.engine,
# which imports this module and attaches itself once its Value is made (so
# this module, below it, imports no front: no import cycle).
_engine: Any = None


def attach(front: Any) -> None:
    """engine's last step: the front custom nodes are Values of."""
    global _engine
    _engine = front


def bind_native(native: Any) -> None:
    """The native front's C versions of the hot helpers (engine._native_front)."""
    global _raw_info, _held_ids, _native_pre, _rule_holders, _stand_fast
    _raw_info, _held_ids, _native_pre = native.custom_info, native.held, native.precomputed
    _rule_holders, _stand_fast = native.rule_holders, native.stand



def info(v: Any) -> Optional[Tuple[Tuple[int, ...], str, int]]:
    """(input ids, name, key) of v's node if it is a custom node, else None."""
    got = _raw_info(v)
    if got is None:
        return None
    return got[2], name_of(got[1]), got[0]


# ------------------------------------------------------------- recording
_custom_rec = _cc.custom_rec


def record(v: Any, data: float, children: Iterable[Any], op: Any) -> None:
    """Value(data, _children, _op) on the cffi front: make v the custom node.

    As an op is: one C call into the segment of this thread's current token
    (engine._rec2), no cffi objects made per node."""
    E = _engine
    kids = children if type(children) is tuple else tuple(children)
    nm = _NAME_ID.get(op) if type(op) is str else None
    if nm is None:
        nm = name_id(op)
    t = E._tok
    Value = E.Value
    i = _custom_rec(kids, data, None, nm, Value, _NOT_A_CHILD, t.key)
    if i < 0:   # another segment, the node limit, an error: as every op (engine._slow)
        w = E._slow(i, t, _custom_rec, kids, data, None, nm, Value, _NOT_A_CHILD)
        i, t = w._i, w._t
    v._i = i
    v._t = t


_NOT_A_CHILD = "Value(data, _children, _op): each child must be a Value"


def precomputed(value: SupportsFloat, inputs: Iterable[Any], partials: Iterable[SupportsFloat],
                name: str = "precomputed") -> Any:
    """A new op from its value and local partials: a node whose backward adds partials[k] * grad to inputs[k].

    The fast way to add an op: the rule is numbers, so backward() runs it in
    C with no Python call.  It cannot be replayed or differentiated twice
    (recompute, compile, jvp, grad, hvp, hessian refuse it, naming it): its
    partials hold only at the point it was recorded.

    >>> import math, tapead
    >>> x, y = tapead.Value(3.0), tapead.Value(4.0)
    >>> r = math.hypot(x.data, y.data)
    >>> h = tapead.precomputed(r, [x, y], [x.data / r, y.data / r], name="hypot")
    >>> (h * 2).backward(); (h.data, h._op, x.grad, y.grad)
    (5.0, 'hypot', 1.2, 1.6)
    """
    x = value if type(value) is float else _engine._real(value)
    try:
        vals = [inputs] if isinstance(inputs, _engine.Value) else list(inputs)
    except TypeError:
        raise TypeError(f"precomputed inputs must be a Value or an iterable of Values, "
                        f"not {type(inputs).__name__}") from None
    try:
        ps = partials if type(partials) is list or type(partials) is tuple else list(partials)
    except TypeError:
        raise TypeError("precomputed partials must be real numbers, one per input") from None
    n = len(vals)
    if len(ps) != n:
        raise ValueError(f"precomputed needs one partial per input: {n} inputs, {len(ps)} partials")
    if not isinstance(name, str):
        raise TypeError(f"precomputed name must be a str, not {type(name).__name__}")
    if n > 2:               # (no loop for one or two: see _c.custom.custom_rec)
        ps = [_partial(p) for p in ps]
    elif n == 2:
        ps = [_partial(ps[0]), _partial(ps[1])]
    elif n:
        ps = [_partial(ps[0])]
    if _native_pre is not None:
        return _native_pre(x, vals, list(ps), name_id(name))
    E = _engine
    nm = name_id(name)
    t = E._tok              # as record(): one C call, into the current token's segment
    i = _custom_rec(vals, x, ps, nm, E.Value, _NOT_AN_INPUT, t.key)
    if i < 0:
        return E._slow(i, t, _custom_rec, vals, x, ps, nm, E.Value, _NOT_AN_INPUT)
    out = _new(E.PyValue)
    out._i = i
    out._t = t
    return out


_NOT_AN_INPUT = "precomputed inputs must be Values"


def _partial(p: Any) -> float:
    if type(p) is float:
        return p
    try:
        x: float = _engine._real(p)
    except TypeError:
        raise TypeError("precomputed partials must be real numbers, one per input") from None
    return x


# --------------------------------------------------------- the _backward
_rule_set = _cc.rule_set


def _rule_holders(v: Any, fn: Any) -> Optional[Tuple[int, Tuple[Any, ...], Tuple[int, ...]]]:
    """None if v's node is not a custom node; else (key, cells, defaults):
    fn's closure cells and default positions that hold a Value of the node
    or of its inputs.  Earlier Values it holds besides those are kept alive
    with the node, so a stand-in for them always names a live node: one C
    call (ta_custom_rule_set) does both.  (The native front does this in C:
    _native.rule_holders.)"""
    V = _engine.Value
    cells: List[Any] = []
    defs: List[int] = []
    ids: List[int] = []
    if _refcount is not None and callable(fn):   # (PyPy: no stand-ins, nothing to find)
        for c in getattr(fn, "__closure__", None) or ():
            try:
                x = c.cell_contents
            except ValueError:   # an empty cell
                continue
            if isinstance(x, V):
                cells.append(c)
                ids.append(x._i)
        d = getattr(fn, "__defaults__", None)
        if d:
            try:
                fn.__defaults__ = d    # only where a function's defaults can be replaced
            except (AttributeError, TypeError):
                d = ()
            for k, x in enumerate(d):
                if isinstance(x, V):
                    defs.append(k)
                    ids.append(x._i)
    n = len(ids)
    got = _rule_set(v._i, ids)
    if got is None:
        return None
    key, ok = got
    if key == 0:
        return 0, (), ()
    if not callable(fn):
        raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
    if not all(ok):   # later nodes, other threads', no_grad values: left alone
        nc = len(cells)
        cells = [c for j, c in enumerate(cells) if ok[j]]
        defs = [d for j, d in enumerate(defs) if ok[nc + j]]
    return key, tuple(cells), tuple(defs)


def set_backward(v: Any, fn: Any) -> None:
    """out._backward = fn: the rule of a custom node (micrograd's idiom)."""
    got = _rule_holders(v, fn)
    if got is None:
        op = _engine._node(v)[0]
        if not callable(fn):
            raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
        if OP_KINDS[op] == 0:
            return   # a leaf (or a no_grad value): no inputs to propagate to
        raise AttributeError(f"the _backward of a built-in op ({OP_NAMES[op]!r}) is tapead's "
                             f"own (C) rule and cannot be replaced; to define a new op, make its "
                             f"node with Value(data, _children, _op) and set that node's _backward")
    key, cells, defs = got
    if key == 0:
        raise AttributeError("a node made by tapead.precomputed differentiates by its partials; "
                             "its _backward cannot be replaced")
    S = _state()
    S.recs[key] = _Rec(fn, cells, defs)
    if cells or defs:
        S.pending.append(key)
        if len(S.pending) >= S.next_scan:
            scan(S)


def backward_of(v: Any) -> Callable[[], None]:
    """v._backward: this node's own local chain-rule step, as a callable."""
    got = _raw_info(v)
    if got is None or got[0] == 0:
        return lambda: _step(v)
    key = got[0]
    return lambda: _run(key, v._i)   # (holds v: the node and its inputs stay alive for it)


def _step(v: Any) -> None:
    _cc.step(v._i)


def _run(key: int, node: int) -> None:
    """Run the rule of custom node `node`, with Values standing where scan()
    released them."""
    rec = _state().recs.get(key)
    if rec is None:
        return
    stood = rec.stood
    if not stood:
        rec.fn()
        return
    ids = rec.ids
    hv = _held_ids(ids)
    if len(ids) == 1:
        v0 = hv[0]
        for h, k, x in stood:
            if k < 0:
                h.cell_contents = v0
            else:
                _put(h, k, v0)
    else:
        where = ids.index   # (a stand-in is its node's id: an int; ids are few)
        for h, k, x in stood:
            if k < 0:
                h.cell_contents = hv[where(x)]
            else:
                _put(h, k, hv[where(x)])
    try:
        rec.fn()
    finally:
        for h, k, x in stood:
            if k < 0:
                h.cell_contents = x
            else:
                _put(h, k, x)


@_cc.on_custom_rule
def ta_custom_rule(node: int, key: int) -> int:
    """Called by the C sweep at a node with a Python rule (csrc/sweep.c)."""
    try:
        _state().sweeping = True   # (backward() calls swept() when it returns)
        _run(key, node)
    except BaseException as e:   # KeyboardInterrupt too: backward() re-raises it
        _tl.custom_exc = e
        return -1
    return 0


# ------------------------------------------------------------- lifetime
def scan(S: Optional[_State] = None) -> None:
    """Release the Values that only rules' closures hold, then drain().

    A rule holds Values of its node and inputs (micrograd's closure holds
    out, self, other); a Value holds its tape segment, and so the node
    itself: a cycle through C.  Here each such Value that nothing but
    pending rules refers to (CPython's reference counts tell: trial deletion
    over the rules, as a cycle collector does) is replaced in them by a
    stand-in naming its node; _run puts a live Value back for each run.  A
    cell is touched only if nothing but those rules' closures holds it (a
    frame still running sees its variables unchanged)."""
    S = S or _state()
    rc = _refcount
    if rc is None:
        S.pending = []
        drain(S)
        return
    recs = S.recs
    if _stand_fast is not None:
        slow = _stand_fast(recs, S.pending, _Stand)
        left = S.pending
    else:
        slow = left = _stand_py(S)   # (the others are fully stood)
    _scan_shared(S, slow)
    keep = [k for k in left
            if k in recs and len(recs[k].stood) < len(recs[k].cells) + len(recs[k].defs)]
    S.pending = keep
    S.next_scan = 2 * len(keep) + 64
    drain(S)



def _stand_py(S: _State) -> List[int]:
    """scan()'s common case (_native.stand on the native front); returns the
    keys of rules holding anything else, or not yet fully stood (empty
    cells): every other pending rule is fully stood."""
    rc = _refcount
    assert rc is not None
    recs = S.recs
    Stand = _Stand
    slow = []
    x: Any = None
    for key in S.pending:
        # the common case first: a cell only this rule's closure holds, and in
        # it a Value only that cell holds (refs: the closure's tuple,
        # rec.cells, c, getrefcount's argument; the cell, x, the argument)
        rec = recs.get(key)
        if rec is None:
            continue
        rest = False
        for c in rec.cells:
            try:
                x = c.cell_contents
            except ValueError:
                continue
            if type(x) is Stand:
                continue
            if rc(c) == 4 and rc(x) == 3:
                i = x._i
                st = Stand(i)
                c.cell_contents = st
                rec.stood.append((c, -1, st))
                ids = rec.ids
                if i not in ids:   # (the int, not st.node: a property call costs more)
                    ids.append(i)
            else:
                rest = True
            x = None
        if rest or rec.defs or len(rec.stood) < len(rec.cells):
            slow.append(key)     # (every other one is fully stood: scan() drops it)
    c = None
    return slow


def _scan_shared(S: _State, pending: List[int]) -> None:
    """scan() for Values held in several places (shared cells, defaults,
    several rules): trial deletion over all of those rules at once."""
    rc = _refcount
    assert rc is not None
    cells: Dict[int, List[Any]] = {}     # id(cell) -> [cell, records listing it, fns]
    e: Any
    o: Any
    objs: Dict[int, List[Any]] = {}      # id(Value) -> [Value, holders, [(holder, k), ...]]
    for key in pending:
        rec = S.recs.get(key)
        if rec is None:
            continue
        for h, k, x in rec.holders():
            if type(x) is _Stand:
                continue
            if k < 0:
                e = cells.get(id(h))
                if e is None:
                    cells[id(h)] = [h, 1, {id(rec.fn)}, x, [rec]]
                else:
                    e[1] += 1
                    e[2].add(id(rec.fn))
                    e[4].append(rec)
                continue
            o = objs.setdefault(id(x), [x, 0, []])
            o[1] += 1
            o[2].append((h, k, [rec]))
        h = x = None
    for e in cells.values():
        # the cell: closures' tuples, the records' tuples, e, getrefcount's argument
        ok = rc(e[0]) == len(e[2]) + e[1] + 2
        o = objs.setdefault(id(e[3]), [e[3], 0, []])
        if ok:
            o[1] += 1
            o[2].append((e[0], -1, e[4]))
        else:
            o[1] -= 1 << 20          # held by something else: leave it
        e[3] = None
    e = o = None
    for o in objs.values():
        # the Value: its holders, o, getrefcount's argument
        if o[1] > 0 and rc(o[0]) == o[1] + 2:
            st = _Stand(o[0]._i)
            for h, k, recs in o[2]:
                _put(h, k, st)
                for r in recs:
                    r.stood.append((h, k, st))
                    if st.node not in r.ids:
                        r.ids.append(st.node)
    objs.clear()
    cells.clear()


def drain(S: Optional[_State] = None) -> int:
    """Drop the rules of custom nodes the tape has reclaimed; returns how many."""
    S = S or _state()
    total = 0
    while True:
        keys = _cc.custom_dead()
        if not keys:
            return total
        pop = S.recs.pop
        for k in keys:   # (one list: no cdata indexing per key)
            pop(k, None)
        total += len(keys)


def settle() -> int:
    """What collect() adds for custom nodes: scan, collect and drain until
    nothing more dies; returns the segments freed."""
    S = _pt.state
    freed = 0
    while S is not None and S.recs:
        scan(S)                  # (drains what the last collection killed)
        n = _collect()
        freed += n
        if not drain(S) and not n:
            break
    return freed


# -------------------------------------------------------------- errors
def refusal(why: str) -> Exception:
    """The exception for a refusal of C's (_c.status.error): "python" (TA_EPYTHON:
    a rule raised), "busy" (TA_EBUSY) or "custom" (TA_ECUSTOM)."""
    if why == "python":
        e = getattr(_tl, "custom_exc", None)
        _tl.custom_exc = None
        return e if e is not None else TapeadError("a custom node's _backward raised")
    if why == "busy":
        return TapeadError("this cannot run inside a custom node's _backward while backward() "
                           "is running (it would disturb the sweep); call it after backward() "
                           "returns")
    got = _cc.custom_failed()
    nm = name_of(got[1]) if got is not None else "?"
    if got is not None and got[0] == 0:
        what = (f"the custom node {nm!r} (made by tapead.precomputed) carries only its value "
                f"and partials at the point it was recorded")
    else:
        what = (f"the custom node {nm!r} (made by Value(data, _children, _op)) is "
                f"differentiated by its Python _backward")
    return TapeadError(
        f"{what}: recompute, compile, jvp, wengert, grad, hvp, hessian and jacobian run the "
        f"tape in C at other points or to higher order, which such a node cannot do "
        f"(backward() can). Write {nm!r} with tapead's built-in ops instead (for example "
        f"softplus as x.exp().log1p(), cube as x**3): each carries its own rule")



on_refusal(refusal)
