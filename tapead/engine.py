"""Value: micrograd's scalar, recorded on a C tape.

A Value is a handle: the id of its node on this thread's tape and the
token of the tape segment that node lives in (which keeps the segment
alive).  Every operator records one node with one C call and returns a new
handle; backward() is one C sweep.  Values hold no references to other
Values, so plain reference counting frees them and the cyclic garbage
collector has nothing to chase.

The operator bodies are written out rather than routed through a helper:
each extra Python call would cost about a tenth of an op.
"""
from __future__ import annotations

import numbers
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, SupportsFloat,
                    Tuple, Union)

from . import _core
from ._core import OP, OP_KINDS, OP_NAMES, NEWSEG, SHIFT, error

if TYPE_CHECKING:
    from ._core import _Tape, _Token

# What the operators take besides a Value: int, float, bool, numpy scalars
# (anything float() accepts through __float__).
Operand = Union["Value", SupportsFloat]

_leaf, _op1, _op2, _opc = _core.leaf, _core.op1, _core.op2, _core.opc
_val, _adj, _set_val, _set_adj = _core.val, _core.adj, _core.set_val, _core.set_adj
_tl = _core._tl
_backward = _core.lib.ta_backward
_recompute, _cmp2, _cmpc = _core.lib.ta_recompute, _core.lib.ta_cmp2, _core.lib.ta_cmpc
_ta_check = _core.lib.ta_check
_new = object.__new__
_tok: Optional[_Token] = None  # token of the fast-path thread's current tape segment


def claim(code: int) -> Tuple[int, Optional[_Token]]:
    """Slow path of every recording call: raise for an error status, or find
    the token for a node C could not vouch for (a new segment, or a thread
    other than the fast-path owner).  Returns (id, token)."""
    global _tok
    if code > NEWSEG:
        raise error(code)
    i = NEWSEG - code
    key = i >> SHIFT
    tok = getattr(_tl, "tok", None)
    if tok is None or tok.key != key:
        tok = getattr(_tl, "ngtok", None)
        if tok is None or tok.key != key:
            tok, fast = _core.new_token(key)
            if fast:
                _tok = tok
    return i, tok


def handles(ids: Iterable[int]) -> List[Value]:
    """Values for node ids that C made in one call (e.g. a sweep that records).

    Each gets a token of its own segment (one per distinct segment), never
    the fast path's current token, so the fast path stays consistent."""
    toks: Dict[int, _Token] = {}
    out: List[Value] = []
    append = out.append
    key = -(1 << 63)  # no id's key
    t: Optional[_Token] = None
    for i in ids:
        if i >> SHIFT != key:  # ids come in runs per segment: one lookup per run
            if i < 0:
                raise error(i)
            key = i >> SHIFT
            t = toks.get(key)
            if t is None:
                t = toks[key] = _core.new_token(key, 0)[0]
        v = _new(Value); v._i = i; v._t = t
        append(v)
    return out


def node_ids(values: Union[Value, Iterable[Value]], what: str = "values") -> Tuple[List[Value], Any]:
    """(the Values as a list, their node ids as a C int64 array) for a bulk C call.

    A single Value counts as a list of one; anything else in the list is a
    TypeError naming `what`.  The array has at least one slot, so C never
    gets a zero-length allocation."""
    try:
        vals = [values] if isinstance(values, Value) else list(values)
    except TypeError:
        raise TypeError(f"{what} must be a Value or an iterable of Values, "
                        f"not {type(values).__name__}") from None
    for v in vals:
        if not isinstance(v, Value):
            raise TypeError(f"{what} must be Values, not {type(v).__name__}")
    return vals, _core.ffi.new("int64_t[]", [v._i for v in vals] or [0])


def _drop_fast_token(tape: _Tape) -> None:
    """A recording thread ended: the global must not keep its tape alive."""
    global _tok
    if _tok is not None and _tok.tape is tape:
        _tok = None


_core.on_thread_exit.append(_drop_fast_token)


def release_current() -> None:
    """Let go of this thread's current segment token (before an explicit collect)."""
    global _tok
    if _tok is not None and _tok.tape is getattr(_tl, "tape", None):
        _tok = None  # only the fast-path thread's own global; another thread's stays
    _tl.tok = None


ADD, SUB, MUL, DIV, POW = OP["ADD"], OP["SUB"], OP["MUL"], OP["DIV"], OP["POW"]
ADDC, RSUBC, MULC, DIVC, RDIVC, POWC, RPOWC = (OP[k] for k in ("ADDC", "RSUBC", "MULC", "DIVC", "RDIVC",
                                                                "POWC", "RPOWC"))
