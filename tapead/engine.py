"""Value: micrograd's scalar, recorded on a C tape.

A Value is a handle: the id of its node on this thread's tape and the
token that holds the tape segment that node lives in (csrc/api/tapead.h:
holds).  Every operator records one node with one C call and returns a new
handle; backward() is one C sweep.  A Value holds no other Value; it
carries `_o`, the Python data of the custom nodes (and labelled nodes) its
node depends on, None in a graph without them (tapead/custom.py: join), so
that a rule or an attribute holding Values of its own graph is a cycle the
collector sees.

The recording calls pass the key of the token they hold (pinned in a local
before the call), and C records only into that very segment: a node is
never visible to Python unheld, whatever runs between two bytecodes (a
signal handler, a finalizer, another greenlet).
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False   # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import (Any, Callable, Dict, Iterable, List, Optional, Set, SupportsFloat, Tuple,
                        Union)

from . import _c, custom as _custom, nodedata as _nd
from ._c import KIND_CST, KIND_LEAF, KIND_NARY, OP, OP_KINDS, OP_NAMES
from ._c import holds as _holds, program as _cprog
from ._c.status import error
from .errors import TapeadError
from ._opsurface import *   # the op codes (ADD, MUL, RELU, ...), generated from csrc/api/ops.def
from ._opsurface import FORMS, UNARY

if TYPE_CHECKING:
    from ._c.holds import _Token

# What the operators take besides a Value: int, float, bool, numpy scalars
# (anything float() accepts through __float__).
if TYPE_CHECKING:
    Operand = Union["Value", SupportsFloat]
else:
    Operand = "Operand"   # (annotations are strings: typing is not imported at run time)

_leaf, _op1, _op2, _opc = _c.leaf, _c.op1, _c.op2, _c.opc
_val, _adj, _set_val, _set_adj = _c.val, _c.adj, _c.set_val, _c.set_adj
_backward = _c.backward
_recompute, _cmp2, _cmpc = _c.recompute, _c.cmp2, _c.cmpc
_ta_check = _c.check_node
_rebound = _c.rebound
_new = object.__new__
_peek = _c.peek
_OFFMASK = (1 << _c.SHIFT) - 1

# The cffi front's current token (_holds._tok) and what to do when C says a
# node would land elsewhere: tapead/_c/holds.py.
def _slow(st: int, used: _Token, fn: Callable[..., int], *args: Any) -> Value:
    """The slow path of every recording call `fn(*args, key)` (holds.slow):
    the new node's Value, or the error raised."""
    i, t = _holds.slow(st, used, fn, *args)
    v = _new(PyValue); v._i = i; v._t = t; v._o = None
    return v


def handles(h: Any, n: int, own: Any = None) -> List[Value]:
    """Values for the first n ids of the held list h (_c.holds.held_list) that
    a bulk call filled, each taking over its id's hold and carrying own
    (the join of what the call's input Values carry: custom.join_all)."""
    out: List[Value] = []
    append = out.append
    ids, toks = _holds.adopt_here(h, n)
    for i, t in zip(ids, toks):
        v = _new(PyValue); v._i = i; v._t = t; v._o = own
        append(v)
    return out


def held(ids: Iterable[int], own: Any = None) -> List[Value]:
    """Values for existing nodes of this thread (held by something else
    now), carrying own (what a Value they come from carries)."""
    ids = list(ids)
    h = _holds.held_list(len(ids))
    _holds.hold_ids(ids, h)
    return handles(h, len(ids), own)


def values_of(values: Union[Value, Iterable[Value]], what: str = "values") -> List[Value]:
    """The Values as a list, for a bulk C call (their ids: ids_of).

    A single Value counts as a list of one; anything else in the list is a
    TypeError naming `what`.  Iterating runs the caller's code: take every
    argument's Values, and whatever else may run Python (numbers converted,
    arrays made), before reading the ids."""
    try:
        vals = [values] if isinstance(values, Value) else list(values)
    except TypeError:
        raise TypeError(f"{what} must be a Value or an iterable of Values, "
                        f"not {type(values).__name__}") from None
    for v in vals:
        if not isinstance(v, Value):
            raise TypeError(f"{what} must be Values, not {type(v).__name__}")
    return vals


