"""Lowering: a Program's code (code.py) as typed statements, one list per sweep.

Every decision the interpreter (csrc/replay/batch.c) makes while it runs is made
here once, at generation time, so that no printer makes it again:

- the forward sweep: input columns in, each row instruction (an op, or a
  dot: its start plus its products, summed in order), the guards that read
  a row, the check of ``bad`` (any op's failure or a flipped guard), the
  output columns out.  It is the same for every mode;
- where each adjoint term goes (batch.c: ta_target): node k's adjoint row
  (``Row(k)``: a row node's, or per sample a uniform node's), or, summed
  over rows, accumulator i (``Acc(i)``), whose sum over a chunk is added to
  a uniform adjoint or a wrt column's sum (``Fold``), in the order the
  accumulators were made;
- a dot's reverse term by term, its products' operands (batch.c:
  ta_rv_dot, ta_rv_factor): a uniform weight times a uniform value, summed
  over rows, is the lane sum of the adjoint times the value, folded;
- the uniform nodes' partials once per call, and their reverse
  (batch.c: ta_rv_uniform): per sample into rows, summed once a block.

What lowering does not decide is where values live (storage: locals,
a frame in memory, dense rows) and so whether a write is an adjoint's
first (schedule.py), and the text (the printers).

The bit rules, stated once:
- every op through its own rule in csrc/ops/ops.h (fwd_NAME, d_NAME), as the
  interpreter calls it; a dot's sum term by term, in order (fwd_MUL, fwd_ADD);
- an adjoint starts at +0.0 and adds its terms in the interpreter's order;
  where a storage assigns the first term instead (one add fewer), the two
  differ only in the sign of a zero (0.0 + t is +0.0 where t is -0.0), which
  every later sum makes +0.0 again; a per-sample gradient read out of such
  a row adds +0.0 on its way out (``Grads``' ``plus0``), so it is the
  interpreter's bits;
- summed gradients: each accumulator sums its chunk's rows in four lanes,
  row - chunk start modulo 4, folded ((l0 + l1) + (l2 + l3)), chunks in
  order, as the interpreter's lanes (batch.c: TA_LANES).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, List, Optional, Tuple, Union

from .code import IDOT, NONE, Code

__all__ = ["Row", "Acc", "Dest", "Input", "Op", "Dot", "Guard", "Check", "Output", "Params", "UOp",
           "UGuard", "UDot", "UDotRev", "Partial", "RevStart", "Seed", "Zero", "OpRev", "DotTerm", "DotRev", "URev",
           "Grads", "WrtSum", "URevSum", "Parts", "Fold", "Forward", "Reverse", "forward", "reverse",
           "uniform_forward"]


# ------------------------------------------------------------ destinations
@dataclass(frozen=True)
class Row:
    """Node k's adjoint row (a per-sample uniform adjoint if k is uniform);
    first: this write is the row's first and assigns it (schedule.py)."""
    k: int
    first: bool = False


@dataclass(frozen=True)
class Acc:
    """Accumulator i (summed over a chunk's rows in four lanes; see Fold)."""
    i: int


Dest = Union[Row, Acc, None]


# ------------------------------------------------------------ forward
@dataclass(frozen=True)
class Input:
    """Node k's row := input column j."""
    k: int
    j: int


@dataclass(frozen=True)
class Op:
    """Node k's row := op(x, y): y a node (BIN) or -1 (CST: the constant code.c[k]; UN: 0.0)."""
    k: int
    op: int
    x: int
    y: int


@dataclass(frozen=True)
class Dot:
    """Node k's row := x + p0 * q0 + p1 * q1 + ..., in order."""
    k: int
    x: int
    terms: Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class Guard:
    """bad |= (a <kind> b, or the constant c if cst) != outcome, at a row."""
    a: int
    b: int
    c: float
    kind: int
    cst: int
    outcome: int


@dataclass(frozen=True)
class Check:
    """After the forward sweep and the guards: if bad, the kernel fails."""


@dataclass(frozen=True)
class Output:
    """Output column j := node k's value."""
    j: int
    k: int