RELU, TANH, EXP, LOG, SIGMOID = OP["RELU"], OP["TANH"], OP["EXP"], OP["LOG"], OP["SIGMOID"]
SIN, COS, SQRT, ABS, MAX, MIN = OP["SIN"], OP["COS"], OP["SQRT"], OP["ABS"], OP["MAX"], OP["MIN"]
_TINY = 2.2250738585072014e-308  # x / c is x * c**-1 where that is a normal float


def _real(x: Any) -> float:
    """x as a float if it is a real number, else TypeError: what the operators
    take (int, float, bool, numpy scalars numpy.bool among them, Fraction,
    Decimal: anything with __float__), so Value(x) works wherever v + x does."""
    if isinstance(x, numbers.Real) or (hasattr(type(x), "__float__") and not isinstance(x, complex)):
        try:
            return float(x)
        except TypeError:
            pass
    t = type(x)
    name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
    raise TypeError(f"Value() needs a real number (int, float, bool, a numpy scalar, ...), "
                    f"not {name}")


def _checked(i: int) -> None:
    """Raise for a handle whose id is unusable (foreign thread, forged)."""
    st = _ta_check(i)
    if st:
        raise error(st)


class Value:
    """A scalar that records how it was computed, so backward() can differentiate it.

    >>> a = Value(2.0); b = a * a + 3 * a
    >>> b.backward(); (b.data, a.grad)
    (10.0, 7.0)
    """
    __slots__ = ("_i", "_t", "__weakref__")
    _i: int                   # node id
    _t: Optional[_Token]      # token of the node's tape segment
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, data: SupportsFloat, _children: Tuple[()] = (), _op: str = "",
                 label: Optional[str] = "") -> None:
        if _children:
            raise TypeError("tapead records the graph itself: build Values with operators, "
                            "not with _children")
        if type(data) is not float:
            data = _real(data)
        i = _leaf(data)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        self._i = i
        self._t = t
        if label:
            from .wengert import set_label
            set_label(self, label)

    # ------------------------------------------------------------ data, grad
    @property
    def data(self) -> float:
        x = _val(self._i)
        if x != x:
            _checked(self._i)
        return x

    @data.setter
    def data(self, x: SupportsFloat) -> None:
        st = _set_val(self._i, x)
        if st:
            raise error(st)

    @property
    def grad(self) -> float:
        x = _adj(self._i)
        if x != x:
            _checked(self._i)
        return x

    @grad.setter
    def grad(self, x: SupportsFloat) -> None:
        st = _set_adj(self._i, x)
        if st:
            raise error(st)

    def backward(self) -> None:
        """Seed this node's gradient with 1 and sweep the tape back, in C."""
        st = _backward(self._i)
        if st:
            raise error(st, sweep="backward")

    # ------------------------------------------------------------- operators
    def __add__(self, other: Operand) -> Value:
        if type(other) is Value:
            i = _op2(ADD, self._i, other._i)
        else:
            try:
                i = _opc(ADDC, self._i, other)
            except TypeError:
                return _fallback(self, other, Value.__add__)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    __radd__ = __add__  # other + self: x + c == c + x exactly

    def __mul__(self, other: Operand) -> Value:
        if type(other) is Value:
            i = _op2(MUL, self._i, other._i)
        else:
            try:
                i = _opc(MULC, self._i, other)
            except TypeError:
                return _fallback(self, other, Value.__mul__)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    __rmul__ = __mul__  # other * self

    def __sub__(self, other: Operand) -> Value:
        if type(other) is Value:
            i = _op2(SUB, self._i, other._i)
        else:
            try:
                i = _opc(ADDC, self._i, -other)  # type: ignore[operator]  # x - c == x + (-c) exactly
            except TypeError:
                return _fallback(self, other, Value.__sub__)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __rsub__(self, other: Operand) -> Value:  # other - self
        try:
            i = _opc(RSUBC, self._i, other)
        except TypeError:
            return NotImplemented
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __truediv__(self, other: Operand) -> Value:
        if type(other) is Value:
            i = _op2(DIV, self._i, other._i)
        else:
            try:
                c = _const(other)
            except TypeError:
                return _fallback(self, other, Value.__truediv__)
            if c == 0.0:
                raise ZeroDivisionError("float division by zero")
            try:
                r = c ** -1.0  # micrograd: self * other**-1, so the same value to the bit
            except OverflowError:  # c subnormal: 1/c overflows (micrograd raises)
                r = 0.0
            if -_TINY < r < _TINY:  # that, or 1/c is subnormal and has lost bits: x / c itself
                i = _opc(DIVC, self._i, c)
            else:
                i = _opc(MULC, self._i, r)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __rtruediv__(self, other: Operand) -> Value:  # other / self
        try:
            i = _opc(RDIVC, self._i, other)
        except TypeError:
            return NotImplemented
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __pow__(self, other: Operand, modulo: None = None) -> Value:
        if modulo is not None:
            return NotImplemented
        if type(other) is Value:
            i = _op2(POW, self._i, other._i)
        else:
            try:
                i = _opc(POWC, self._i, other)
            except TypeError:
                return _fallback(self, other, Value.__pow__)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __rpow__(self, other: SupportsFloat, modulo: None = None) -> Value:  # other ** self
        if modulo is not None:
            return NotImplemented
        try:
            i = _opc(RPOWC, self._i, other)
        except TypeError:
            return NotImplemented
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def __neg__(self) -> Value:  # -self, as micrograd: self * -1
        return self._unary_c(MULC, -1.0)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return self._unary(ABS)

    # ------------------------------------------------------------- functions
    def _unary(self, op: int) -> Value:
        i = _op1(op, self._i)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def _unary_c(self, op: int, c: float) -> Value:
        i = _opc(op, self._i, c)
        if i < 0:
            i, t = claim(i)
        else:
            t = _tok
        v = _new(Value); v._i = i; v._t = t
        return v

    def relu(self) -> Value:
        """max(0, x), with micrograd's conventions: relu(-0.0) is -0.0, d/dx at 0 is 0."""
        return self._unary(RELU)

    def tanh(self) -> Value:
        """tanh(x) (C's tanh: accurate near 0 and never overflows, unlike micrograd's formula)."""
        return self._unary(TANH)

    def exp(self) -> Value:
        """e**x; OverflowError when it overflows, as math.exp."""
        return self._unary(EXP)

    def log(self) -> Value:
        """Natural log; ValueError for x <= 0, as math.log."""
        return self._unary(LOG)

    def sigmoid(self) -> Value:
        """1 / (1 + e**-x), evaluated without overflow."""
        return self._unary(SIGMOID)

    def sin(self) -> Value:
        """sin(x); ValueError for infinite x, as math.sin."""
        return self._unary(SIN)

    def cos(self) -> Value:
        """cos(x); ValueError for infinite x, as math.cos."""
        return self._unary(COS)

    def sqrt(self) -> Value:
        """sqrt(x); ValueError for x < 0, as math.sqrt."""
        return self._unary(SQRT)

    def abs(self) -> Value:
        """|x|; its derivative at 0 is taken as 0."""
        return self._unary(ABS)

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

    # ------------------------------------------------------ detach, pickle, copy
    def detach(self) -> Value:
        """A new leaf with the same data (its grad starts at 0)."""
        return Value(self.data)

    def __reduce__(self) -> Tuple[object, Tuple[float, float]]:
        # pickle, copy.copy and copy.deepcopy: a detached leaf, same data and grad
        return (_restore, (self.data, self.grad))

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
        if OP_KINDS[op] == 0:
            return ""
        return op_text(OP_NAMES[op], c if OP_KINDS[op] == 3 else None)

    @property
    def _prev(self) -> Set[Value]:
        """The Values this node was computed from, as micrograd's set.

        While a Value returned here is alive, the same node comes back as the
        same object, so a walk that keeps a set of visited Values (micrograd's
        trace) sees each node once.  (A Value you made yourself and the one
        found here for the same node may be two objects.)

        >>> x = Value(2.0); y = x * x + 3
        >>> [v._op for v in y._prev], [v.data for v in next(iter(y._prev))._prev]
        (['*'], [2.0])
        """
        op, x, y, _ = _node(self)
        _canon.setdefault(self._i, self)
        ids = [i for i in dict.fromkeys((x, y)) if i >= 0]
        out = {v for v in (_canon.get(i) for i in ids) if v is not None}
        for v in handles([i for i in ids if i not in _canon]):
            _canon[v._i] = v
            out.add(v)
        return out

    if TYPE_CHECKING:  # set by tapead.wengert (Value.label = property(...))
        @property
        def label(self) -> str: ...

        @label.setter
        def label(self, label: Optional[str]) -> None: ...