def ids_of(vals: List[Value]) -> Any:
    """The node ids of vals as a C int64 array (at least one slot, so C never
    gets a zero-length allocation), read for a C call made next.  An id
    carries no generation: Python run after reading it could move its Value
    (v.__init__(x)) and let the tape reclaim the old node, whose id would
    then name another; so nothing that may run Python comes in between
    (ids kept across calls: tapead/_c/holds.py, HeldIds)."""
    return _c.int64s([v._i for v in vals])


def node_ids(values: Union[Value, Iterable[Value]], what: str = "values") -> Tuple[List[Value], Any]:
    """(values_of(values), their ids_of) for a bulk C call with no other argument to take first."""
    vals = values_of(values, what)
    return vals, ids_of(vals)




_Real: Any = None
_Complex: Any = None


def _real(x: Any) -> float:
    """x as a float if it is a real number, else TypeError: what the operators
    take (int, float, bool, numpy scalars numpy.bool among them, Fraction,
    Decimal: anything with __float__), so Value(x) works wherever v + x does.
    A complex number is refused, numpy's among them (complex64's __float__
    would drop the imaginary part)."""
    global _Real, _Complex
    if type(x) is float:        # the common case first: the Real check is an ABC's, slow
        return x
    if _Real is None:           # numbers loads on first use, not with `import tapead`
        import numbers
        _Real, _Complex = numbers.Real, numbers.Complex
    if isinstance(x, _Real) or (hasattr(type(x), "__float__") and not isinstance(x, _Complex)
                                and not getattr(x, "ndim", 0)):   # an array, even of one element: not a number
        try:
            return float(x)
        except TypeError:
            pass
    t = type(x)
    name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
    raise TypeError(f"Value() needs a real number (int, float, bool, a numpy scalar, ...), "
                    f"not {name}")


def _settable(x: Any, what: str) -> float:
    """x for `v.data = x` / `v.grad = x`: a real number (_real), as a float."""
    try:
        return _real(x)
    except TypeError:
        raise TypeError(f"a Value's {what} must be a real number, not {type(x).__name__}") from None


def read_checked(get: Callable[[int], float], i: int) -> float:
    """get(i) (_c.val or _c.adj: node i's data or grad), where C's nan
    means nan only for a usable id: a foreign thread's or forged one raises."""
    x = get(i)
    if x != x:
        st = _ta_check(i)
        if st:
            raise error(st)
    return x


