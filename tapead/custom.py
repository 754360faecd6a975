"""Custom nodes: new ops written micrograd's way, or from their partials.

Two ways to add an op (csrc/custom/custom.c holds the nodes' side table):

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

Lifetime: the cycle is one the collector sees.  A rule closes over
Values of its own graph (micrograd's ``out``, ``self``, ``other``), and
those Values hold their tape segments, so a rule kept by C would be a cycle
through C that no collector sees.  Instead the rule lives in a small Python
object, the node's *owner* (_Node), made when the node is recorded, and
every Value whose node depends on the custom node references it: a Value
carries ``_o``, the join of what its operands carry (join: nothing for a
graph without custom nodes, the one object if only one operand has one, a
pair where two different ones meet).  Rule -> captured Values -> ``_o`` ->
owner -> rule is then an ordinary reference cycle, which CPython's cycle
collector and PyPy's GC free once nothing else reaches it, whatever shape
the rule has (closures, defaults, lists, partials, bound methods, callable
objects).  The sweep finds a node's owner by its key in its tape's weak
map (tapead._c.Tape, per tape, not per threading.local: greenlets share a
thread's tape; the root's ``_o`` keeps every owner it depends on alive,
and each owner its Tape), and runs the
user's own function with the user's own objects: nested and re-entrant runs
are plain calls, as in micrograd.  Labels and user attributes are kept the
same way (tapead/nodedata.py).
"""
from __future__ import annotations

TYPE_CHECKING = False   # typing is not imported at run time (see tapead._c)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, SupportsFloat, Tuple

from . import _c
from ._c import KIND_LEAF, OP, OP_KINDS, OP_NAMES
from ._c import custom as _cc
from ._c import holds as _holds
from ._c.status import error, on_refusal
from _weakref import ref as _weakref
from .errors import AnomalyError, TapeadError

CUSTOM = OP["CUSTOM"]
_tl = _c._tl
_SHIFT = _c.SHIFT
_new = object.__new__

# ------------------------------------------------------------------ names
# A node's name lives in C with the node (csrc/custom/custom.c) and dies with it.
name_bytes = _cc.name_bytes


# ----------------------------------------------------------------- owners
class _Node:
    """The Python side of a custom node made micrograd's way: its rule (the
    user's function; None until ``out._backward = rule``) and ``up``, what
    its inputs' Values carried, so that the Values of this node keep the
    owners of the custom nodes before it; its key; and its tape's Python
    side (tapead._c.Tape), whose map it is found in, kept alive with it."""
    __slots__ = ("rule", "up", "key", "tape", "__weakref__")

    def __init__(self, up: Any, key: int, tape: Any) -> None:
        self.rule: Any = None
        self.up = up
        self.key = key
        self.tape = tape


# The owner type of this front: _Node, or the CPython front's C type of the
# same fields (csrc/python/owner.c: vn_obj), which makes, registers, runs and
# sets owners in C, through _c.tape and _every below (cpython_hooks).
_Owner: Any = _Node


def join(a: Any, b: Any) -> Any:
    """What a Value made from Values carrying a and b carries (None: nothing;
    csrc/python/value.c: va_join does the same for the CPython front's ops)."""
    if a is None or a is b:
        return b
    if b is None:
        return a
    return (a, b)


def join_all(vals: Any) -> Any:
    """The join of what the Values among vals carry (other items carry nothing)."""
    o = None
    V = _engine.Value
    for v in vals:
        if isinstance(v, V):
            o = join(o, v._o)
    return o


# A tape's owners (its Tape's map, tapead/_c): key -> weak reference (an
# owner lives as long as some Value carries it); dead references are
# dropped whenever the map has doubled since the last purge (no callbacks:
# no Python runs when an owner dies, so no Ctrl-C can land in one; a C
# owner's dealloc takes its own entry out, in C, so walk a copy of the map).
_tape = _c.tape


def node_owner(key: int, up: Any) -> _Node:
    """A new owner for the custom node of this key (this tape's), up what
    its inputs carried (record() on the cffi front, once the node is held;
    the CPython front's va_custom does the same in C: vn_new), registered
    under its key (never reused on a tape); now and then (every 64 owners
    made) the map is purged and the tape looked at (_every)."""
    t = _tape()
    o = _Node(up, key, t)
    t.owners[key] = _weakref(o)
    if not key & 63:         # (keys count this tape's owners made: the map's size falls as they die)
        _every(t)
    return o


