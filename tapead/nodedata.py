"""What Python keeps per tape node: its label, its user attributes, and the Value that stands for it.

The tape (C) holds numbers.  A label, an attribute the user hangs on a
Value (`v.name = 'x1'`, as on micrograd's Value) and the identity of the
Value handed out for a node are Python objects: they live here, in a table
per tape (the tape's tapead._c.Tape: not per threading.local, which a
greenlet library may make per greenlet, while a thread's greenlets share
its tape) keyed by node id.  The table holds its
entries weakly: an entry lives while a Value carries it (its `_o`, as a
custom node's rule lives: tapead/custom.py), and the Value it is set on
carries it, and so does every Value recorded from that one afterwards.  So
an attribute that holds Values of its own graph (`b.inputs = (w, a)`) is a
cycle the collector sees, and any Value for the node that a walk makes
while it lives (`_prev`) shows the same label and attributes.  (Data set
on a node after nodes depending on it were recorded is reached from those
only while a Value it was set on lives.)

A node id is reused once its tape segment is reclaimed, so each entry
carries its node's stamp (csrc/tape/access.c: ta_node_stamp, never given to
another node of that tape).  An entry whose stamp is no longer its id's
belongs to a dead node: it is never shown, and it is dropped at lookup and
in one pass over the table whenever the table has doubled since the last.

Nothing here is on the hot path: an entry is made only when a label or an
attribute is set or when `_prev` is read, so recording an op costs what it
did.
"""
from __future__ import annotations

from _thread import RLock as _RLock
from _weakref import ref as _weakref
from _weakrefset import WeakSet as _WeakSet

from ._c import node_stamp, tape as _tape
from .custom import join

TYPE_CHECKING = False   # typing is not imported at run time (see tapead._c)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional
    from .engine import Value

_stamp = node_stamp
# The Value type of the front in use: tapead.engine, which imports this
# module, attaches it once made (this module, below it, imports no front).
_Value: Any = None


def attach(value_type: Any) -> None:
    """engine's last step: the Value type whose nodes this module keeps data for."""
    global _Value
    _Value = value_type


class _Entry:
    __slots__ = ("stamp", "ref", "label", "attrs", "tape", "__weakref__")

    def __init__(self, stamp: int, tape: Any) -> None:
        self.stamp = stamp
        self.tape = tape        # its table's Tape, kept alive with it (tapead._c.Tape)
        self.ref: Optional[Callable[[], Optional[Value]]] = None  # weakref to the node's Value
        self.label = ""
        self.attrs: Optional[Dict[str, Any]] = None


class _Table:
    __slots__ = ("entries", "purge_at", "__weakref__")

    def __init__(self) -> None:
        # node id -> weak reference to its _Entry (alive while a Value carries
        # it); dead references go at lookup and in _purge (no callbacks: nothing
        # runs when an entry dies, so no Ctrl-C can land in one)
        self.entries: Dict[int, Callable[[], Optional[_Entry]]] = {}
        self.purge_at = 256


_tables: Any = _WeakSet()   # every tape's table (what _sweep_names reads)


def _table() -> _Table:
    """This thread's tape's table (made if need be)."""
    t: Optional[_Table] = _tape().table
    if t is None:
        t = _tape().table = _Table()
        _tables.add(t)
    return t


def kept() -> bool:
    """Does this tape keep data for any node (entries Values carry)?"""
    t: Optional[_Table] = _tape().table
    return t is not None and any(r() is not None for r in list(t.entries.values()))


def _carry(v: Any, e: _Entry) -> None:
    """v carries e: e lives while v, or a Value recorded from v from now
    on, lives (tapead/custom.py: join)."""
    o = v._o
    if not (type(o) is tuple and (o[0] is e or o[1] is e)):   # (set again: carried already)
        v._o = join(o, e)


def _alive(i: int, e: _Entry) -> bool:
    """Is entry e still about node i?  By the stamp only: the Value the entry
    last saw may be alive with id i and yet on another node, v.__init__
    having moved it to a new node that reuses i."""
    return bool(_stamp(i) == e.stamp)


def entry(i: int, make: bool = False) -> Optional[_Entry]:
    """The entry of node id i of this tape (made if `make`), or None."""
    t = _table()
    r = t.entries.get(i)
    e = r() if r is not None else None
    if r is not None and (e is None or not _alive(i, e)):
        del t.entries[i]
        e = None
    if e is None and make:
        st = _stamp(i)
        if st <= 0:
            _mine(i)
        if len(t.entries) >= t.purge_at:
            _purge(t)
        e = _Entry(int(st), _tape())
        t.entries[i] = _weakref(e)      # (the caller has e, and makes a Value carry it)
    return e


def _purge(t: _Table) -> None:
    """Drop the entries of dead nodes and those that keep nothing."""
    for i, r in list(t.entries.items()):
        e = r()
        if e is None or not _alive(i, e) or (not e.label and not e.attrs
                                             and (e.ref is None or e.ref() is None)):
            del t.entries[i]
    t.purge_at = max(256, 2 * len(t.entries))


# ------------------------------------------------------------- identity
def known(i: int) -> Optional[Value]:
    """The live Value that stands for node i, if there is one."""
    e = entry(i)
    v = e.ref() if (e is not None and e.ref is not None) else None
    return v if (v is not None and v._i == i) else None