class Value:
    """A scalar that records how it was computed, so backward() can differentiate it.

    Value(data) is a leaf: data a real number (int, float, numpy scalar).
    Value(data, _children, _op) is a custom node, micrograd's way: _children
    its inputs, _op the op's name, then ``out._backward = rule``.
    Value(data, _children, local_grads), or local_grads=, is microgpt's: the
    node's local partial derivatives, one number per child, swept in C.
    label names the node in drawings and the Wengert table.

    >>> a = Value(2.0); b = a * a + 3 * a
    >>> b.backward(); (b.data, a.grad)
    (10.0, 7.0)
    """
    # __dict__: the user's attributes (v.name = 'x1', as micrograd's Value
    # takes), made only when one is set; the C type keeps them with the
    # node instead (tapead/nodedata.py), to stay small.
    __slots__ = ("_i", "_t", "_o", "__weakref__", "__dict__")
    _i: int                   # node id
    _t: _Token                # holds the node's tape segment
    _o: Any                   # what it carries (tapead/custom.py: join)
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, data: SupportsFloat, _children: Iterable[Value] = (),
                 _op: Union[str, Iterable[SupportsFloat]] = "", label: Optional[str] = "",
                 local_grads: Optional[Iterable[SupportsFloat]] = None) -> None:
        if type(data) is not float:
            data = _real(data)
        # a custom node: micrograd's idiom for a new op (_op its name, then
        # out._backward = rule), or microgpt's (its local gradients as the
        # third argument, or local_grads=): tapead/custom.py
        if (_children if type(_children) is tuple else not _custom.no_children(_children)) \
                or local_grads is not None or (type(_op) is not str and _op is not None):
            _custom.record(self, data, _children, _op, local_grads)
            if self.__weakref__ is not None:
                _rebound()
            if label:
                self._set_label(label)
            return
        t = _holds._tok
        i = _leaf(data, t.key)
        if i < 0:
            v = _slow(i, t, _leaf, data)
            i, t = v._i, v._t
        self._i = i
        self._t = t
        self._o = None
        # the node moved (or this is a new Value, which is rarely weakly
        # referenced yet): a holder of this Value's old id, which keeps a weak
        # reference to it, takes the ids again (csrc/api/cdef.h: ta_rebinds)
        if self.__weakref__ is not None:
            _rebound()
        if label:
            self._set_label(label)

    def __getattr__(self, name: str) -> Any:  # only when a slot is unset, or a getter raised AttributeError
        if name == "_o":   # (a handle made without __init__ carries nothing; its node decides)
            return None
        if name in ("_i", "_t"):
            raise TypeError("this Value was never initialised (made without calling Value(x)): "
                            "it has no node")
        raise AttributeError(f"'Value' object has no attribute {name!r}")

    # ------------------------------------------------------------ data, grad
    @property
    def data(self) -> float:
        """The node's value, a float (settable: p.data -= lr * p.grad)."""
        x = _val(self._i)
        # (a number is returned at once: the call to read_checked, only for
        # nan, cost 35 ns a read on CPython)
        return x if x == x else read_checked(_val, self._i)

    @data.setter
    def data(self, x: SupportsFloat) -> None:
        if type(x) is not float:    # (first: its __float__ may run any code, even move self)
            x = _settable(x, "data")
        st = _set_val(self._i, x)
        if st:
            raise error(st)

    @property
    def grad(self) -> float:
        """d(root)/d(this node) after root.backward(), a float; leaves accumulate
        across backward() calls, so set it to 0 between steps (settable)."""
        x = _adj(self._i)
        return x if x == x else read_checked(_adj, self._i)   # (as data)

    @grad.setter
    def grad(self, x: SupportsFloat) -> None:
        if type(x) is not float:    # (first: its __float__ may run any code, even move self)
            x = _settable(x, "grad")
        st = _set_adj(self._i, x)
        if st:
            raise error(st)

    def backward(self) -> None:
        """Seed this node's gradient with 1 and sweep the tape back, in C."""
        st = _backward(self._i)
        if st:
            raise error(st, sweep="backward")

    # ------------------------------------------------------------- operators
    # Each is one node; a plain-number operand travels as the op's constant.
    def __add__(self, other: Operand) -> Value:
        if type(other) is PyValue:
            return _rec2(ADD, self, other)
        return _num(ADDC, self, other, ADD)

    __radd__ = __add__  # other + self: x + c == c + x exactly

    def __mul__(self, other: Operand) -> Value:
        if type(other) is PyValue:
            return _rec2(MUL, self, other)
        return _num(MULC, self, other, MUL)

    __rmul__ = __mul__  # other * self

    def __sub__(self, other: Operand) -> Value:
        if type(other) is PyValue:
            return _rec2(SUB, self, other)
        try:
            c = -_const(other)  # x - c == x + (-c) exactly
        except TypeError:
            return _lift(self, other, SUB)
        return _recc(ADDC, self, c)

    def __rsub__(self, other: Operand) -> Value:  # other - self
        return _num(RSUBC, self, other, SUB, True)

    def __truediv__(self, other: Operand) -> Value:
        if type(other) is PyValue:
            return _rec2(DIV, self, other)
        try:
            return _recc(DIVC, self, _const(other))  # C records micrograd's x * c**-1 (ta_record_at)
        except TypeError:
            return _lift(self, other, DIV)

    def __rtruediv__(self, other: Operand) -> Value:  # other / self
        return _num(RDIVC, self, other, DIV, True)

    def __pow__(self, other: Operand, modulo: None = None) -> Value:
        if modulo is not None:
            return NotImplemented
        if type(other) is PyValue:
            return _rec2(POW, self, other)
        return _num(POWC, self, other, POW)

    def __rpow__(self, other: SupportsFloat, modulo: None = None) -> Value:  # other ** self
        if modulo is not None:
            return NotImplemented
        return _num(RPOWC, self, other, POW, True)

    def __neg__(self) -> Value:  # -self, as micrograd: self * -1
        return _recc(MULC, self, -1.0)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return _rec1(ABS, self)

    # ------------------------------------------------------------- functions
    # <ops.def: unary methods> generated by tools/gen_ops.py from csrc/api/ops.def: edit the table
    def relu(self) -> Value:
        """max(0, x), with micrograd's conventions: relu(-0.0) is -0.0, d/dx at 0 is 0."""
        return _rec1(RELU, self)

    def tanh(self) -> Value:
        """tanh(x) (C's tanh: accurate near 0 and never overflows, unlike micrograd's formula)."""
        return _rec1(TANH, self)

    def exp(self) -> Value:
        """e**x; OverflowError when it overflows, as math.exp."""
        return _rec1(EXP, self)

    def log(self) -> Value:
        """Natural log; ValueError for x <= 0, as math.log."""
        return _rec1(LOG, self)

    def sigmoid(self) -> Value:
        """1 / (1 + e**-x), evaluated without overflow."""
        return _rec1(SIGMOID, self)

    def sin(self) -> Value:
        """sin(x); ValueError for infinite x, as math.sin."""
        return _rec1(SIN, self)

    def cos(self) -> Value:
        """cos(x); ValueError for infinite x, as math.cos."""
        return _rec1(COS, self)

    def sqrt(self) -> Value:
        """sqrt(x); ValueError for x < 0, as math.sqrt."""
        return _rec1(SQRT, self)

    def abs(self) -> Value:
        """|x|; its derivative at 0 is taken as 0."""
        return _rec1(ABS, self)

    def log1p(self) -> Value:
        """ln(1 + x), exact for x near 0 (softplus: log1p(exp(x))); ValueError for x <= -1, as math.log1p."""
        return _rec1(LOG1P, self)

    def detach(self) -> Value:
        """x's value, through which no gradient flows (JAX's stop_gradient); a replay computes it again from x, whose graph it keeps alive (for a number, x.data)."""
        return _rec1(DETACH, self)

    # </ops.def>
    def maximum(self, other: Operand) -> Value:
        """max(self, other); at a tie each input gets half the gradient."""
        return _binary_fn(MAX, self, other)

    def minimum(self, other: Operand) -> Value:
        """min(self, other); at a tie each input gets half the gradient."""
        return _binary_fn(MIN, self, other)

    def __repr__(self) -> str:
        return f"Value(data={self.data}, grad={self.grad})"

    # ----------------------------------------------- comparisons and replay
    # A comparison returns a bool and records a guard: a later recompute()
    # whose guards flip raises GuardError instead of replaying a wrong trace.
    # (== stays identity: Values hash by identity.)
    def __lt__(self, other: Operand) -> bool:
        return _compare(0, self, other)

    def __le__(self, other: Operand) -> bool:
        return _compare(1, self, other)

    def __gt__(self, other: Operand) -> bool:
        return _compare(2, self, other)

    def __ge__(self, other: Operand) -> bool:
        return _compare(3, self, other)

    def recompute(self) -> None:
        """Re-evaluate this node and all it depends on from the leaves' current .data, in C.

        >>> x = Value(2.0); y = x * x + 1
        >>> x.data = 3.0; y.recompute(); y.data
        10.0
        """
        st = _recompute(self._i)
        if st:
            raise error(st)

    # ------------------------------------------------------ pickle, copy
    def __reduce__(self) -> Tuple[object, Tuple[Any, ...]]:
        # pickle, copy.copy and copy.deepcopy: a detached leaf, same data and
        # grad.  Read through the token's hold, so it works in any thread
        # (multiprocessing pickles in helper threads).
        t = getattr(self, "_t", None)
        if not isinstance(t, _holds._Token) or t.key != self._i >> _c.SHIFT:
            return (_restore, (self.data, self.grad))  # a forged handle: raises TapeError
        off = self._i & _OFFMASK
        got = (_peek(t.box[0], off, 0), _peek(t.box[0], off, 1))
        return (_restore, got if type(self) is Value else got + (type(self),))

    # ------------------------------------------ micrograd's graph attributes
    # Code written for micrograd walks the graph through these (its
    # trace_graph notebook's trace/draw_dot, the lecture's topological sort);
    # here they read the tape.  A constant is part of its op ("+1", "**2"),
    # not a child, as the tape stores it.
    @property
    def _op(self) -> str:
        """The op that made this node, as micrograd names it ('' for a leaf).

        >>> x = Value(2.0); (x * x)._op, (x ** 2)._op, (x + 1).relu()._op, x._op
        ('*', '**2', 'ReLU', '')
        """
        op, _, _, c = _node(self)
        if op == _CUSTOM:
            got = _custom.info(self)
            return got[1] if got else ""
        if OP_KINDS[op] == KIND_LEAF:
            return ""
        return op_text(OP_NAMES[op], c if OP_KINDS[op] == KIND_CST else None)

    @property
    def _children(self) -> Tuple[Value, ...]:
        """The Values this node was computed from, in the order of its inputs (microgpt's _children).

        One per input, repeats included (x * x gives (x, x)), the same
        objects _prev gives; () for a leaf.  A constant is part of the op.

        >>> x = Value(2.0); y = x * x + 3
        >>> [v.data for v in y._children], y._children[0]._children[0] is y._children[0]._children[1]
        ([4.0], True)
        """
        return tuple(_inputs(self))

    @property
    def _local_grads(self) -> Tuple[float, ...]:
        """This node's local partial derivatives, one per input of _children (microgpt's _local_grads).

        Floats, at the recorded values: for a * b, (b.data, a.data).  A node
        with a Python _backward (micrograd's idiom) has none: TapeadError.

        >>> a, b = Value(2.0), Value(-3.0)
        >>> (a * b)._local_grads, (a + 1)._local_grads, a._local_grads
        ((-3.0, 2.0), (1.0,), ())
        """
        got = _partials(self._i)
        if got is None:
            raise TapeadError(f"the custom node {self._op!r} is differentiated by its Python "
                              f"_backward: it has no local gradients (a node made with "
                              f"Value(data, children, local_grads) or tapead.precomputed has)")
        return got

    @property
    def _prev(self) -> Set[Value]:
        """The Values this node was computed from, as micrograd's set.

        The Value that stands for a node comes back: the very object you hold
        if it has a label or attributes or has been walked through (its
        _prev read, or found here), else a new Value that then stands for
        the node while it lives; so a walk that keeps a set of visited
        Values (micrograd's trace) sees each node once.  Labels and
        attributes live with the node, so any Value for it shows them.

        >>> x = Value(2.0); y = x * x + 3
        >>> [v._op for v in y._prev], [v.data for v in next(iter(y._prev))._prev]
        (['*'], [2.0])
        """
        return set(_inputs(self))

    @property
    def _backward(self) -> Callable[[], None]:
        """This node's own local chain-rule step, once: what micrograd's lecture calls by hand.

        It reads this node's .grad and adds each input's share to that input's
        .grad; run on every node in reverse topological order it gives what
        backward() gives.  On a node made with Value(data, _children, _op) it
        is the callable assigned to it (micrograd's idiom for a new op; see
        tapead.custom): backward() calls it at that node, and an exception it
        raises propagates out of backward(), leaving the tape and every
        Value's data as they were and the adjoints with the aborted pass's
        partial sums.

        >>> a, b = Value(2.0), Value(-3.0); e = a * b; L = e + 1
        >>> L.grad = 1.0; L._backward(); e._backward(); (a.grad, b.grad)
        (-3.0, 2.0)
        """
        return _custom.backward_of(self)

    @_backward.setter
    def _backward(self, fn: Callable[[], None]) -> None:
        _custom.set_backward(self, fn)

    def _set_label(self, label: str) -> None:  # Value(x, label=...) on either front
        _nd.set_label(self, label)

    label = property(_nd.get_label, _nd.set_label,
                     doc="A name kept with the node, shown in Wengert tables and graph drawings "
                         "('' if none).")