def _every(t: Any, nodes: int = -1) -> None:
    """What each 64th owner made on Tape t does: purge its map if it has
    doubled, look at the tape (_pressure) if its size, nodes (-1: unknown;
    the CPython front's vn_new gives it), is over the limit."""
    d = t.owners
    if len(d) >= t.purge_at:
        for k, r in d.copy().items():   # (a copy: an owner dying meanwhile leaves d, CPython front)
            if r() is None:
                d.pop(k, None)
        t.purge_at = max(256, 2 * len(d))
    if nodes < 0 or nodes > max(t.limit, _FLOOR):
        _pressure(t)


def live_owners() -> int:
    """How many owners of this tape are alive."""
    return sum(1 for r in _tape().owners.copy().values() if r() is not None)


# A graph with custom nodes is cyclic garbage once dropped (as micrograd's
# own graphs are: out._backward's closure holds out), freed when the cycle
# collector runs.  CPython runs its oldest generation only when the objects
# there have grown by a quarter, and it does not count the tape memory such
# garbage holds: a step's graph that was alive when a collection promoted
# it may wait there long after, holding its tape segments.  So every 64
# custom nodes, if this thread's tape has outgrown its limit M (at least
# _FLOOR nodes), the tape reclaims what it can; if that leaves more than
# three quarters of M, the collector runs in full, the tape reclaims again,
# and the limit becomes twice what stays.  The limit is set only from what a
# full collection leaves (what is live), never from a partial reclaim that
# garbage still holds up, so it cannot ratchet up while the garbage waits;
# amortised, a full collection per doubling of the tape, and a partial one
# per quarter of M recorded.
_FLOOR = 6 * (1 << _SHIFT)


def _pressure(P: Any) -> None:
    """The above, for Tape P (this thread's)."""
    n = _tape_nodes()
    m = max(P.limit, _FLOOR)
    if n > m:
        _holds.collect()        # (nothing inside a rule's run: the tape waits for the sweep)
        if _tape_nodes() > m * 3 // 4:
            import gc
            gc.collect()
            _holds.collect()
            P.limit = 2 * _tape_nodes()


def _tape_nodes() -> int:
    return int(_holds.stats()["nodes"])


def owners() -> bool:
    """Has this tape owners (custom nodes whose Values may live)?"""
    return len(_tape().owners) > 0


def _owner(key: int) -> Any:
    r = _tape().owners.get(key)
    return None if r is None else r()


def _raw_info(v: Any) -> Optional[Tuple[int, str, Tuple[int, ...]]]:
    """(key, name, input ids) of v's node if it is a custom node, else None
    (the cffi front's; the CPython front replaces it by _cpython.custom_info)."""
    return _cc.custom_info(v._i)


def _key(v: Any) -> Optional[int]:
    """The key of v's node if it is a custom node (0: one of partials), else
    None (the cffi front's; the CPython front's is _cpython.custom_key)."""
    k: Optional[int] = _cc.custom_key(v._i, None)
    return k


# the CPython front's C helpers (None on the cffi front)
_cpython_pre: Optional[Callable[..., Any]] = None


# The front this module records through and hands Values out of: tapead.engine,
# which imports this module and attaches itself once its Value is made (so
# this module, below it, imports no front: no import cycle).
_engine: Any = None


def attach(front: Any) -> None:
    """engine's last step: the front custom nodes are Values of."""
    global _engine
    _engine = front


def cpython_hooks() -> Dict[str, Any]:
    """What the CPython front calls here, by name (engine.cpython_hooks): the
    rule hook, local_grads' node, the map of owners (this thread's Tape), the
    nudge each 64th owner gives, and where a rule's exception waits."""
    return dict(rule=ta_custom_rule, grads=grads_value, tape=_c.tape, every=_every, tl=_tl)


def bind_cpython(front: Any) -> None:
    """The CPython front's C versions of the hot helpers and its owner type
    (engine._cpython_front, once the hooks are bound)."""
    global _raw_info, _key, _cpython_pre, _Owner
    _raw_info, _key, _cpython_pre = front.custom_info, front.custom_key, front.precomputed
    _Owner = front.owner_type()


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
        v._o = w._o
        return
    kids: Sequence[Any]
    if type(children) is tuple:
        kids = children
    else:
        try:
            it = iter(children)
        except TypeError:
            raise TypeError(_NOT_ITERABLE) from None
        kids = list(it)      # (not tuple(children): CPython's tuple() of a list reads the list's
                             # items after making the tuple, whose allocation may run a finalizer)
    nm = name_bytes(op)
    t = _holds._tok
    Value = E.Value
    i = _custom_rec(kids, data, None, nm, Value, _NOT_A_CHILD, t.key)
    if i < 0:   # another segment, the node limit, an error: as every op (engine._slow)
        w = E._slow(i, t, _custom_rec, kids, data, None, nm, Value, _NOT_A_CHILD)
        i, t = w._i, w._t
    key = _cc.custom_key(i)      # (t holds the node: Python may run from here, as in va_custom)
    v._o = node_owner(key, join_all(kids)) if key else None   # (0: under no_grad, a plain value)
    v._i = i
    v._t = t


