"""Schedules: transforms of the lowered statements (lower.py), on objects.

- **Storage**: where a row's values and adjoints live.
  ``Locals`` (each node's rows a local array; an adjoint row's first term
  assigns it, a row read before any term is zeroed there: ``first_writes``),
  ``Frame`` (rows node by node in memory, every adjoint row zeroed when the
  reverse sweep starts: what the split shape's functions share), ``Dense``
  (only the rows that are used, one after another, numbered in the order the
  sweeps first use them: the rows shape's chunk of rows).
- **Split** (``split``): a sweep cut into functions of n statements, a
  function the modes share written once.
- **Layer fusion** (``fuse_forward``, ``fuse_reverse``) and **merged runs**
  (``merged``), for the rows shape: a network's layer is a run of dots over
  the same rows; a layer's dots, fused, share their loads and give the CPU
  several independent sums at once; a run of an op's loop calls whose rows
  step evenly (a layer's relus) is one call.  Each sum keeps its own order
  of operations (forward: each dot's terms in order; reverse: each adjoint
  row's terms dot by dot, each accumulator's rows in order), so the bits
  are the interpreter's.  Statements move only across statements whose rows
  they neither read nor write.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .._c import OP
from .code import NONE, Code, literal
from .lower import (Acc, Dot, DotRev, Grads, Guard, Input, Op, Output, Row, UDot, UDotRev, UOp, URev, URevSum,
                    Zero, dests, reads, with_dests)

__all__ = ["first_writes", "Dense", "uniform_dots", "fused_nodes", "fuse_uniform", "split", "LoopCall", "FDot", "RDot", "layer_dot", "fuse_forward",
           "fuse_reverse", "merged", "FBLOCK", "RBLOCK", "RTILE"]


# ------------------------------------------------------------ storage
def first_writes(stmts: List[Any]) -> List[Any]:
    """(Locals) stmts with each adjoint row's first term marked (Row.first: it
    assigns the row, one add fewer than the interpreter's +0.0 plus it, the
    same bits up to the sign of a zero: lower.py), a Zero before a row's read
    where nothing was added to it yet, and a per-sample gradient read out of
    a row whose first term was assigned given + 0.0 (Grads.plus0)."""
    written: Dict[int, bool] = {}          # node -> its row's first write was an assignment
    out: List[Any] = []
    for s in stmts:
        for k in reads(s):
            if k not in written:
                written[k] = False
                out.append(Zero(k))
        ds = dests(s)
        if ds:
            new = []
            for d in ds:
                if isinstance(d, Row):
                    first = d.k not in written
                    if first:
                        written[d.k] = True
                    d = Row(d.k, first)
                new.append(d)
            s = with_dests(s, new)
        if isinstance(s, Grads):
            s = Grads(tuple((j, k, k != NONE and bool(written.get(k))) for j, k, _ in s.items))
        out.append(s)
    return out


class Dense:
    """(Dense) The rows a chunk's sweeps use, numbered in the order of first
    use: vi (values), di (adjoints)."""

    def __init__(self, code: Code) -> None:
        self.code = code
        self.vi: Dict[int, int] = {}
        self.di: Dict[int, int] = {}

    def v(self, k: int) -> int:
        if k not in self.vi:
            self.vi[k] = len(self.vi)
        return self.vi[k]

    def d(self, k: int) -> int:
        if k not in self.di:
            self.di[k] = len(self.di)
        return self.di[k]

    def number(self, stmts: List[Any]) -> None:
        """Number the rows stmts use, in order (a forward statement: its operands
        then its node; a guard: b then a; a reverse statement: the adjoint rows
        it reads, then those it adds to)."""
        C = self.code
        for s in stmts:
            if isinstance(s, Input):
                self.v(s.k)
            elif isinstance(s, Dot):
                for n in [s.k, s.x] + [o for pq in s.terms for o in pq]:
                    if not C.uni[n]:
                        self.v(n)
            elif isinstance(s, Op):
                for n in (s.x, s.y if s.y >= 0 else -1, s.k):
                    if n >= 0 and not C.uni[n]:
                        self.v(n)
            elif isinstance(s, Guard):
                for n in ((s.a,) if s.cst else (s.b, s.a)):
                    if not C.uni[n]:
                        self.v(n)
            elif isinstance(s, Output):
                if not C.uni[s.k]:
                    self.v(s.k)
            else:
                for k in reads(s):
                    self.d(k)
                for dd in dests(s):
                    if isinstance(dd, Row):
                        self.d(dd.k)


# ------------------------------------------------------------ uniform dots
def uniform_dots(code: Code) -> Dict[int, UDot]:
    """The dots among the uniform nodes, by their last node: a run of
    ADD(acc, MUL(p, q)) uniform nodes (csrc/replay/code.c finds the same among row
    nodes) whose products and partial sums nothing else reads, next to one
    another among the uniform nodes (so nothing between them adds to the
    adjoints they add to: fused, the reverse adds its terms at once, in the
    unfused order); a start that is ADDC(MUL(p, q), c) of the same kind is
    the dot's first term and c its start (sum() adds to 0: c + p * q is
    p * q + c).  A GPT's weighted sums over parameters are such dots."""
    C = code
    ADD, ADDC, MUL = OP["ADD"], OP["ADDC"], OP["MUL"]
    uses = [0] * C.n
    for k in range(C.n):
        kind = C.kind(k)
        if kind not in ("LEAF", "NARY"):
            uses[C.a[k]] += 1
            if kind == "BIN":
                uses[C.b[k]] += 1
    pinned = set(C.out)
    for a, b, _, _, cst, _ in C.guards:
        pinned.add(a)
        if not cst:
            pinned.add(b)
    pos = {k: i for i, k in enumerate(C.uops)}
    dotadd: Set[int] = set()
    gone: Set[int] = set()
    for k in C.uops:
        if C.op[k] != ADD:
            continue
        x, m = C.a[k], C.b[k]
        if (C.op[m] != MUL or uses[m] != 1 or m in pinned or m == x or not C.uni[m]
                or pos.get(m) != pos[k] - 1):
            continue
        dotadd.add(k)
        gone.add(m)
        if x in dotadd and uses[x] == 1 and x not in pinned and pos[x] == pos[m] - 1:
            gone.add(x)
    out: Dict[int, UDot] = {}
    for k in C.uops:
        if k in dotadd and k not in gone:
            terms = []
            s = k
            while True:
                m = C.b[s]
                terms.append((C.a[m], C.b[m], m, s))
                s = C.a[s]
                if s not in gone:
                    break
            start, c = s, 0.0
            m0 = C.a[s]
            if (C.op[s] == ADDC and uses[s] == 1 and s not in pinned and pos.get(s) == pos[terms[-1][2]] - 1
                    and C.op[m0] == MUL and uses[m0] == 1 and m0 not in pinned and pos.get(m0) == pos[s] - 1):
                terms.append((C.a[m0], C.b[m0], m0, s))       # sum(...) starts at 0: 0 + p0 * q0 + ...
                start, c = -1, C.c[s]
            out[k] = UDot(k, start, tuple(reversed(terms)), c)
    return out