_CUSTOM = OP["CUSTOM"]


def _inputs(v: Value) -> List[Value]:
    """The Values for the inputs of v's node, in order, one per input (the
    Value that stands for each node: _prev's rule)."""
    op, x, y, _ = _node(v)
    _nd.know(v)
    got = _custom.info(v) if OP_KINDS[op] == KIND_NARY else None     # (a custom or take node)
    ids = got[0] if got else tuple(i for i in (x, y) if i >= 0)
    by: Dict[int, Value] = {}
    fresh = []
    for i in dict.fromkeys(ids):
        w = _nd.known(i)
        if w is None:
            fresh.append(i)
        else:
            by[i] = w
    for i, w in zip(fresh, held(fresh, v._o)):   # (carrying what v does: its inputs' own is within it)
        by[i] = _nd.know(w)
    return [by[i] for i in ids]


def _partials(i: int) -> Optional[Tuple[float, ...]]:
    from ._c.graph import partials   # (as _node)
    return partials(i)


def _node(v: Value) -> Tuple[int, int, int, float]:
    """(op code, input x id or -1, input y id or -1, constant) of v's node.
    A no_grad result is a plain leaf."""
    from ._c.graph import node   # (here: _c.graph loads with the first use)
    got = node(v._i)
    return (OP["LEAF"], -1, -1, 0.0) if got is None else got


