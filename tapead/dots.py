"""tapead.dot and tapead.linear: the weighted sums a model is made of, each
recorded in one C call (csrc/fused/nn.c, the core tapead.nn.Layer records with).

`dot(ws, xs)` records exactly the nodes `sum(w * x for w, x in zip(ws, xs))`
records -- per term a product (MUL, or MULC where one side is a plain
number), then a sum node, left to right, starting from 0 as sum() does --
so its value and every gradient are those of the generator, bit for bit.
`linear(x, W)` is `[dot(row, x) for row in W]` in one call.  A plain
number is any real number the operators take (engine._real: int, float,
bool, numpy scalars, ...).

What is defined here holds on both fronts: the CPython front's dot and
linear (csrc/python/dots.c) take the common case themselves (lists or tuples of
this thread's Values and floats, every row's first term with a Value) and
hand every other call to _dot / _linear below.  Those check everything
before anything is recorded, so a failed call records nothing:

- a leading run of plain-number terms is summed by Python's own sum()
  (exactly what the generator does before it meets a Value) and enters as
  the constant of the first Value term's ADDC; a row of numbers only gives
  that number, as sum() would;
- inside no_grad() or detect_anomaly(), with a Value made under no_grad(),
  or where two numbers after the first Value term multiply to other than
  their floats' product (two ints, whose product Python keeps an int: 0 *
  -1 is 0, not -0.0; an int beyond 2**53; any number but an int or a
  float: numpy's float32 multiplies in float32), the call runs
  `sum(map(operator.mul, row, x))`: the generator itself.

The operands are read once, from copies of the caller's lists (or from
them where nothing can run Python meanwhile: csrc/python/dots.c), so a
finalizer that changes those lists during the call (one may run at any
allocation) changes nothing here: the call sees them as they were, or, if
they changed before they were read, as they are.
"""
from __future__ import annotations

import sys
from operator import mul
from typing import TYPE_CHECKING, Any, Callable, List, Sequence, Tuple, Union, overload

from ._c import bulk as _bulk
from .custom import join, join_all
from .engine import FRONT, Operand, Value, _real, handles

__all__ = ["dot", "linear"]

_EXACT = 2 ** 53      # ints up to this size are doubles exactly


def _seq(s: Any, fn: str, name: str, items: str = "Values and numbers") -> Sequence[Any]:
    """s's items, as a tuple s itself or a new list (a list is copied in one
    step, list(): what is read from here on cannot change, even if a
    finalizer changes s, and it keeps the Values in it alive); a TypeError
    naming tapead.fn's argument name and what its items must be otherwise."""
    if type(s) is tuple:
        return s
    if isinstance(s, (list, tuple)):
        return list(s)
    if not isinstance(s, (Value, str, bytes, int, float)):
        try:
            return list(s)
        except TypeError:
            pass
    raise TypeError(f"tapead.{fn}: {name} must be a sequence of {items}, not {type(s).__name__}")


def _operands(seq: Sequence[Any], fn: str, name: str) -> Tuple[List[Any], List[Any]]:
    """(Values, constants): a Value and 0.0, or None and the number (a float,
    or an int: converted where it meets a Value, as the operator does, while
    Python multiplies two numbers exactly; any other real number the
    operators take, engine._real, is kept as it is: numpy's float32 or int64
    multiply as numpy does, which only the generator itself reproduces).
    The Values, not their ids: the conversions here and the products in
    _record may run Python (a float subclass), which may move a Value to
    another node; _ids reads them once nothing more runs."""
    vals: List[Any] = []
    cs: List[Any] = []
    for i, v in enumerate(seq):
        if isinstance(v, Value):
            vals.append(v)
            cs.append(0.0)
        elif isinstance(v, float):
            vals.append(None)
            cs.append(float(v))
        elif isinstance(v, int):
            vals.append(None)
            cs.append(int(v))
        else:
            try:
                _real(v)
            except TypeError:
                raise TypeError(f"tapead.{fn}: {name}[{i}] is {type(v).__name__}: {fn} takes "
                                f"Values and real numbers (int, float, numpy scalars, ...)") from None
            vals.append(None)
            cs.append(v)
    return vals, cs


