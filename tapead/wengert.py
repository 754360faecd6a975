"""The Wengert-list view of the tape behind a Value.

wengert(y) asks C for the rows behind y in one call (csrc/diff/tangent.c:
ta_trace), in tape order, with argument rows, values and, on request,
forward tangents and adjoints computed into separate buffers (no Value's
data or grad changes).  The table prints as aligned plain text in the
textbook's naming (Griewank & Walther): leaves are v(1-n)..v0 in order of
appearance, every other row v1..vl; leaves show their labels.

Labels live with their nodes (tapead/nodedata.py).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, SupportsFloat, Tuple

from ._c import KIND_BIN, KIND_CST, KIND_LEAF, OP_KINDS, OP_NAMES
from ._c.graph import trace
from ._opsurface import SHOW
from .engine import Value
from .forward import seeds
from .nodedata import get_label, label_of_id, set_label

__all__ = ["wengert", "Wengert", "get_label", "set_label"]

# ------------------------------------------------------------ the table
def _num(x: float, digits: int) -> str:
    return format(x, f".{digits}g")


class Wengert:
    """The rows of the tape behind a Value, in tape order (the output is last).

    .rows is a list of plain dicts (index, name, label, op, args, const,
    expr, value, tangent, adjoint, node); .columns the same as a dict of
    lists; str() an aligned plain-text table.

    >>> import tapead
    >>> x = tapead.Value(3.0, label="x"); t = tapead.wengert(x * x + 1)
    >>> len(t), t.columns["value"]
    (3, [3.0, 9.0, 10.0])
    >>> print(t)
    row  label  op    expression  value  adjoint
    ---  -----  ----  ----------  -----  -------
    v0   x      leaf  x               3        6
    v1          *     v0 * v0         9        1
    v2          +c    v1 + 1.0       10        1
    """

    def __init__(self, rows: List[Dict[str, Any]], has_tangent: bool, has_adjoint: bool) -> None:
        self.rows = rows
        self.has_tangent = has_tangent
        self.has_adjoint = has_adjoint

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, k: int) -> Dict[str, Any]:
        return self.rows[k]

    @property
    def columns(self) -> Dict[str, List[Any]]:
        """The rows as a dict of equal-length lists (pandas.DataFrame accepts it)."""
        keys = list(self.rows[0]) if self.rows else []
        return {k: [r[k] for r in self.rows] for k in keys}

    def _cells(self, digits: int) -> Tuple[List[str], List[List[str]]]:
        """(the header, each row's cells), numbers to `digits` significant digits."""
        head = ["row", "label", "op", "expression", "value"]
        if self.has_tangent:
            head.append("tangent")
        if self.has_adjoint:
            head.append("adjoint")
        body = []
        for r in self.rows:
            line = [r["name"], r["label"], r["op"], r["expr"], _num(r["value"], digits)]
            if self.has_tangent:
                line.append(_num(r["tangent"], digits))
            if self.has_adjoint:
                line.append(_num(r["adjoint"], digits))
            body.append(line)
        return head, body

    def format(self, digits: int = 6) -> str:
        """The table as aligned plain text, numbers to `digits` significant digits."""
        head, body = self._cells(digits)
        width = [max(len(str(c)) for c in col) for col in zip(head, *body)]
        right = [False, False, False, False] + [True] * (len(head) - 4)

        def fmt(cells: List[str]) -> str:
            return "  ".join(c.rjust(w) if rj else c.ljust(w)
                             for c, w, rj in zip(cells, width, right)).rstrip()
        rule = "  ".join("-" * w for w in width)
        return "\n".join([fmt(head), rule] + [fmt(b) for b in body])

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"<Wengert list: {len(self.rows)} rows>\n{self.format()}"

    def _repr_html_(self) -> str:
        """The table as HTML, which Jupyter shows for a Wengert list."""
        from html import escape
        head, body = self._cells(6)

        def tr(cells: List[str], tag: str) -> str:
            return "<tr>" + "".join(f"<{tag}>{escape(str(c))}</{tag}>" for c in cells) + "</tr>"
        return ("<table>\n<thead>" + tr(head, "th") + "</thead>\n<tbody>\n"
                + "\n".join(tr(b, "td") for b in body) + "\n</tbody>\n</table>")


def wengert(output: Value, inputs: Optional[Iterable[Value]] = None,
            tangents: Optional[Iterable[SupportsFloat]] = None, adjoints: bool = True) -> Wengert:
    """The Wengert list (tape rows) behind `output`, as a Wengert table.

    inputs, tangents: seed these Values with these tangents to add a
    forward-mode `tangent` column (as tapead.jvp).  adjoints: add the
    `adjoint` column, d output / d row, from a separate reverse sweep
    (leaves' .grad is not changed).

    >>> from tapead import Value
    >>> x = Value(3.0, label="x"); t = wengert(x * x + 1, [x], [1.0])
    >>> [r["value"] for r in t.rows], t.rows[-1]["tangent"]
    ([3.0, 9.0, 10.0], 6.0)
    """
    if not isinstance(output, Value):
        raise TypeError(f"wengert: output must be a Value, not {type(output).__name__}")
    if (inputs is None) != (tangents is None):
        raise ValueError("wengert: give inputs and tangents together (or neither)")
    if inputs is not None:
        nin, ids, ts = seeds(inputs, tangents, "wengert")  # type: ignore[arg-type]  # (given together)
    else:
        nin, ids, ts = 0, None, None
    return _table(trace(output._i, nin, ids, ts, bool(adjoints)))


def _table(out: Dict[str, List[Any]]) -> Wengert:
    ops = out["op"]
    n = len(ops)
    xs, ys, cs = out["x"], out["y"], out["c"]
    vals, ids = out["val"], out["id"]
    tans, adjs = out.get("tan"), out.get("adj")
    has_tan, has_adj = tans is not None, adjs is not None
    nleaf = sum(1 for o in ops if OP_KINDS[o] == KIND_LEAF)
    names, leaf_k, op_k = [], 1 - nleaf, 1
    for o in ops:
        if OP_KINDS[o] == KIND_LEAF:
            names.append(f"v{leaf_k}"); leaf_k += 1
        else:
            names.append(f"v{op_k}"); op_k += 1
    rows = []
    args: Tuple[int, ...]
    for k in range(n):
        o, kind, sym = ops[k], OP_KINDS[ops[k]], OP_NAMES[ops[k]]
        label = label_of_id(ids[k])
        const = cs[k] if kind == KIND_CST else None
        if kind == KIND_LEAF:
            args, expr = (), label or "input"
        else:   # as the op table shows the op (csrc/api/ops.def: FORM)
            args = (xs[k], ys[k]) if kind == KIND_BIN else (xs[k],)
            expr = SHOW[o](names[xs[k]], names[ys[k]] if kind == KIND_BIN else "",
                           repr(const) if kind == KIND_CST else "")
        row = {"index": k, "name": names[k], "label": label, "op": sym, "args": args,
               "const": const, "expr": expr, "value": vals[k]}
        if has_tan:
            row["tangent"] = tans[k]  # type: ignore[index]  # (set when has_tan)
        if has_adj:
            row["adjoint"] = adjs[k]  # type: ignore[index]  # (set when has_adj)
        row["node"] = ids[k]
        rows.append(row)
    return Wengert(rows, has_tan, has_adj)