# node id -> the Value _prev gave for it, while that Value lives
_canon: "weakref.WeakValueDictionary[int, Value]" = weakref.WeakValueDictionary()


def _node(v: Value) -> Tuple[int, int, int, float]:
    """(op code, input x id or -1, input y id or -1, constant) of v's node.
    A no_grad result is a plain leaf."""
    p = _core.ffi.new("int *"); x = _core.ffi.new("int64_t *"); y = _core.ffi.new("int64_t *")
    c = _core.ffi.new("double *")
    st = _core.lib.ta_node(v._i, p, x, y, c)
    if st == _core.lib.TA_ENOGRAD:
        return OP["LEAF"], -1, -1, 0.0
    if st:
        raise error(st)
    return p[0], x[0], y[0], c[0]


def op_text(sym: str, c: Optional[float]) -> str:
    """An op as micrograd draws it: '+', '*', 'ReLU', with a constant '**2', '+1', '3/'."""
    if c is None:
        return sym
    return {"+c": f"+{c:g}", "c-": f"{c:g}-", "*c": f"*{c:g}", "/c": f"/{c:g}", "c/": f"{c:g}/",
            "**c": f"**{c:g}", "c**": f"{c:g}**"}.get(sym, sym)


def _compare(kind: int, a: Value, b: Operand) -> bool:
    if isinstance(b, Value):
        r = _cmp2(kind, a._i, b._i)
    else:
        try:
            r = _cmpc(kind, a._i, b)
        except TypeError:
            return NotImplemented  # type: ignore[no-any-return]  # (NotImplemented is typed Any)
    if r < 0:
        if r != _ENOGRAD:
            raise error(r)
        r = _compare_no_grad(kind, a, b)
    return r == 1