def fused_nodes(dots: Dict[int, UDot]) -> Set[int]:
    """Every node of the dots (their products and partial sums, heads included)."""
    return {n for d in dots.values() for t in d.terms for n in (t[2], t[3])}


def fuse_uniform(stmts: List[Any], dots: Dict[int, UDot], code: Code, sum_: bool) -> List[Any]:
    """stmts (the uniform forward's UOps, or the reverse's URevSum / URev,
    or the partials) with each dot's statements replaced by one at its last
    node (a UDot, a UDotRev) or, partials, left out (a dot needs none)."""
    nodes = fused_nodes(dots)
    out: List[Any] = []
    done: Set[int] = set()
    for s in stmts:
        k = getattr(s, "k", None)
        if k is None or k not in nodes:
            out.append(s)
            continue
        d = dots.get(k)
        if d is None or k in done:
            continue
        done.add(k)
        if isinstance(s, UOp):
            out.append(d)
        elif isinstance(s, (URevSum, URev)):
            def adj(n: int) -> int:
                return n if n >= 0 and code.dloc[n] != NONE else -1
            out.append(UDotRev(d.k, adj(d.x), tuple((p, q, adj(p), adj(q)) for p, q, _, _ in d.terms), sum_))
    return out


# ------------------------------------------------------------ split
def split(items: List[Any], n: int, parts: Dict[Tuple[Any, ...], int]) -> List[int]:
    """items (statements, each one printed statement) cut into runs of n: the
    number of each run's function in parts (a run -> its number), which
    gains the runs it lacks; equal runs (of another mode) share one."""
    out = []
    for i in range(0, len(items), n):
        run = tuple(items[i:i + n])
        if run not in parts:
            parts[run] = len(parts)
        out.append(parts[run])
    return out