# micrograd's name of an op with a constant: its form without the input ('**{c:g}', '{c:g}/')
_WITH_C = {OP_NAMES[i]: FORMS[i].replace("{x}", "").replace(" ", "").replace("{c}", "{c:g}")
           for i in range(len(OP_NAMES)) if OP_KINDS[i] == KIND_CST}


def op_text(sym: str, c: Optional[float]) -> str:
    """An op as micrograd draws it: '+', '*', 'ReLU', with a constant '**2', '+1', '3/'."""
    if c is None or sym not in _WITH_C:
        return sym
    return _WITH_C[sym].format(c=c)


def _compare(kind: int, a: Value, b: Operand) -> bool:
    if isinstance(b, Value):
        r = _cmp2(kind, a._i, b._i)
    else:
        try:
            r = _cmpc(kind, a._i, _const(b))
        except TypeError:
            return NotImplemented  # type: ignore[no-any-return]  # (NotImplemented is typed Any)
    if r < 0:
        if r != _ENOGRAD:
            raise error(r)
        r = _compare_no_grad(kind, a, b)
    return r == 1


_ENOGRAD = _c.ENOGRAD
_FLIP = (2, 3, 0, 1)  # x < y is y > x, x <= y is y >= x, ...
_PLAIN = (float.__lt__, float.__le__, float.__gt__, float.__ge__)