def _ids(vals: List[Any]) -> List[int]:
    """Node ids for C, read last (engine.ids_of says why): -1 for a number."""
    return [-1 if v is None else v._i for v in vals]


def _exact(a: Any, b: Any) -> bool:
    """Whether a * b of two numbers is float(a) * float(b) to the bit: for a
    float and a float or an int, not for two ints (their product is an int:
    0 * -1 is 0, not -0.0) nor an int beyond 2**53 (not a double exactly),
    nor any other number (numpy's float32 multiplies in float32)."""
    if type(a) is int:
        return type(b) is float and -_EXACT <= a <= _EXACT
    if type(a) is float:
        return type(b) is float or (type(b) is int and -_EXACT <= b <= _EXACT)
    return False


def _record(fn: str, rows: List[Sequence[Any]], wname: List[str], x: Sequence[Any],
            xname: str) -> List[Any]:
    nin = len(x)
    xv, xc = _operands(x, fn, xname)
    ws = [_operands(row, fn, wname[j]) for j, row in enumerate(rows)]
    out: List[Any] = [None] * len(rows)
    wv: List[Any] = []            # the rows' Values (None: a number), then their ids
    wc: List[float] = []
    c0: List[float] = []
    start: List[int] = []
    live: List[int] = []          # the rows with nodes
    xcf = [0.0] * nin             # x's constants as C reads them
    generator = False             # a product of two numbers is Python's: the generator records
    for j, (rv, rc) in enumerate(ws):
        f = 0
        while f < nin and rv[f] is None and xv[f] is None:
            f += 1
        head = sum(map(mul, rows[j][:f], x[:f])) if f else 0
        if f == nin:
            out[j] = head                    # plain numbers only: sum()'s own number
            continue
        cw = [0.0] * nin
        for i in range(f, nin):
            # every term checked as the generator meets it, so that what it
            # would raise is raised here, before anything is recorded
            if rv[i] is None and xv[i] is None:
                if _exact(rc[i], xc[i]):
                    cw[i], xcf[i] = float(rc[i]), float(xc[i])
                else:                         # Python's product, as a Value's ADDC takes it
                    _real(rc[i] * xc[i])
                    generator = True
            elif rv[i] is None:
                cw[i] = _real(rc[i])          # a huge int: OverflowError, as w * x would raise
            elif xv[i] is None:
                xcf[i] = _real(xc[i])
            if i == f:
                c0.append(_real(head))        # head + the first Value term
        start.append(f)
        wv.extend(rv)
        wc.extend(cw)
        live.append(j)
    if generator:
        return [sum(map(mul, r, x)) for r in rows]
    if live:
        vals = _bulk.dots(_ids(wv), wc, len(live), nin, _ids(xv), xcf, c0, start,
                          _carrying(rows, x))
        if vals is None:    # no_grad, detect_anomaly, a no_grad Value: the generator itself
            return [sum(map(mul, r, x)) for r in rows]
        for j, v in zip(live, vals):
            out[j] = v
    return out


def _dot(ws: Sequence[Operand], xs: Sequence[Operand]) -> Union[Value, float, int]:
    """sum(w * x for w, x in zip(ws, xs)), recorded in one C call.

    The same nodes, values and gradients as the generator, bit for bit;
    Values or numbers on either side (a sum of numbers only is that number).

    >>> from tapead import Value, dot
    >>> w = [Value(2.0), Value(-1.0)]; x = [Value(3.0), 0.5]
    >>> y = dot(w, x); y.backward()
    >>> (y.data, w[0].grad, w[1].grad, x[0].grad)
    (5.5, 3.0, 0.5, 2.0)
    """
    ws, xs = _seq(ws, "dot", "ws"), _seq(xs, "dot", "xs")
    if len(ws) != len(xs):
        raise ValueError(f"tapead.dot: ws has {len(ws)} items and xs {len(xs)}: "
                         f"a dot product needs one weight per input")
    if not ws:
        raise ValueError("tapead.dot: ws and xs are empty: a dot product needs at least one term")
    return _record("dot", [ws], ["ws"], xs, "xs")[0]  # type: ignore[no-any-return]