_NOT_A_CHILD = "Value(data, _children, _op): each child must be a Value"
_NOT_ITERABLE = "Value(data, _children, _op): _children must be an iterable of Values"


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
    if _cpython_pre is not None:
        if words is not _PRE_WORDS:   # (the C call checks too, in precomputed's words)
            for c in vals:
                if not isinstance(c, _engine.Value):
                    raise TypeError(f"{words[2]}, not {type(c).__name__}")
        return _cpython_pre(x, vals, list(ps), name)
    E = _engine
    nm = name_bytes(name)
    o = join_all(vals)
    t = _holds._tok         # as record(): one C call, into the current token's segment
    i = _custom_rec(vals, x, ps, nm, E.Value, words[2], t.key)
    if i < 0:
        out = E._slow(i, t, _custom_rec, vals, x, ps, nm, E.Value, words[2])
    else:
        out = _new(E.PyValue)
        out._i = i
        out._t = t
    out._o = o
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


def no_children(children: Any) -> bool:
    """Whether Value(data, children, ...) has no children: None, or a sized
    container with no items.  By its length, not its truth value, which a
    numpy array of Values has not; an iterator's items decide later.
    (csrc/python/owner.c: va_no_children is the CPython front's.)"""
    if children is None:
        return True
    try:
        return len(children) == 0
    except TypeError:
        return False


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
        vals = [] if no_children(children) else list(children)
    except TypeError:
        raise TypeError(f"Value(data, children, local_grads): children must be an iterable of "
                        f"Values, not {type(children).__name__}") from None
    if not vals and not ps:
        return _engine.Value(data)
    return _with_partials(data, vals, ps, name, _LG_WORDS)


# --------------------------------------------------------- the _backward
def set_backward(v: Any, fn: Any) -> None:
    """out._backward = fn: the rule of a custom node (micrograd's idiom),
    kept as it is in the node's owner (the one out carries, when it is
    that node's: the common case, without a lookup)."""
    key = _key(v)
    o = v._o
    if key and type(o) is _Owner and o.key == key and callable(fn):
        o.rule = fn
        return
    got = _raw_info(v)
    if got is None or _engine._node(v)[0] != CUSTOM:       # (a take node: a built-in op)
        op = _engine._node(v)[0]
        if not callable(fn):
            raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
        if OP_KINDS[op] == KIND_LEAF:
            return   # a leaf (or a no_grad value): no inputs to propagate to
        raise AttributeError(f"the _backward of a built-in op ({OP_NAMES[op]!r}) is tapead's "
                             f"own (C) rule and cannot be replaced; to define a new op, make its "
                             f"node with Value(data, _children, _op) and set that node's _backward")
    if got[0] == 0:
        raise AttributeError("a node made by tapead.precomputed or Value(data, children, "
                             "local_grads) differentiates by its partials; its _backward cannot "
                             "be replaced")
    if not callable(fn):
        raise TypeError(f"_backward must be callable, not {type(fn).__name__}")
    o = _owner(got[0])
    if o is None:
        raise _lost(v._i)
    o.rule = fn


def _lost(node: int) -> TapeadError:
    """The error for custom node `node` whose owner is gone (a Value made by
    a path that did not carry _o: a bug, never a skipped rule)."""
    got = _cc.custom_info(node)
    return TapeadError(f"the custom node {got[1] if got else '?'!r} has lost its rule: the Value "
                       f"used was made by a path that does not carry its graph's custom nodes "
                       f"(a bug in tapead: please report it)")


def backward_of(v: Any) -> Callable[[], None]:
    """v._backward: this node's own local chain-rule step, as a callable."""
    if not _key(v):
        return lambda: _step(v)
    return lambda: _run_own(v)       # (holds v: the node and its inputs stay alive for it)


def _run_own(v: Any) -> None:
    """out._backward(): the rule of v's custom node, looked up again in the
    calling thread (keys are per tape: another thread's Value raises
    TapeError, as a built-in node's step does, never runs another node's)."""
    key = _key(v)
    if key:
        _run(key, v._i)


def _step(v: Any) -> None:
    _cc.step(v._i)


def _run(key: int, node: int) -> None:
    """Run the rule of custom node `node` (the sweep's call): the user's function."""
    o = _owner(key)
    if o is None:
        raise _lost(node)
    fn = o.rule
    if fn is not None:
        fn()


def ta_custom_rule(node: int, key: int) -> int:
    """Called by the C sweep at a node with a Python rule (csrc/diff/sweep.c)."""
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