# ------------------------------------------------------------ layers (rows shape)
# Measured on the demo's network (16 x 16 layers; docs/native.md): a loop's
# start and end cost more than spilling its sums, so the reverse takes a
# whole layer a loop (up to RBLOCK dots, RTILE // dots products each: a
# layer of 16 in 8 loops; 4 dots a loop, 32 loops, were 6-9% slower, and no
# fusion 10% slower); the forward takes FBLOCK dots a loop (2: 3-7% slower;
# 6 or 8: the same as 4).
FBLOCK = 4
RBLOCK = 16
RTILE = 32

Ref = Tuple[str, int]     # a dense row: ("V" or "D", its number)


class LoopCall:
    """A call of an op's loop function (printed by rows.py): forward (fwd:
    ta_f_OP, which reports failures) or reverse (ta_r_OP); its rows (None:
    NULL): forward x, y, r; reverse x, y, r, g, ax, ay; the constant k's;
    for one row or, with steps (rows), a run of rows."""

    def __init__(self, fwd: bool, op: int, k: int, ptrs: List[Optional[Ref]],
                 reads: Set[int], writes: Set[int]) -> None:
        self.fwd, self.op, self.k, self.ptrs = fwd, op, k, ptrs
        self.reads: Optional[Set[int]] = reads
        self.writes = writes
        self.rows, self.steps = 1, [0] * len(ptrs)

    def same_function(self, o: "LoopCall", code: Code) -> bool:
        return (self.fwd, self.op) == (o.fwd, o.op) and (
            code.kind(self.k) != "CST" or literal(code.c[self.k]) == literal(code.c[o.k]))


class Barrier:
    """A statement printed as it is, which nothing moves across."""
    reads: Optional[Set[int]] = None
    writes: Set[int] = set()

    def __init__(self, stmt: Any) -> None:
        self.stmt = stmt


class FDot:
    """A forward dot in vectors of four rows, reading the rows of the nodes in reads."""

    def __init__(self, dot: Dot, code: Code) -> None:
        self.dot, self.k = dot, dot.k
        self.reads = {o for o in [dot.x] + [n for pq in dot.terms for n in pq] if not code.uni[o]}


class RDot:
    """A layer dot's reverse (layer_dot): node k's adjoint row; start, the
    accumulator of its start's adjoint; per product, in the statement form's
    order, (x node, w's accumulator or None, x's adjoint row or None, w)."""

    def __init__(self, k: int, start: Optional[int], cols: List[Tuple[int, Optional[int], bool, int]]) -> None:
        self.k, self.start, self.cols = k, start, cols
        self.key = tuple(c[0] for c in cols)
        self.writes = {c[0] for c in cols if c[2]}
        self.fresh: Set[int] = set()          # adjoint rows its loop assigns (fuse_reverse)


def layer_dot(s: DotRev, code: Code) -> Optional[RDot]:
    """(summed) Dot s's reverse as an RDot if it is a layer's: each product a
    uniform w times a row x, the xs distinct, the start uniform or without an
    adjoint; else None."""
    C = code
    k, x = s.k, s.x
    cols = []
    for p, q in reversed(s.products):
        if bool(C.uni[p]) == bool(C.uni[q]):
            return None
        cols.append((p, q) if C.uni[p] else (q, p))
    if len({xr for _, xr in cols}) < len(cols) or (not C.uni[x] and C.dloc[x] != NONE):
        return None
    start = next((t.dest.i for t in s.terms if t.kind == "start" and isinstance(t.dest, Acc)), None)
    accs = {t.other: t.dest.i for t in s.terms if t.kind == "mul" and isinstance(t.dest, Acc)}
    return RDot(k, start, [(xr, accs.get(xr), C.dloc[xr] != NONE, w) for w, xr in cols])