def _compare_no_grad(kind: int, a: Value, b: Operand) -> int:
    """A comparison with a no_grad value, which is a constant to the graph:
    by value, with a guard on the other operand if it is recorded."""
    x = a.data
    y = b.data if isinstance(b, Value) else _const(b)
    r = _ENOGRAD
    if isinstance(b, Value):
        r = _cmpc(kind, a._i, y)                 # a recorded, b the constant
        if r == _ENOGRAD:
            r = _cmpc(_FLIP[kind], b._i, x)      # b recorded, a the constant
    if r == _ENOGRAD:                            # nothing recorded: no guard
        return int(_PLAIN[kind](x, y))
    if r < 0:
        raise error(r)
    return int(r)


def _restore(data: float, grad: float, cls: Optional[type] = None) -> Value:
    """A detached leaf of this data and grad (unpickling, copy); of class
    cls, a subclass of Value, made as pickle makes an object (its __new__,
    not its __init__, which may take other arguments)."""
    if cls is None or cls is Value:
        v = Value(data)
    elif isinstance(cls, type) and issubclass(cls, Value):
        v = cls.__new__(cls)
        Value.__init__(v, data)
    else:
        raise TypeError(f"a pickled Value's class must be a subclass of Value, not {cls!r}")
    v.grad = grad
    return v


def _const(c: Any) -> float:
    """A plain-number operand as a float; TypeError for anything else."""
    if type(c) is float or type(c) is int:
        return float(c)
    return _real(c)