def know(v: Value) -> Value:
    """Make v the Value that stands for its node, unless another live one
    does already; returns the one that does."""
    e = entry(v._i, make=True)
    assert e is not None
    w = e.ref() if e.ref is not None else None
    if w is not None and w._i == v._i:
        return w
    _carry(v, e)
    e.ref = _weakref(v)
    if hasattr(v, "__dict__"):   # the cffi front (or a subclass): v's dict is its node's attributes
        d = dict(v.__dict__)     # a plain dict: PyPy's v.__dict__ is a view that keeps v alive
        if e.attrs is not None:
            d.update(e.attrs)
        e.attrs = v.__dict__ = d
    return v


# ---------------------------------------------------------------- labels
def set_label(value: Value, label: Optional[str]) -> None:
    """Give `value`'s node a label (shown in Wengert tables and drawings); "" or None removes it.

    >>> import tapead
    >>> x = tapead.Value(1.0); tapead.set_label(x, "x"); x.label
    'x'
    >>> tapead.set_label(x, None); x.label
    ''
    """
    _check(value, "set_label")
    e = entry(value._i, make=bool(label))
    if e is not None:
        know(value)
        _carry(value, e)
        e.label = str(label) if label else ""


def get_label(value: Value) -> str:
    """The label of `value`'s node, or "" if it has none.

    >>> import tapead
    >>> x = tapead.Value(1.0, label="x")
    >>> tapead.get_label(x), tapead.get_label(x * 2)
    ('x', '')
    """
    _check(value, "get_label")
    e = entry(value._i)
    if e is None:
        _mine(value._i)
    return e.label if e is not None else ""


def _mine(i: int) -> None:
    """TapeError (or the like) unless node i is of this thread: the tables
    are per tape, so another thread's node would seem to have no data."""
    st = _stamp(i)
    if st <= 0:
        from ._c.status import error
        raise error(int(st))


def _check(value: Any, what: str) -> None:
    if not isinstance(value, _Value):
        raise TypeError(f"{what} needs a Value, not {type(value).__name__}")


def label_of_id(i: int) -> str:
    """The label of node id i ("" if none)."""
    e = entry(i)
    return e.label if e is not None else ""


# ------------------------------------------------------ user attributes
class UserAttr:
    """A user attribute of the C Value (`v.name = 'x1'`), kept with the node.

    Installed on the type while some node has an attribute of that name
    (set_attr; _sweep_names takes it off again once none has); reading it
    from a Value that has none raises AttributeError, as a missing
    attribute does."""
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, v: Any, owner: Any = None) -> Any:
        if v is None:
            return self
        e = entry(v._i)
        if e is None or not e.attrs or self.name not in e.attrs:
            _mine(v._i)
            raise AttributeError(f"'Value' object has no attribute {self.name!r}")
        return e.attrs[self.name]

    def __set__(self, v: Any, x: Any) -> None:
        with _attr_lock:      # (no sweep takes this UserAttr off meanwhile)
            e = entry(v._i, make=True)
            assert e is not None
            know(v)
            _carry(v, e)
            if e.attrs is None:
                e.attrs = {}
            e.attrs[self.name] = x

    def __delete__(self, v: Any) -> None:
        e = entry(v._i)
        if e is None or not e.attrs or self.name not in e.attrs:
            raise AttributeError(self.name)
        del e.attrs[self.name]


# The UserAttrs on the type, and when to sweep them: every name ever set
# would otherwise stay on the type for the process (setattr(v,
# f'feature{k}', ...) grows it each time).  A sweep takes off the names no
# node of any thread has now; it runs when their number has doubled since
# the last, so it costs amortised O(1) per name set.  The lock orders a
# sweep against a set, which installs the name and stores it in one step.
_attr_lock = _RLock()
_attrs_on_type = 0
_sweep_at = 64


def _sweep_names() -> None:
    global _attrs_on_type, _sweep_at
    _purge(_table())            # (this thread's dead nodes' entries go first)
    used = set()
    for t in list(_tables):
        for r in list(t.entries.values()):
            e = r()
            a = e.attrs if e is not None else None
            if a:
                used.update(list(a))
    kept = 0
    for name, d in list(_Value.__dict__.items()):
        if type(d) is UserAttr:
            if name in used:
                kept += 1
            else:
                delattr(_Value, name)
    _attrs_on_type = kept
    _sweep_at = max(64, 2 * kept)


def set_attr(v: Value, name: str, x: Any, delete: bool) -> None:
    """The C Value's setattr for a name its type does not have: a user
    attribute, through a UserAttr installed on the type for that name."""
    global _attrs_on_type
    t = type(v)
    if (name.startswith("__") and name.endswith("__")) or name in ("_i", "_t"):
        raise AttributeError(f"'Value' object attribute {name!r} is read-only")
    base = _Value
    with _attr_lock:
        d = base.__dict__.get(name)
        if d is None:
            for k in t.__mro__:
                if name in k.__dict__:   # a subclass's own class attribute: read-only, as before
                    raise AttributeError(f"'{t.__name__}' object attribute {name!r} is read-only")
            if delete:
                raise AttributeError(name)
            if _attrs_on_type >= _sweep_at:
                _sweep_names()
            d = UserAttr(name)
            setattr(base, name, d)
            _attrs_on_type += 1
        elif not isinstance(d, UserAttr):
            raise AttributeError(f"'Value' object attribute {name!r} is read-only")
        if delete:
            d.__delete__(v)
        else:
            d.__set__(v, x)
