"""Graph drawing in the style of micrograd's trace_graph notebook.

One record per value (label | data | grad) and one small node per
operation, edges from inputs to op to output.  The rows come from the tape
in one C call (tapead.wengert), so this needs no Python graph walk.

to_dot() returns DOT source and needs nothing; draw_dot() returns a
graphviz.Digraph (pip install graphviz), which Jupyter shows as a picture
and .render() writes to a file, both with Graphviz's `dot` program.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Tuple

if TYPE_CHECKING:
    from .engine import Value

from . import _c
from ._c.graph import custom_plain
from .engine import op_text, read_checked
from .wengert import wengert


def _elements(root: Value) -> Iterator[Tuple[str, ...]]:
    """The drawing as ('node', name, label, shape) and ('edge', tail, head) items."""
    if not custom_plain([root._i]):   # the tape rows cannot hold a custom node
        yield from _elements_walk(root)
        return
    for r in wengert(root, adjoints=False).rows:
        nid = f"n{r['index']}"
        grad = read_checked(_c.adj, r["node"])
        label = r["label"] or ("" if r["op"] == "leaf" else r["name"])
        yield ("node", nid, f"{{ {_esc(label)} | data {r['value']:.4f} | grad {grad:.4f} }}", "record")
        if r["op"] != "leaf":
            yield ("node", nid + "op", _esc(op_text(r["op"], r["const"])), "ellipse")
            yield ("edge", nid + "op", nid)
            for a in r["args"]:
                yield ("edge", f"n{a}", nid + "op")


def _elements_walk(root: Value) -> Iterator[Tuple[str, ...]]:
    """_elements for a graph with custom nodes (any number of inputs): walked
    through _prev and _op, as micrograd's trace does."""
    nodes = {}
    stack = [root]
    while stack:
        v = stack.pop()
        if v._i not in nodes:
            nodes[v._i] = v
            stack.extend(v._prev)
    for i, v in nodes.items():
        nid, op = f"v{i}", v._op
        yield ("node", nid, f"{{ {_esc(v.label)} | data {v.data:.4f} | grad {v.grad:.4f} }}", "record")
        if op:
            yield ("node", nid + "op", _esc(op), "ellipse")
            yield ("edge", nid + "op", nid)
            for c in v._prev:
                yield ("edge", f"v{c._i}", nid + "op")


def to_dot(root: Value, rankdir: str = "LR") -> str:
    """DOT source of the graph behind `root`.

    >>> from tapead import Value
    >>> print(to_dot(Value(2.0, label="a") * 3).splitlines()[0])
    digraph {
    """
    lines = ["digraph {", f"  graph [rankdir={rankdir}]"]
    for e in _elements(root):
        if e[0] == "node":
            lines.append(f'  {e[1]} [label="{e[2]}" shape={e[3]}]')
        else:
            lines.append(f"  {e[1]} -> {e[2]}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _esc(s: str) -> str:
    for ch in '\\"{}|<>':
        s = str(s).replace(ch, "\\" + ch)
    return s


def draw_dot(root: Value, format: str = "svg", rankdir: str = "LR") -> Any:
    """A graphviz.Digraph of the graph behind `root` (micrograd's draw_dot).

    Needs the optional graphviz package, so this example is skipped in tests:

    >>> from tapead import Value
    >>> dot = draw_dot(Value(2.0, label="a") * 3)  # doctest: +SKIP
    >>> dot.source.splitlines()[0]  # doctest: +SKIP
    'digraph {'
    """
    try:
        import graphviz
    except ImportError as exc:
        from ._install import needs
        raise needs("draw", "draw_dot", "to render, Graphviz's dot program too (Debian/Ubuntu: "
                    "apt-get install graphviz; macOS: brew install graphviz); tapead.to_dot(root) "
                    "gives the DOT source without either") from exc
    dot = graphviz.Digraph(format=format, graph_attr={"rankdir": rankdir})
    for e in _elements(root):
        if e[0] == "node":
            dot.node(name=e[1], label=e[2], shape=e[3])
        else:
            dot.edge(e[1], e[2])
    return dot
