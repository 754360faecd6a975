"""tapead.take: an item of a list chosen by a Value (an index that is data).

``take(seq, i)`` is ``seq[i]``.  With ``i`` a plain int it is exactly that.
With ``i`` a Value (a whole number), the result is a node that records the
choice: its value is the item's, bit for bit, and backward() gives its
gradient to that item alone (the index gets none: it is a whole number).
What it adds is replay: a compiled Program (tapead.compile, tapead.jit)
picks again by the index's value at each run, so a graph that read
``wte[token]`` or ``probs[target]`` no longer depends on which token it
was recorded with, only on where the token sits.  seq may be a list of
rows (a matrix: an embedding table); the result is then the chosen row, as
a list of take nodes, one per column.

The index follows Python's list indexing: a whole number ``-len(seq) <= i
< len(seq)``, negative counting from the end; anything else is an
IndexError, when recorded and at every replay.  Under no_grad(), or with an
index that is a constant (a no_grad value), it is the plain pick.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Union

from ._c import bulk as _bulk
from ._c.graph import node as _node
from .custom import join_all
from .dots import _seq
from .engine import Value, _real, handles

__all__ = ["take"]


def _items(seq: Any) -> Sequence[Any]:
    """seq's items, copied once (what is read from here on cannot change)."""
    return _seq(seq, "take", "seq", "Values (or of rows of them)")


def _cell(x: Any, where: str) -> Value:
    """An item as a node: a Value, or a number made a leaf (a constant)."""
    if isinstance(x, Value):
        return x
    try:
        return Value(_real(x))
    except TypeError:
        raise TypeError(f"tapead.take: {where} is {type(x).__name__}: take picks among Values "
                        f"and numbers") from None


def _recorded(v: Value) -> Value:
    """v, or a leaf of its value if v is a no_grad value (a constant here)."""
    return v if _node(v._i) is not None else Value(v.data)


def take(seq: Sequence[Any], index: Union[int, Value]) -> Any:
    """seq[index], recorded so that a replay picks again by the index's value.

    index a Value: its value picks the item (a whole number, negative from
    the end); the result is a new node whose value is the item's and whose
    gradient goes to that item.  seq a list of rows: the chosen row, one
    node per column.  index an int: seq[index] itself.

    >>> from tapead import Value, take
    >>> xs = [Value(1.0), Value(2.0), Value(3.0)]; i = Value(2.0)
    >>> y = take(xs, i) * 10; y.backward()
    >>> y.data, [x.grad for x in xs], i.grad
    (30.0, [0.0, 0.0, 10.0], 0.0)
    """
    if not isinstance(index, Value):
        return seq[index]
    items = _items(seq)
    m = len(items)
    if not m:
        raise IndexError("tapead.take: seq is empty: there is nothing to take")
    rows = isinstance(items[0], (list, tuple))
    if rows:
        got: List[Sequence[Any]] = []
        for k, r in enumerate(items):
            if not isinstance(r, (list, tuple)):
                raise TypeError(f"tapead.take: seq[0] is a row but seq[{k}] is "
                                f"{type(r).__name__}: seq is a list of items or of rows")
            got.append(_items(r))
        ncols = len(got[0])
        for k, r in enumerate(got):
            if len(r) != ncols:
                raise ValueError(f"tapead.take: seq[0] has {ncols} items and seq[{k}] {len(r)}: "
                                 f"the rows of seq must all be as long")
        if not ncols:
            raise ValueError("tapead.take: the rows of seq are empty")
        cells = [_cell(x, f"seq[{k}][{j}]") for k, r in enumerate(got) for j, x in enumerate(r)]
    else:
        for k, x in enumerate(items):
            if isinstance(x, (list, tuple)):
                raise TypeError(f"tapead.take: seq[{k}] is a row but seq[0] is not: seq is a list "
                                f"of items or of rows")
        ncols = 1
        cells = [_cell(x, f"seq[{k}]") for k, x in enumerate(items)]

    def made(h: Any, n: int) -> List[Value]:
        return handles(h, n, join_all(cells + [index]))

    out = _bulk.take(index._i, [v._i for v in cells], m, ncols, made)
    if out == "constant" and _node(index._i) is not None:
        cells = [_recorded(v) for v in cells]            # a no_grad item: a constant leaf
        out = _bulk.take(index._i, [v._i for v in cells], m, ncols, made)
    if isinstance(out, str):                             # under no_grad, or a constant index
        k = _bulk.take_pick(index.data, m)
        return list(cells[k * ncols:(k + 1) * ncols]) if rows else cells[k]
    return out if rows else out[0]