# ------------------------------------------------------------ uniform nodes
@dataclass(frozen=True)
class Params:
    """(A kernel that computes the uniform values itself) U[k] := parameter j,
    for each (j, k) of items."""
    items: Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class UOp:
    """(likewise) U[k] := op(U[x], U[y] or the constant), as batch.c: ta_uniform_forward."""
    k: int
    op: int
    x: int
    y: int


@dataclass(frozen=True)
class UGuard:
    """(likewise) a guard on uniform values only."""
    g: Guard


@dataclass(frozen=True)
class UDot:
    """(A kernel that computes the uniform values itself) a dot among the
    uniform nodes (schedule.uniform_dots): U[k] := U[x] (x -1: the constant
    c) + U[p0] * U[q0] + ..., each term (p, q, m, s) storing its product U[m]
    and partial sum U[s] (the last s is k), as the unfused nodes would."""
    k: int
    x: int
    terms: Tuple[Tuple[int, int, int, int], ...]
    c: float = 0.0


@dataclass(frozen=True)
class Partial:
    """Uniform node k's partials pdx, pdy (d_OP at its values), once per call."""
    k: int
    op: int
    x: int
    y: int


# ------------------------------------------------------------ reverse
@dataclass(frozen=True)
class RevStart:
    """Where the reverse sweep begins (a storage's adjoint rows are made or zeroed there)."""


@dataclass(frozen=True)
class Seed:
    """dest += the seed of output j."""
    j: int
    dest: Dest


@dataclass(frozen=True)
class Zero:
    """Node k's adjoint row := 0.0 (read before any term was added to it)."""
    k: int


@dataclass(frozen=True)
class OpRev:
    """Op node k's reverse step: dx += dx_ * g, dy += dy_ * g (d_OP; g: k's adjoint row)."""
    k: int
    op: int
    x: int
    y: int
    dx: Dest
    dy: Dest


@dataclass(frozen=True)
class DotTerm:
    """One term of a dot's reverse: kind "start" (dest += d_ADD's dx_ * g: the
    dot's start), "mul" (dest += other's value * g) or "g" (dest += g: the lane
    sum is multiplied by the uniform other when folded)."""
    kind: str
    dest: Dest
    other: int


@dataclass(frozen=True)
class DotRev:
    """Dot node k's reverse, its terms in the interpreter's order (last product
    first, each product's operands in turn, the start with the first product);
    products: the dot's (p, q), first to last."""
    k: int
    x: int
    terms: Tuple[DotTerm, ...]
    products: Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class URev:
    """(per sample) dest += uniform node k's partial which ("pdx", "pdy") * its adjoint row."""
    k: int
    which: str
    dest: Dest


@dataclass(frozen=True)
class Grads:
    """(per sample) gradient column j := node k's adjoint row (0.0 for k NONE),
    plus 0.0 where the row's first term was assigned (plus0)."""
    items: Tuple[Tuple[int, int, bool], ...]


@dataclass(frozen=True)
class WrtSum:
    """(summed) accumulator i += node k's adjoint row: wrt column j is input k."""
    j: int
    k: int
    i: int


@dataclass(frozen=True)
class URevSum:
    """(summed, after a block's last chunk) uniform node k's reverse on the
    block's uniform adjoints A: A[x] += pdx * A[k], A[y] += pdy * A[k]."""
    k: int
    x: int
    y: int


@dataclass(frozen=True)
class UDotRev:
    """The reverse of a uniform dot (schedule.uniform_dots), for its nodes'
    reverse steps: g := 0.0 + its adjoint (what each of its products' and
    partial sums' adjoint is: 0.0 + 1.0 * the next's), then, last product
    first, p's adjoint += U[q] * g and q's += U[p] * g, the start's += g
    with the first product's.  terms: (p, q, p's adjoint, q's), an adjoint
    -1 where none is needed; x: the start, -1 if it needs no adjoint.  Summed
    (sum: on the block's uniform adjoints A) or per sample (on rows)."""
    k: int
    x: int
    terms: Tuple[Tuple[int, int, int, int], ...]
    sum: bool


