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
  runs it in C, no Python in the sweep.  microgpt's idiom,
  ``Value(t, (x,), (1 - t**2,))`` (or ``local_grads=``), records the same
  node (grads_value); any other third argument is a TypeError.

Neither can be replayed, compiled or differentiated twice: those sweeps run
the tape in C at new points, where a Python rule cannot run and recorded
partials no longer hold; they refuse such a graph, naming the node.

Lifetime.  A node's Python rule lives in this thread's record table until
the node dies on the tape (C puts its key on a dead list; drain() drops the
record).  micrograd's closure captures ``out``, ``self`` and ``other``, and a
Value holds its tape segment, which holds the node itself: a rule keeping
them would be a cycle through C that no collector sees.  So the rule kept
is a private copy of the function (rule_private): each closure cell or
default argument that holds a Value of the node, of its inputs or of an
earlier node (which the node then keeps alive as an extra input) is, in the
copy, a new cell that holds no segment; the other cells are shared.  The
function the user wrote, and the frame that defined it, keep their own
cells and Values.  The rule thus holds no Value of its node's graph, on any
Python: its node lives while the tape needs it and no longer.  (What a rule
holds otherwise -- a later node's Value, a list of Values -- it holds as
micrograd's would.)

What the new cells hold differs by front, for speed.  The cffi front: a
rule Value, one of its own Values for the node that holds no segment and
whose id is RELEASED_ID (C refuses it, naming the cause) except while the
rule runs, when it is the node's (_run): no cell is written per run, which
PyPy's JIT makes costly.  The native front: RELEASED, replaced for each run
by a new Value of the node, as a native Value always holds its segment
(native.run_stood binds, runs and releases in one C call: no Ctrl-C can
leave a place bound).  A run needs no hold: the node and its inputs are
alive while it runs (the sweep holds the collector off; out._backward()
holds out).  A rule may run its own step inside itself: only the
outermost run binds and releases (_Rec.runs).
"""
from __future__ import annotations

TYPE_CHECKING = False   # typing is not imported at run time (see tapead._c)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, SupportsFloat, Tuple

from . import _c
from ._c import OP, OP_KINDS, OP_NAMES
from ._c import custom as _cc
from ._c import holds as _holds
from ._c.holds import NOTOKEN as _NOTOKEN, collect as _collect
from ._c.status import error, on_refusal
from .errors import AnomalyError, TapeadError

CUSTOM = OP["CUSTOM"]
_tl = _c._tl
_SHIFT = _c.SHIFT
_new = object.__new__

# ------------------------------------------------------------------ names
# A node's name lives in C with the node (csrc/custom.c) and dies with it.
name_bytes = _cc.name_bytes


# -------------------------------------------------------------- records
class _Rec:
    """A Python rule (rule_private's copy) and where its released Values
    are.  The cffi front: `vals` is (Value, node, Value, node, ...), the
    rule Values its private cells and defaults hold, each for one node.
    The native front: `stood` lists (private cell or the copy, default
    index or -1, node), places holding RELEASED, and `ids` their nodes.
    `runs`: how many runs are under way (only the outermost binds and
    releases)."""
    __slots__ = ("fn", "vals", "stood", "ids", "runs")

    def __init__(self, fn: Callable[[], Any], vals: Optional[Tuple[Any, ...]],
                 stood: Sequence[Tuple[Any, int, int]] = (), ids: Sequence[int] = ()) -> None:
        self.fn = fn
        self.vals = vals
        self.stood = stood
        self.ids = ids
        self.runs = 0        # runs under way (a rule may run its own step: micrograd allows it)

    def released(self) -> int:
        """How many nodes' Values the rule holds only while it runs."""
        return len(self.vals) // 2 if self.vals else len(self.ids)


class _Released:
    """What a rule's private cells (and defaults) hold between runs on the
    native front, where its closure held a Value of the node's graph (see
    the top): one object for all of them; each run puts live Values there."""
    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise error(RELEASED_ID)      # ReleasedError, with the status table's words

    def __repr__(self) -> str:
        return "<tapead: a Value captured by a custom node's rule, released between runs>"


RELEASED = _Released()
RELEASED_ID = _cc.RELEASED_ID   # the node of a rule Value between runs


def _rule_value() -> Any:
    """A rule Value (the cffi front's; see the top): one of the front's own
    Values, holding no segment, whose node is RELEASED_ID except while its
    rule runs."""
    v = _new(_engine.PyValue)
    v._i = RELEASED_ID
    v._t = _NOTOKEN
    return v


class _State:
    """One thread's records (key -> _Rec)."""
    __slots__ = ("recs", "made")

    def __init__(self) -> None:
        self.recs: Dict[int, _Rec] = {}
        self.made = 0                     # records made since the last drain()


class _PerThread(_c._local):
    """This thread's _State, None until it first needs one (_state): a class
    default, not a missing attribute (a caught AttributeError costs more)."""
    state: Optional[_State] = None


_pt = _PerThread()


def _state() -> _State:
    S = _pt.state
    if S is None:
        S = _pt.state = _State()
    return S


def _raw_info(v: Any) -> Optional[Tuple[int, str, Tuple[int, ...]]]:
    """(key, name, input ids) of v's node if it is a custom node, else None
    (the cffi front's; the native front replaces it by _native.custom_info)."""
    return _cc.custom_info(v._i)


# the native front's C helpers (None on the cffi front)
_native_pre: Optional[Callable[..., Any]] = None
_native: Any = None


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
    global _raw_info, _native_pre, _rule_private, _native
    _raw_info, _native_pre = native.custom_info, native.precomputed
    _rule_private, _native = _native_rule_private, native



def info(v: Any) -> Optional[Tuple[Tuple[int, ...], str, int]]:
    """(input ids, name, key) of v's node if it is a custom node, else None."""
    got = _raw_info(v)
    if got is None:
        return None
    return got[2], got[1], got[0]


# ------------------------------------------------------------- recording
_custom_rec = _cc.custom_rec


def record(v: Any, data: float, children: Iterable[Any], op: Any, local_grads: Any = None) -> None:
    """Value(data, _children, _op) on the cffi front: make v the custom node.

    As an op is: one C call into the segment of this thread's current token
    (engine._rec2), no cffi objects made per node.  A third argument that
    is no name, or local_grads: grads_value's node, which v takes over."""
    E = _engine
    if local_grads is not None or (type(op) is not str and op is not None):
        w = grads_value(data, children, op, local_grads)
        v._i = w._i
        v._t = w._t
        return
    kids = children if type(children) is tuple else tuple(children)
    nm = name_bytes(op)
    t = _holds._tok
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
    (recompute, compile, jvp, grad, hvp, hessian, jacobian and wengert
    refuse it, naming it): its
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
    if not isinstance(name, str):
        raise TypeError(f"precomputed name must be a str, not {type(name).__name__}")
    return _with_partials(x, vals, ps, name, _PRE_WORDS)


# What _with_partials says when its caller is precomputed(...) / Value(data, children, local_grads)
_PRE_WORDS = ("precomputed needs one partial per input: {n} inputs, {m} partials",
              "precomputed partials must be real numbers, one per input",
              "precomputed inputs must be Values")
_LG_WORDS = ("Value(data, children, local_grads) needs one local gradient per child: "
             "{n} children, {m} local_grads",
             "Value(data, children, local_grads): local_grads must be real numbers, one per child",
             "Value(data, children, local_grads): each child must be a Value")


def _with_partials(x: float, vals: List[Any], ps: Sequence[Any], name: str,
                   words: Tuple[str, str, str]) -> Any:
    """A new Value: a node of value x whose inputs are the Values vals and
    whose local partials are ps (numbers, one per input), named name; what
    precomputed and Value(data, children, local_grads) record.  words: the
    errors' wording for the caller."""
    n = len(vals)
    if len(ps) != n:
        raise ValueError(words[0].format(n=n, m=len(ps)))
    if n > 2:               # (no loop for one or two: see _c.custom.custom_rec)
        ps = [_partial(p, words[1]) for p in ps]
    elif n == 2:
        ps = [_partial(ps[0], words[1]), _partial(ps[1], words[1])]
    elif n:
        ps = [_partial(ps[0], words[1])]
    if _native_pre is not None:
        if words is not _PRE_WORDS:   # (the native call checks too, in precomputed's words)
            for c in vals:
                if not isinstance(c, _engine.Value):
                    raise TypeError(f"{words[2]}, not {type(c).__name__}")
        return _native_pre(x, vals, list(ps), name)
    E = _engine
    nm = name_bytes(name)
    t = _holds._tok         # as record(): one C call, into the current token's segment
    i = _custom_rec(vals, x, ps, nm, E.Value, words[2], t.key)
    if i < 0:
        return E._slow(i, t, _custom_rec, vals, x, ps, nm, E.Value, words[2])
    out = _new(E.PyValue)
    out._i = i
    out._t = t
    return out


def _partial(p: Any, what: str) -> float:
    if type(p) is float:
        return p
    try:
        x: float = _engine._real(p)
    except TypeError:
        raise TypeError(f"{what}, not {type(p).__name__}") from None
    return x


_THIRD = ("Value(data, children, x): x must be the op's name (a str, micrograd's _op) or the "
          "local gradients (a sequence of real numbers, one per child: microgpt's local_grads), "
          "not {t}")


def grads_value(data: float, children: Any, op: Any, local_grads: Any) -> Any:
    """What Value(data, children, local_grads) and Value(data, children,
    local_grads=...) make (data already a float): a new Value whose node
    has these local partials, recorded as precomputed records (no Python
    in the sweep); or a plain leaf if there are no children.  op: the third
    argument (local_grads there, or the name if local_grads is given by
    keyword).  Both fronts' __init__ take over the returned Value's node."""
    if local_grads is None:
        grads, name = op, ""
    else:
        if op is not None and not isinstance(op, str):
            raise TypeError("Value() got local_grads twice: as its third argument and as a keyword")
        grads, name = local_grads, op or ""
    if isinstance(grads, (str, bytes, set, frozenset, dict)):
        raise TypeError(_THIRD.format(t=type(grads).__name__))
    try:
        ps = grads if type(grads) is list or type(grads) is tuple else list(grads)
    except TypeError:
        raise TypeError(_THIRD.format(t=type(grads).__name__)) from None
    if isinstance(children, (set, frozenset)) and len(children) > 1:
        raise TypeError("Value(data, children, local_grads): children must be in an order "
                        "(a tuple or list), the order of local_grads, not a set")
    try:
        vals = list(children) if children else []
    except TypeError:
        raise TypeError(f"Value(data, children, local_grads): children must be an iterable of "
                        f"Values, not {type(children).__name__}") from None
    if not vals and not ps:
        return _engine.Value(data)
    return _with_partials(data, vals, ps, name, _LG_WORDS)


# --------------------------------------------------------- the _backward
_rule_set, _rule_set3 = _cc.rule_set, _cc.rule_set3


def _a_cell(x: Any) -> Any:
    return (lambda: x).__closure__[0]  # type: ignore[index]


_Function: Any = type(_a_cell)   # types.FunctionType and types.CellType, without importing types
_Cell: Any = type(_a_cell(None))


def _rule_private(v: Any, fn: Any) -> Optional[Tuple[int, Optional[_Rec]]]:
    """None if v's node is not a custom node; (0, None) for a node with
    partials; else (key, record): the rule to keep, fn or a private copy of
    it (see the top), and its rule Values.  One C call
    (ta_custom_rule_set) says which Values the rule may release and keeps
    the earlier ones alive with the node.  (The native front's is
    _native_rule_private.)

    The common rule, a closure of up to three cells and no defaults (out,
    self, other), takes a path with no loop: PyPy's JIT does not inline a
    function that has one, and the call it makes instead costs more than
    the work (see _c.custom.custom_rec)."""
    if type(fn) is _Function and not fn.__defaults__:
        cl = fn.__closure__
        n = len(cl) if cl else 0
        if n <= 3:
            V = _engine.Value
            x0: Any = _cell_value(cl[0], V) if n else None
            x1: Any = _cell_value(cl[1], V) if n > 1 else None
            x2: Any = _cell_value(cl[2], V) if n > 2 else None
            got = _rule_set3(v._i, x0, x1, x2)
            if got is None:
                return None
            key, ok = got
            if key == 0 or not ok:
                return key, (None if key == 0 else _Rec(fn, None))
            i0 = x0._i if ok & 1 else -1
            i1 = x1._i if ok & 2 else -1
            i2 = x2._i if ok & 4 else -1
            r0 = _rule_value() if i0 >= 0 else None
            r1 = None if i1 < 0 else r0 if i1 == i0 else _rule_value()
            r2 = None if i2 < 0 else r0 if i2 == i0 else r1 if i2 == i1 else _rule_value()
            c0 = _Cell(r0) if r0 is not None else cl[0] if n else None
            c1 = _Cell(r1) if r1 is not None else cl[1] if n > 1 else None
            c2 = _Cell(r2) if r2 is not None else cl[2] if n > 2 else None
            g = _copy(fn, None, (c0,) if n == 1 else (c0, c1) if n == 2 else (c0, c1, c2))
            vals: Tuple[Any, ...] = (r0, i0) if r0 is not None else ()
            if r1 is not None and r1 is not r0:
                vals += (r1, i1)
            if r2 is not None and r2 is not r0 and r2 is not r1:
                vals += (r2, i2)
            return key, _Rec(g, vals)
    return _rule_private_any(v, fn)


def _copy(fn: Any, defaults: Optional[Tuple[Any, ...]], closure: Optional[Tuple[Any, ...]]) -> Any:
    """fn with these defaults and closure cells: the private copy."""
    g = _Function(fn.__code__, fn.__globals__, fn.__name__, defaults, closure)
    g.__qualname__ = fn.__qualname__
    if fn.__kwdefaults__:
        g.__kwdefaults__ = fn.__kwdefaults__
    return g


def _cell_value(c: Any, V: type) -> Any:
    """The Value cell c holds, or None."""
    try:
        x = c.cell_contents
    except ValueError:   # an empty cell
        return None
    return x if isinstance(x, V) else None


def _rule_private_any(v: Any, fn: Any) -> Optional[Tuple[int, Optional[_Rec]]]:
    """_rule_private for any rule."""
    V = _engine.Value
    cells: List[int] = []     # closure positions
    defs: List[int] = []      # default positions
    ids: List[int] = []
    cl = d = None
    if type(fn) is _Function:
        cl = fn.__closure__
        if cl:
            for k, c in enumerate(cl):
                x = _cell_value(c, V)
                if x is not None:
                    cells.append(k)
                    ids.append(x._i)
        d = fn.__defaults__
        if d:
            for k, x in enumerate(d):
                if isinstance(x, V):
                    defs.append(k)
                    ids.append(x._i)
    got = _rule_set(v._i, ids)
    if got is None:
        return None
    key, ok = got
    if key == 0:
        return 0, None
    if not callable(fn):
        raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
    if not any(ok):          # later nodes, other threads', no_grad values: left as they are
        return key, _Rec(fn, None)
    cl2 = list(cl) if cl else []
    d2 = list(d) if d else []
    made: Dict[int, Any] = {}   # node -> its rule Value
    for j, i in enumerate(ids):
        if ok[j]:
            r = made.get(i)
            if r is None:
                r = made[i] = _rule_value()
            if j < len(cells):
                cl2[cells[j]] = _Cell(r)
            else:
                d2[defs[j - len(cells)]] = r
    g = _copy(fn, tuple(d2) if d else None, tuple(cl2) if cl else None)
    vals: Tuple[Any, ...] = ()
    for i, r in made.items():
        vals += (r, i)
    return key, _Rec(g, vals)


def _native_rule_private(v: Any, fn: Any) -> Optional[Tuple[int, Optional[_Rec]]]:
    """_rule_private on the native front: the copy is made in C."""
    got = _native.rule_private(v, fn, RELEASED)
    if got is None:
        return None
    key, rule, stood, ids = got
    return key, (None if key == 0 else _Rec(rule, None, stood, ids))


def set_backward(v: Any, fn: Any) -> None:
    """out._backward = fn: the rule of a custom node (micrograd's idiom)."""
    got = _rule_private(v, fn)
    if got is None:
        op = _engine._node(v)[0]
        if not callable(fn):
            raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
        if OP_KINDS[op] == 0:
            return   # a leaf (or a no_grad value): no inputs to propagate to
        raise AttributeError(f"the _backward of a built-in op ({OP_NAMES[op]!r}) is tapead's "
                             f"own (C) rule and cannot be replaced; to define a new op, make its "
                             f"node with Value(data, _children, _op) and set that node's _backward")
    key, rec = got
    if rec is None:
        raise AttributeError("a node made by tapead.precomputed differentiates by its partials; "
                             "its _backward cannot be replaced")
    S = _state()
    S.recs[key] = rec
    S.made += 1
    if S.made >= 64:     # now and then, drop the records of nodes the tape has reclaimed
        S.made = 0
        drain(S)


def backward_of(v: Any) -> Callable[[], None]:
    """v._backward: this node's own local chain-rule step, as a callable."""
    got = _raw_info(v)
    if got is None or got[0] == 0:
        return lambda: _step(v)
    return lambda: _run_own(v)       # (holds v: the node and its inputs stay alive for it)


def _run_own(v: Any) -> None:
    """out._backward(): the rule of v's custom node, looked up again in the
    calling thread (keys are per tape: another thread's Value raises
    TapeError, as a built-in node's step does, never runs another node's)."""
    got = _raw_info(v)
    if got is not None and got[0]:
        _run(got[0], v._i)


def _step(v: Any) -> None:
    _cc.step(v._i)


def _run(key: int, node: int) -> None:
    """Run the rule of custom node `node`, its released Values live for the
    run: the cffi front's rule Values get their nodes back (then
    RELEASED_ID again), the native front's cells get new Values."""
    rec = _state().recs.get(key)
    if rec is None:
        return
    p = rec.vals
    if rec.runs or not (p or rec.stood):
        _run_again(rec)          # (its Values are in place: this is a run inside its own run)
        return
    if p:
        if len(p) == 2:          # (no loop: see _rule_private)
            v0 = p[0]
            try:                 # (bound inside: a Ctrl-C right after still unbinds)
                rec.runs = 1
                v0._i = p[1]
                rec.fn()
            finally:
                v0._i = RELEASED_ID
                rec.runs = 0
            return
        if len(p) == 4:
            v0 = p[0]
            v1 = p[2]
            try:
                rec.runs = 1
                v0._i = p[1]
                v1._i = p[3]
                rec.fn()
            finally:
                v0._i = RELEASED_ID
                v1._i = RELEASED_ID
                rec.runs = 0
            return
        _run_vals(rec)
    else:
        _run_stood(rec)


def _run_again(rec: _Rec) -> None:
    """Run a rule that is running already (it ran its own node's step, as
    micrograd allows) or that released nothing: as it is, counted, so that
    only the outermost run puts its Values back."""
    n = rec.runs
    try:
        rec.runs = n + 1
        rec.fn()
    finally:
        rec.runs = n


def _run_vals(rec: _Rec) -> None:
    """_run for a rule of the cffi front with any number of rule Values."""
    p = rec.vals
    assert p is not None
    try:
        rec.runs = 1
        for k in range(0, len(p), 2):
            p[k]._i = p[k + 1]
        rec.fn()
    finally:
        for k in range(0, len(p), 2):
            p[k]._i = RELEASED_ID
        rec.runs = 0


def _run_stood(rec: _Rec) -> None:
    """_run for a rule of the native front: a new Value in each place that
    holds RELEASED, for the run, in one C call (native.run_stood: no Ctrl-C
    can land between binding and releasing)."""
    _native.run_stood(rec, RELEASED)


def ta_custom_rule(node: int, key: int) -> int:
    """Called by the C sweep at a node with a Python rule (csrc/sweep.c)."""
    try:
        _run(key, node)
    except BaseException as e:   # KeyboardInterrupt too: backward() re-raises it
        _tl.custom_exc = e
        return -1
    return 0


def _escaped(tp: Any, e: Any, tb: Any) -> None:
    """An exception that escaped ta_custom_rule's try (a Ctrl-C between two
    of its bytecodes): kept for backward() to raise, as the rule's own."""
    _tl.custom_exc = e


_cc.on_custom_rule(ta_custom_rule, _escaped)


# ------------------------------------------------------------- lifetime
def drain(S: Optional[_State] = None) -> int:
    """Drop the rules of custom nodes the tape has reclaimed; returns how many."""
    S = S or _state()
    total = done = 0
    while True:
        keys = _cc.custom_dead(done)   # (C forgets keys only once their records are gone)
        if not keys:
            return total
        pop = S.recs.pop
        for k in keys:   # (one list: no cdata indexing per key)
            pop(k, None)
        done = len(keys)
        total += done


def settle() -> int:
    """What collect() adds for custom nodes: drain, collect and drain until
    nothing more dies (a rule dropped may let go of what it held); returns
    the segments freed."""
    S = _pt.state
    freed = 0
    while S is not None and S.recs:
        drain(S)
        n = _collect()
        freed += n
        if not drain(S) and not n:
            break
    return freed


# -------------------------------------------------------------- errors
def refusal(why: str) -> Exception:
    """The exception for a refusal of C's (_c.status.error): "python" (TA_EPYTHON:
    a rule raised), "busy" (TA_EBUSY), "custom" (TA_ECUSTOM) or "anomaly"
    (TA_EANOMALY at a custom node)."""
    if why == "python":
        e = getattr(_tl, "custom_exc", None)
        _tl.custom_exc = None
        return e if e is not None else TapeadError("a custom node's _backward raised")
    if why == "anomaly":
        got = _cc.custom_failed()
        nm = got[1] if got is not None else "?"
        how = ("its rule made a gradient nan" if got is not None and got[0] else
               "its partial times the gradient arriving there became nan")
        return AnomalyError(f"detect_anomaly: in backward(), the custom node {nm!r}: {how}")
    if why == "busy":
        return TapeadError("this cannot run inside a custom node's _backward while backward() "
                           "is running (it would disturb the sweep); call it after backward() "
                           "returns")
    got = _cc.custom_failed()
    nm = got[1] if got is not None else "?"
    if got is not None and got[0] == 0:
        what = (f"the custom node {nm!r} (made by tapead.precomputed or Value(data, children, "
                f"local_grads)) carries only its value and partials at the point it was recorded")
    else:
        what = (f"the custom node {nm!r} (made by Value(data, _children, _op)) is "
                f"differentiated by its Python _backward")
    return TapeadError(
        f"{what}: recompute, compile, jvp, wengert, grad, hvp, hessian and jacobian run the "
        f"tape in C at other points or to higher order, which such a node cannot do "
        f"(backward() can). Write {nm!r} with tapead's built-in ops instead (for example "
        f"softplus as x.exp().log1p(), cube as x**3): each carries its own rule")



on_refusal(refusal)