def _rec2(op: int, a: Value, b: Value) -> Value:
    """Record a op b (Values, or instances of a subclass).  The result
    carries the join of what a and b carry (custom.join, inlined)."""
    o = a._o
    p = b._o
    if p is not None and p is not o:
        o = p if o is None else (o, p)
    t = _holds._tok
    i = _op2(op, a._i, b._i, t.key)
    if i < 0:
        v = _slow(i, t, _op2, op, a._i, b._i)
    else:
        v = _new(PyValue); v._i = i; v._t = t
    v._o = o
    return v


def _recc(op: int, a: Value, c: Any) -> Value:
    """Record a op c for a plain number c (cffi raises TypeError for anything else)."""
    o = a._o
    t = _holds._tok
    i = _opc(op, a._i, c, t.key)
    if i < 0:
        v = _slow(i, t, _opc, op, a._i, c)
    else:
        v = _new(PyValue); v._i = i; v._t = t
    v._o = o
    return v


def _rec1(op: int, a: Value) -> Value:
    o = a._o
    t = _holds._tok
    i = _op1(op, a._i, t.key)
    if i < 0:
        v = _slow(i, t, _op1, op, a._i)
    else:
        v = _new(PyValue); v._i = i; v._t = t
    v._o = o
    return v


def _num(opc: int, a: Value, c: Any, op: int, rev: bool = False) -> Value:
    """a opc c for a plain number c; else the slow path (_lift) for
    `a op c`, or `c op a` if rev (a reflected call)."""
    if type(c) is not float and type(c) is not int:
        try:
            c = _real(c)      # (cffi itself would take an array of one element)
        except TypeError:
            return _lift(a, c, op, rev)
    return _recc(opc, a, c)


def _lift(a: Value, b: object, op: int, rev: bool = False) -> Value:
    """Slow path when `b` is not a plain number: a Value subclass, a numpy
    array (_other), or unsupported."""
    if not rev and isinstance(b, Value):
        return _rec2(op, a, b)
    return _other(b, a, op) if rev else _other(a, b, op)  # type: ignore[no-any-return]  # (an array or NotImplemented)


_BINARY = {ADD: lambda x, y: x + y, SUB: lambda x, y: x - y, MUL: lambda x, y: x * y,
           DIV: lambda x, y: x / y, POW: lambda x, y: x ** y}
_ufuncs: Dict[int, Any] = {}


def _other(a: Any, b: Any, op: int) -> Any:
    """a op b where one is a Value and the other no number: the slow path
    of both fronts.  A numpy array on either side gives what micrograd's
    `array * v` gives, an object array of Values, elementwise (micrograd's
    own `v * array` makes one Value whose data is an array, and its
    `array ** v` raises: here both are object arrays too).  Anything else:
    NotImplemented (numpy is never imported here: an array means it is)."""
    np = sys.modules.get("numpy")
    if np is None or not (isinstance(a, np.ndarray) or isinstance(b, np.ndarray)):
        return NotImplemented
    f = _ufuncs.get(op)
    if f is None:
        f = _ufuncs[op] = np.frompyfunc(_BINARY[op], 2, 1)
    box = np.empty((), dtype=object)     # the Value as a 0-d array: numpy then
    if isinstance(a, np.ndarray):        # loops over the other operand only
        box[()] = b
        return f(a, box)
    box[()] = a
    return f(box, b)


def as_value(x: Operand) -> Value:
    """x itself if it is a Value, else a new leaf holding x."""
    return x if isinstance(x, Value) else Value(x)


def _binary_fn(op: int, a: Operand, b: Operand) -> Value:
    return _rec2(op, as_value(a), as_value(b))


def maximum(a: Operand, b: Operand) -> Value:
    """max(a, b) as a Value (either may be a plain number).

    >>> import tapead
    >>> a, b = tapead.Value(2.0), tapead.Value(3.0)
    >>> m = tapead.maximum(a, b); m.backward(); (m.data, a.grad, b.grad)
    (3.0, 0.0, 1.0)
    >>> tapead.maximum(0.0, tapead.Value(-1.5))
    Value(data=0.0, grad=0.0)
    """
    return as_value(a).maximum(b)