@dataclass(frozen=True)
class Parts:
    """(summed, after a block's last chunk) the block's sum j := wrt node k's,
    for each (j, k) of items."""
    items: Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class Fold:
    """Accumulator i's sum over a chunk is added to dest: ("A", uniform adjoint
    slot) or ("Gb", wrt column), times the uniform value of node factor if not None."""
    i: int
    dest: Tuple[str, int]
    factor: Optional[int]


# ------------------------------------------------------------ the lists
class Forward:
    """A Program's forward sweep (the same in every mode)."""

    def __init__(self, code: Code) -> None:
        self.code = code
        C = code
        out: List[Any] = [Input(k, j) for j, k in enumerate(C.inp) if k != NONE]
        for k, x, y, op, t0, nt in C.ins:
            if op == IDOT:
                out.append(Dot(k, x, tuple((C.tp[t], C.tq[t]) for t in range(t0, t0 + nt))))
            else:
                out.append(Op(k, op, x, y if C.kind(k) == "BIN" else -1))
        for a, b, c, kind, cst, outcome in C.guards:
            if not (C.uni[a] and (cst or C.uni[b])):          # else checked once per call (batch.c)
                out.append(Guard(a, b, c, kind, cst, outcome))
        out.append(Check())
        out += [Output(j, k) for j, k in enumerate(C.out)]
        self.stmts = out
        self.check = out.index(Check())       # the statements before it: the forward proper


def forward(code: Code) -> Forward:
    """The forward sweep's statements."""
    return Forward(code)


def uniform_forward(code: Code) -> List[Any]:
    """The uniform values as batch.c's ta_uniform_forward computes them (for a
    kernel that computes them itself: CUDA's): parameters, uniform ops,
    guards on uniform values only, then the check."""
    C = code
    out: List[Any] = [Params(tuple(enumerate(C.par)))]
    out += [UOp(k, C.op[k], C.a[k], C.b[k] if C.kind(k) == "BIN" else -1) for k in C.uops]
    out += [UGuard(Guard(a, b, c, kind, cst, outcome)) for a, b, c, kind, cst, outcome in C.guards
            if C.uni[a] and (cst or C.uni[b])]
    return out + [Check()]