def _linear(x: Sequence[Operand], W: Sequence[Sequence[Operand]]) -> List[Any]:
    """[dot(row, x) for row in W], recorded in one C call.

    >>> from tapead import Value, linear
    >>> x = [Value(1.0), Value(2.0)]
    >>> [y.data for y in linear(x, [[Value(3.0), Value(4.0)], [0.5, Value(-1.0)]])]
    [11.0, -1.5]
    """
    x, W = _seq(x, "linear", "x"), _seq(W, "linear", "W")
    if not W:
        raise ValueError("tapead.linear: W has no rows")
    if not x:
        raise ValueError("tapead.linear: x is empty: each row's dot product needs at least one term")
    rows = [_seq(r, "linear", f"W[{j}]") for j, r in enumerate(W)]
    for j, r in enumerate(rows):
        if len(r) != len(x):
            raise ValueError(f"tapead.linear: W[{j}] has {len(r)} items and x {len(x)}: "
                             f"each row of W needs one weight per item of x")
    return _record("linear", rows, [f"W[{j}]" for j in range(len(rows))], x, "x")


def _carrying(rows: Sequence[Sequence[Any]], x: Sequence[Any]) -> Callable[[Any, int], List[Any]]:
    """handles() whose Values carry what the operands' Values carry
    (custom.join_all), read once the call has recorded, from the copies it
    read (_seq, sums_fast: a generator is never consumed here)."""
    def made(h: Any, n: int) -> List[Any]:
        own = join_all(x)
        for r in rows:
            own = join(own, join_all(r))
        return handles(h, n, own)
    return made


def _dot_cffi(ws: Sequence[Operand], xs: Sequence[Operand]) -> Union[Value, float, int]:
    out = _bulk.sums_fast((ws,), xs, Value, _carrying)   # the common case, else everything above
    return out[0] if out is not None else _dot(ws, xs)


def _linear_cffi(x: Sequence[Operand], W: Sequence[Sequence[Operand]]) -> List[Any]:
    out = _bulk.sums_fast(W, x, Value, _carrying)
    return out if out is not None else _linear(x, W)


if TYPE_CHECKING:
    # What a type checker sees: a dot with a Value on either side is a Value
    # (every term records), one of numbers only is that number, as sum() gives.
    @overload
    def dot(ws: Sequence[Value], xs: Sequence[Operand]) -> Value: ...
    @overload
    def dot(ws: Sequence[Operand], xs: Sequence[Value]) -> Value: ...
    @overload
    def dot(ws: Sequence[int], xs: Sequence[int]) -> int: ...
    @overload
    def dot(ws: Sequence[float], xs: Sequence[float]) -> float: ...
    @overload
    def dot(ws: Sequence[Operand], xs: Sequence[Operand]) -> Union[Value, float, int]: ...
    def dot(ws: Sequence[Operand], xs: Sequence[Operand]) -> Union[Value, float, int]: ...

    @overload
    def linear(x: Sequence[Value], W: Sequence[Sequence[Operand]]) -> List[Value]: ...
    @overload
    def linear(x: Sequence[Operand], W: Sequence[Sequence[Value]]) -> List[Value]: ...
    @overload
    def linear(x: Sequence[Operand], W: Sequence[Sequence[Operand]]) -> List[Union[Value, float, int]]: ...
    def linear(x: Sequence[Operand], W: Sequence[Sequence[Operand]]) -> Sequence[Union[Value, float, int]]: ...
elif FRONT == "cpython":  # C takes the common case (csrc/python/dots.c), then the general path
    dot, linear = sys.modules["tapead._cpython"].dots(dot=_dot, linear=_linear)
else:                     # _c.bulk.sums_fast takes the common case, then the general path
    _dot_cffi.__doc__, _linear_cffi.__doc__ = _dot.__doc__, _linear.__doc__
    dot, linear = _dot_cffi, _linear_cffi