def minimum(a: Operand, b: Operand) -> Value:
    """min(a, b) as a Value (either may be a plain number).

    >>> import tapead
    >>> x = tapead.Value(2.0)
    >>> m = tapead.minimum(x, 0.5); m.backward(); (m.data, x.grad)
    (0.5, 0.0)
    >>> x = tapead.Value(2.0); m = tapead.minimum(x, 2.0); m.backward(); x.grad
    0.5
    """
    return as_value(a).minimum(b)


def collect() -> int:
    """Reclaim now every tape segment no live Value can reach; returns segments freed.

    Never needed for bounded memory (the tape reclaims itself as it grows);
    useful before measuring memory.

    >>> import tapead
    >>> freed = tapead.collect()
    >>> freed >= 0
    True
    """
    _holds.let_go()    # (this thread's current token need not hold its segment now)
    if _custom.owners() or _nd.kept():    # Values in cycles through Python data of nodes: freed first
        import gc
        gc.collect()
    return _holds.collect()


# ------------------------------------------------------------ the fronts
# tapead.Value is the C type (csrc/python/value.c) on CPython, or the class
# above (the cffi front: PyPy's fast path, TAPEAD_FRONT=cffi on CPython).
# The C type implements what is hot in C; what is not is written once,
# above, and assigned onto it.
PyValue = Value
FRONT = "cffi"
_SHARED = ("__repr__", "__lt__", "__le__", "__gt__", "__ge__", "__array_ufunc__", "recompute",
           "_op", "_prev", "_children", "_local_grads", "_set_label", "label", "_backward",
           "__module__")
_DOCUMENTED = ("data", "grad", "backward", "maximum", "minimum", *(name for name, _ in UNARY))


class _InitSignature:
    """inspect.signature(Value) where the type's doc lost its signature line:
    the cffi Value's constructor, whose arguments the C type takes."""

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        import inspect
        return inspect.signature(PyValue)


def cpython_hooks() -> Dict[str, Any]:
    """The Python the CPython front calls, by name (csrc/python/value.h: VA_HOOKS),
    all bound in one call."""
    return dict(error=error, real=_real, restore=_restore, other=_other, setattr=_nd.set_attr,
                **_custom.cpython_hooks())


def _cpython_front() -> Any:
    """The C Value type, or None where this build has none (PyPy)."""
    if not _c.cpython_install():
        return None
    front: Any = sys.modules["tapead._cpython"]   # put there by ta_cpython_install
    docs = {k: getattr(PyValue, k).__doc__ or "" for k in _DOCUMENTED}
    # the constructor's signature, as CPython reads it off a C type's doc
    # (inspect.signature, help): the first line, then "--"
    docs["Value"] = ("Value(data, _children=(), _op='', label='', local_grads=None)\n--\n\n"
                     + (PyValue.__doc__ or ""))
    t = front.make_type(docs)
    for k in _SHARED:
        setattr(t, k, PyValue.__dict__[k])
    if t.__text_signature__ is None:   # CPython 3.9: PyType_FromSpec drops the doc's signature line
        t.__signature__ = _InitSignature()
    front.bind(**cpython_hooks())
    _custom.bind_cpython(front)
    _cprog.bind_cpython(front)
    return t


if not TYPE_CHECKING:
    _want = os.environ.get("TAPEAD_FRONT", "cpython")
    if _want == "native":   # the CPython front's older name, still accepted
        _want = "cpython"
    if _want not in ("cpython", "cffi"):
        raise ImportError(f"TAPEAD_FRONT must be 'cpython' or 'cffi', not {_want!r}")
    _nt = _cpython_front() if _want == "cpython" else None
    if _nt is not None:
        Value = _nt
        FRONT = "cpython"
        _adopt = sys.modules["tapead._cpython"].adopt

        def handles(h: Any, n: int, own: Any = None) -> List[Value]:  # held() reaches it through this global
            return _adopt(_holds.held_bytes(h), n, own)

# The layers below, which import no front, learn which Value is in use.
_custom.attach(sys.modules[__name__])
_nd.attach(Value)