class Reverse:
    """A Program's reverse sweep for mode "sum" (gradients summed over rows)
    or "ps" (per sample): the uniform partials, the sweep over a row, the
    accumulators' folds and (summed) what runs after a block's last chunk."""

    def __init__(self, code: Code, mode: str) -> None:
        if mode not in ("sum", "ps"):
            raise ValueError(f"mode must be 'sum' or 'ps', not {mode!r}")
        self.code, self.mode = code, mode
        C, ps = code, mode == "ps"
        self.fold: List[Fold] = []
        self.partials = [Partial(k, C.op[k], C.a[k], C.b[k] if C.kind(k) == "BIN" else -1)
                         for k in C.uops if C.dloc[k] != NONE]
        out: List[Any] = [RevStart()]
        for j, o in enumerate(C.out):
            d = self.target(o)
            if d is not None:
                out.append(Seed(j, d))
        for k, x, y, op, t0, nt in reversed(C.ins):
            if C.dloc[k] == NONE:
                continue
            if op != IDOT:
                bin_ = C.kind(k) == "BIN"
                dx = self.target(x)
                out.append(OpRev(k, op, x, y if bin_ else -1, dx, self.target(y) if bin_ else None))
                continue
            terms: List[DotTerm] = []
            for t in range(t0 + nt - 1, t0 - 1, -1):       # batch.c: ta_rv_dot
                if t == t0:
                    d = self.target(x)
                    if d is not None:
                        terms.append(DotTerm("start", d, x))
                for p, q in ((C.tp[t], C.tq[t]), (C.tq[t], C.tp[t])):
                    f = self.factor(p, q)
                    if f is not None:
                        terms.append(f)
            out.append(DotRev(k, x, tuple(terms), tuple((C.tp[t], C.tq[t]) for t in range(t0, t0 + nt))))
        self.end: List[Any] = []
        if ps:
            for k in reversed(C.uops):                     # batch.c: ta_rv_uniform, per sample
                if C.dloc[k] == NONE:
                    continue
                for x, which in ((C.a[k], "pdx"), (C.b[k], "pdy")):
                    if (which == "pdx" or C.kind(k) == "BIN") and C.dloc[x] != NONE:
                        out.append(URev(k, which, self.target(x)))
            out.append(Grads(tuple((j, k, False) for j, k in enumerate(C.wrt))))
        else:
            for j, k in enumerate(C.wrt):                  # sums of the wrt columns that are inputs
                if k != NONE and not C.uni[k]:
                    i = len(self.fold)
                    self.fold.append(Fold(i, ("Gb", j), None))
                    out.append(WrtSum(j, k, i))
            for k in reversed(C.uops):                     # batch.c: ta_rv_uniform, summed
                if C.dloc[k] != NONE:
                    self.end.append(URevSum(k, C.a[k], C.b[k] if C.kind(k) == "BIN" else -1))
            self.end.append(Parts(tuple(enumerate(C.wrt))))
        self.stmts = out

    def target(self, k: int, factor: Optional[int] = None) -> Dest:
        """Where a term of node k's adjoint goes (batch.c: ta_target): its row,
        its per-sample row, or (summed, uniform) a new accumulator; None if k
        needs no adjoint."""
        C = self.code
        if C.dloc[k] == NONE:
            return None
        if not C.uni[k] or self.mode == "ps":
            return Row(k)
        i = len(self.fold)
        self.fold.append(Fold(i, ("A", C.dloc[k]), factor))
        return Acc(i)

    def factor(self, k: int, other: int) -> Optional[DotTerm]:
        """One operand k of a dot's product (batch.c: ta_rv_factor)."""
        C = self.code
        if C.dloc[k] == NONE:
            return None
        if C.uni[k] and self.mode == "sum" and C.uni[other]:    # w * (the lane sum of g)
            return DotTerm("g", self.target(k, factor=other), other)
        return DotTerm("mul", self.target(k), other)


def reverse(code: Code, mode: str) -> Reverse:
    """The reverse sweep's statements for mode "sum" or "ps"."""
    return Reverse(code, mode)


def reads(s: Any) -> Tuple[int, ...]:
    """The adjoint rows statement s reads (the nodes)."""
    if isinstance(s, (OpRev, DotRev, URev, WrtSum)) or isinstance(s, UDotRev) and not s.sum:
        return (s.k,)
    if isinstance(s, Grads):
        return tuple(k for _, k, _ in s.items if k != NONE)
    return ()


def dests(s: Any) -> Tuple[Dest, ...]:
    """The adjoint terms statement s adds, in order (a uniform dot's per
    sample: the rows it adds to, as udot_rows lists them)."""
    if isinstance(s, UDotRev):
        return () if s.sum else tuple(Row(k) for k in udot_rows(s))
    if isinstance(s, (Seed, URev)):
        return (s.dest,)
    if isinstance(s, OpRev):
        return (s.dx, s.dy)
    if isinstance(s, DotRev):
        return tuple(t.dest for t in s.terms)
    return ()


def with_dests(s: Any, ds: List[Dest]) -> Any:
    """s with its dests (as dests(s) lists them) replaced by ds."""
    if isinstance(s, (Seed, URev)):
        return replace(s, dest=ds[0])
    if isinstance(s, OpRev):
        return replace(s, dx=ds[0], dy=ds[1])
    if isinstance(s, DotRev):
        return replace(s, terms=tuple(replace(t, dest=d) for t, d in zip(s.terms, ds)))
    return s


def udot_rows(s: UDotRev) -> List[int]:
    """The nodes a uniform dot's reverse adds to, in the order it adds to them."""
    out = []
    for i in range(len(s.terms) - 1, -1, -1):
        if i == 0 and s.x >= 0:
            out.append(s.x)
        out += [a for a in s.terms[i][2:] if a >= 0]
    return out