def _fuse(items: List[Any], kind: type, conflict: Callable[[List[Any], List[Any], Any], bool],
          movable: Callable[[List[Any], Any], bool],
          emit: Callable[[List[Any], List[Any]], List[Any]]) -> List[Any]:
    """items in order, each run of items of kind fused: one joins the run
    unless conflict(run, moved, it); a statement inside a run moves (into
    moved, which emit places with the run) if movable(run, statement), else
    it ends the run; a statement without rows (reads None) ends it."""
    out: List[Any] = []
    run: List[Any] = []
    moved: List[Any] = []
    for it in items + [None]:
        dot = isinstance(it, kind)
        if dot and not (run and conflict(run, moved, it)):
            run.append(it)
        elif run and it is not None and not dot and it.reads is not None and movable(run, it):
            moved.append(it)
        else:
            out += emit(run, moved) if run else []
            run, moved = ([it] if dot else []), []
            if it is not None and not dot:
                out.append(it)
    return out


def fuse_forward(items: List[Any], code: Code) -> List[Any]:
    """The forward items, runs of dots fused FBLOCK at a time (a list of
    FDots); the loop calls between them (a layer's relus) move after the
    run, which never reads their rows (a row is written once), merged."""
    return _fuse(items, FDot,
                 lambda run, moved, d: bool(d.reads & ({e.k for e in run} | {w for t in moved for w in t.writes})),
                 lambda run, t: True,
                 lambda run, moved: ([run[i:i + FBLOCK] for i in range(0, len(run), FBLOCK)]
                                     + merged(moved, code)))


def fuse_reverse(items: List[Any], code: Code, added: Set[int], assigned: Set[int]) -> List[Any]:
    """The reverse items, runs of layer dots over the same rows fused RBLOCK
    at a time (a list of RDots, with the products a loop takes); the loop
    calls between them (a layer's relus) move before the run when they touch
    none of its rows.  added: the adjoint rows written before the run; an
    adjoint row nothing has written yet starts at its first term in the
    run's loop (RDot.fresh), which assigned gains, and is not zeroed."""
    def writes(run: List[RDot]) -> Set[int]:
        return {w for d in run for w in d.writes}

    def emit(run: List[RDot], moved: List[Any]) -> List[Any]:
        out = merged(moved, code)
        for i in range(0, len(run), RBLOCK):
            blk = run[i:i + RBLOCK]
            for c in blk[0].cols:
                if c[2] and c[0] not in added and c[0] not in assigned:
                    assigned.add(c[0])
                    blk[0].fresh.add(c[0])
            out.append((blk, max(1, RTILE // len(blk))))
        return out

    return _fuse(items, RDot,
                 lambda run, moved, d: (d.key != run[0].key or d.k in writes(run)
                                        or bool(d.writes & {e.k for e in run})),
                 lambda run, t: not ((t.reads or set()) & writes(run)
                                     or t.writes & ({e.k for e in run} | writes(run))),
                 emit)


def merged(calls: List[Any], code: Code) -> List[Any]:
    """calls in order, each run of calls of one loop function whose rows step
    evenly (a layer's relus) as one call over the run's rows; only where no
    row one of them writes is a row another reads (the rows run in order,
    but the functions' pointers are restrict)."""
    out: List[Any] = []
    i = 0
    while i < len(calls):
        c = calls[i]
        j = i + 1
        if isinstance(c, LoopCall):
            steps: Optional[List[int]] = None
            while j < len(calls):
                d = calls[j]
                if not isinstance(d, LoopCall) or not c.same_function(d, code):
                    break
                if any((a is None) != (b is None) or (a and b and a[0] != b[0]) for a, b in zip(c.ptrs, d.ptrs)):
                    break
                st = [b[1] - a[1] if a and b else 0 for a, b in zip(c.ptrs, d.ptrs)]   # rows from call i
                if steps is None:
                    steps = st
                elif st != [s * (j - i) for s in steps]:
                    break
                j += 1
            if j - i > 1 and steps is not None and not (_rows_of(c, j - i, steps, out=True)
                                                         & _rows_of(c, j - i, steps, out=False)):
                run = LoopCall(c.fwd, c.op, c.k, c.ptrs, set(), set())
                run.rows, run.steps = j - i, steps
                out.append(run)
                i = j
                continue
            j = i + 1
        out.append(c)
        i = j
    return out


def _rows_of(c: LoopCall, n: int, steps: List[int], out: bool) -> Set[Ref]:
    """The (array, row) pairs a merged run of n calls writes (out) or reads:
    the forward function writes its third pointer (r), the reverse its fifth
    and sixth (ax, ay)."""
    first = 2 if c.fwd else 4
    res: Set[Ref] = set()
    for p, r in enumerate(c.ptrs):
        if r is not None and (p >= first) == out:
            res.update((r[0], r[1] + m * steps[p]) for m in range(n))
    return res