_ENOGRAD = _core.lib.TA_ENOGRAD
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


def _restore(data: float, grad: float) -> Value:
    v = Value(data)
    v.grad = grad
    return v


def _const(c: Any) -> float:
    """A plain-number operand as a float; TypeError for anything else."""
    if type(c) is float or type(c) is int:
        return float(c)
    return _real(c)


def _fallback(self: Value, other: object, method: Callable[[Value, Value], Value]) -> Value:
    """Slow path when `other` is not a plain number: a Value subclass, or unsupported."""
    if isinstance(other, Value):  # a subclass instance: lift it to the base class handle
        o = _new(Value); o._i = other._i; o._t = other._t
        return method(self, o)
    return NotImplemented  # type: ignore[no-any-return]  # (NotImplemented is typed Any)


def as_value(x: Operand) -> Value:
    """x itself if it is a Value, else a new leaf holding x."""
    return x if isinstance(x, Value) else Value(x)


def _binary_fn(op: int, a: Operand, b: Operand) -> Value:
    a, b = as_value(a), as_value(b)
    i = _op2(op, a._i, b._i)
    if i < 0:
        i, t = claim(i)
    else:
        t = _tok
    v = _new(Value); v._i = i; v._t = t
    return v


def maximum(a: Operand, b: Operand) -> Value:
    """max(a, b) as a Value (either may be a plain number).

    >>> import tapead
    >>> a, b = tapead.Value(2.0), tapead.Value(3.0)
    >>> m = tapead.maximum(a, b); m.backward(); (m.data, a.grad, b.grad)
    (3.0, 0.0, 1.0)
    >>> tapead.maximum(0.0, tapead.Value(-1.5))
    Value(data=0.0, grad=0.0)
    """
    return _binary_fn(MAX, a, b)


def minimum(a: Operand, b: Operand) -> Value:
    """min(a, b) as a Value (either may be a plain number).

    >>> import tapead
    >>> x = tapead.Value(2.0)
    >>> m = tapead.minimum(x, 0.5); m.backward(); (m.data, x.grad)
    (0.5, 0.0)
    >>> x = tapead.Value(2.0); m = tapead.minimum(x, 2.0); m.backward(); x.grad
    0.5
    """
    return _binary_fn(MIN, a, b)


def collect() -> int:
    """Reclaim now every tape segment no live Value can reach; returns segments freed.

    Never needed for bounded memory (the tape reclaims itself as it grows);
    useful before measuring memory.

    >>> import tapead
    >>> freed = tapead.collect()
    >>> freed >= 0
    True
    """
    release_current()
    return _core.collect()
