"""Code generation: a Program's execution code as source text for a target.

A Program (tapead.replay) runs its rows through execution code derived in C
(csrc/code.c: uniform nodes computed once per call, row instructions, fused
dots).  This module turns that code into straight-line source: the same
operations, in the same order, as the interpreter (csrc/batch.c) does them,
so the results are the same bits.  Each op is computed by its own rule
functions from csrc/ops.h (fwd_NAME, d_NAME), which the generated source
includes: an op stays defined once, in ops.def and ops.h.

The interface, in three parts:

``Code.of(prog)``
    The Program's flat form and execution code as plain Python (lists of
    ints and floats): nodes, columns, guards, uniform nodes, row
    instructions, dot terms, slots.

``Body(code, mode)``, mode ``"fwd"`` (outputs only), ``"sum"`` (gradients
summed over rows) or ``"ps"`` (per-sample gradients)
    The per-row computation as C statements over ``double``, in lists a
    target places in its kernel:

    - ``uniform``: once per kernel call, before any row: each uniform op's
      partials (scalars ``pdx<k>``, ``pdy<k>``), read by ``rows`` (per
      sample) and by ``block_end``;
    - ``rows``: one instance of the body for ``TA_W`` rows at once (its
      lanes): inputs, forward, guards, outputs, then (modes sum, ps) the
      reverse sweep and the per-sample gradients; row values are arrays
      ``double v<k>[TA_W]``, adjoints ``d<k>[TA_W]``;
    - ``fold``: (sum) per accumulator i, in order, where its sum goes:
      ``(i, dest, factor)``, dest ``"A[<j>]"`` (a uniform adjoint) or
      ``"Gb[<j>]"`` (a wrt column that is an input), factor a C expression
      or None; the interpreter adds each accumulator's sum over a chunk of
      ``code.ch`` rows, lanes ``row % 4`` summed as ``(l0 + l1) + (l2 + l3)``,
      into dest (times factor), in this order, after each chunk;
    - ``block_end``: (sum) after the block's last chunk: the reverse sweep
      through the uniform nodes on ``A`` and ``parts[j]`` from ``A`` and
      ``Gb``.

    The statements use these names, which the target defines:

    ``TA_W``            lanes: rows one instance of ``rows`` computes
    ``TA_LANES(...)``   run the statement once per lane ``l`` (0 .. TA_W-1)
    ``TA_IN(j)``        input column j at lane l's row
    ``TA_OUT(j, x)``    output column j at lane l's row := x
    ``TA_SEED(j)``      the seed of output j at lane l's row
    ``TA_GRAD(j, x)``   (ps) gradient column j at lane l's row := x
    ``TA_ACC(i, x)``    (sum) add lane l's x to accumulator i (its lane)
    ``TA_BITS(u)``      the double whose bits are the uint64 u (non-finite
                        constants; finite ones are C99 hex literals); every
                        constant is passed through ops.h's ``ta_opaque``, so
                        the compiler computes with it as the interpreter
                        does, never folding it into a libm call (literal())
    ``U``               the uniform values, a ``const double *``
    ``A``, ``Gb``       (sum) ``double *``: the uniform adjoints summed over
                        the block (``code.ndu``), the wrt sums (``nwrt``)
    ``parts``           (sum) ``double *``: the block's nwrt sums
    ``bad``             an int: every op's status and every flipped guard
                        is or-ed into it (nonzero: some row failed)
    ``TA_FAILED``       what to do when, after the forward sweep and the
                        guards, ``bad`` is nonzero (C: return 1, so the
                        interpreter runs the block again and names the row)

``Target``
    Makes a whole translation unit from the bodies: its ``source(code)``
    returns the text.  ``CTarget`` is the CPU's (csrc/cdef.h: ta_kernel_fn;
    ``TA_W`` 1, one row at a time, or 2 or 4 rows' statements side by side;
    chunks and accumulators as the interpreter's, so summed gradients are
    its bits too); ``RowsTarget`` the CPU's for networks (``TA_W`` a chunk of
    rows, each statement a loop over them; ``Body(..., dense=True)`` adds
    ``TA_V4ROWS`` statements, a dot over vectors of four rows, with
    ``TA_V4L``, ``TA_V4S``, ``TA_V4ST``, ``TA_V4MUL``, ``TA_V4ADD``,
    ``TA_V4ADDTO``, ``TA_V4ACC``: load, splat, store, multiply, add, add to
    a row, add to accumulator i's four lanes, those with accumulators in
    ``TA_V4SUMS`` loops (the chunk's lane masks, ``TA_MASKS()``); and
    ``TA_VZ()`` after each such statement: clear the vector registers'
    upper halves; a layer's dots are fused, several to a loop).  A CUDA target
    defines the same names (``TA_W`` 1, ``l`` 0, the row from the thread
    index) and reduces ``TA_ACC`` its own way; it includes ops.h as
    ``CTarget`` does (``include_dir()``) so its kernel computes with the same rules.

    >>> import numpy as np, tapead
    >>> x = tapead.Value(0.5); w = tapead.Value(2.0); y = (w * x).exp()
    >>> p = tapead.compile(y, [x], wrt=[w], native=False)
    >>> b = Body(Code.of(p), "ps"); "fwd_EXP" in "\\n".join(b.rows)
    True
"""
from __future__ import annotations

import os
import re
import struct
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from ._c import OP, OP_KINDS
from ._c import program as _prog

if TYPE_CHECKING:
    from .replay import Program

__all__ = ["Code", "Body", "Target", "CTarget", "RowsTarget", "include_dir", "NONE"]

NONE = 0xFFFFFFFF          # csrc/replay.h: TA_NONE, "no slot" / "not reached"
IDOT = 0xFF                # csrc/replay.h: TA_IDOT, a dot instruction
_NAMES = {code: name for name, code in OP.items()}
_KINDS = [("LEAF", "UN", "BIN", "CST", "NARY")[k] for k in OP_KINDS]   # csrc/tapead.h: enum ta_kind


def include_dir() -> str:
    """The folder holding csrc/ops.h and the headers it includes: tapead/_include
    in an installed package (setup.py copies them there), else the source tree's csrc."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "_include"), os.path.join(here, os.pardir, "csrc")):
        if os.path.isfile(os.path.join(d, "ops.h")):
            return os.path.normpath(d)
    raise FileNotFoundError("tapead's C headers (ops.h) are not installed with it")


def _kind(op: int) -> str:
    return _KINDS[op]


def literal(c: float) -> str:
    """c as an exact C expression the compiler cannot fold into the code
    around it: a C99 hex literal, or TA_BITS(...) if not finite, through
    ops.h's ta_opaque.  Seen as a literal, GCC rewrites pow(x, 2.0) as x * x,
    pow(x, -1.0) as 1.0 / x and log(c) as its correctly rounded value, where
    the interpreter, given c at run time, calls libm (not correctly rounded):
    other bits."""
    if c != c or c in (float("inf"), float("-inf")):
        return "ta_opaque(TA_BITS(0x%016xu))" % struct.unpack("<Q", struct.pack("<d", c))[0]
    return "ta_opaque(" + c.hex() + ")"


class Code:
    """A Program's flat form and execution code as Python lists (see csrc/cdef.h:
    ta_flat_t and ta_codeview_t for each field's meaning)."""

    def __init__(self, flat: Dict[str, Any], code: Dict[str, Any]) -> None:
        self.n: int = flat["n"]
        self.nin, self.nout, self.nwrt, self.npar = flat["nin"], flat["nout"], flat["nwrt"], flat["npar"]
        self.op: List[int] = list(flat["op"])
        self.a: List[int] = list(flat["a"])
        self.b: List[int] = list(flat["b"])
        self.c: List[float] = [float(v) for v in flat["c"]]
        self.inp: List[int] = list(flat["in"])
        self.out: List[int] = list(flat["out"])
        self.wrt: List[int] = list(flat["wrt"])
        self.par: List[int] = list(flat["par"])
        # guards: (a, b, c, kind, cst, outcome)
        gab, gc, gk = list(flat["gab"]), list(flat["gc"]), list(flat["gkind"])
        self.guards: List[Tuple[int, int, float, int, int, int]] = [
            (gab[2 * j], gab[2 * j + 1], float(gc[j]), gk[j] & 3, (gk[j] >> 2) & 1, (gk[j] >> 3) & 1)
            for j in range(flat["ng"])]
        self.uni: List[int] = list(code["uni"])
        self.need: List[int] = list(code["need"])
        self.loc: List[int] = list(code["loc"])
        self.dloc: List[int] = list(code["dloc"])
        self.uops: List[int] = list(code["uops"])
        # row instructions: (k, x, y, op, t0, nt); op IDOT for a dot
        self.ins: List[Tuple[int, int, int, int, int, int]] = list(zip(
            code["ik"].tolist(), code["ix"].tolist(), code["iy"].tolist(), code["iop"].tolist(),
            code["it0"].tolist(), code["int_"].tolist()))
        self.tp: List[int] = list(code["tp"])
        self.tq: List[int] = list(code["tq"])
        self.nu: int = code["nu"]
        self.ndu: int = code["ndu"]
        self.ch: int = code["ch"]

    @classmethod
    def of(cls, prog: "Program") -> "Code":
        return cls(prog._flat_form(), _prog.prog_code(prog._p))


class Body:
    """The per-row statements of a Program's code for one mode (see the module's docstring)."""

    def __init__(self, code: Code, mode: str, mem: bool = False, dense: bool = False) -> None:
        if mode not in ("fwd", "sum", "ps"):
            raise ValueError(f"mode must be 'fwd', 'sum' or 'ps', not {mode!r}")
        self.code, self.mode, self.mem = code, mode, mem or dense
        # dense (RowsTarget): V and D hold only the rows that are used, one
        # after another (vi, di: node -> row), and a dot's reverse terms are
        # one statement (one loop over the rows); else node k's rows are V[k], D[k]
        self.dense = dense
        self.vi: Dict[int, int] = {}
        self.di: Dict[int, int] = {}
        self.helpers: Dict[str, int] = {}    # (dense) loop functions called: name -> op
        # (not mem) adjoint rows written so far, True where the first write
        # was "r = term" (not the interpreter's "r = 0.0; r += term"): see _add
        self.written: Dict[str, bool] = {}
        # (dense) adjoint rows some statement adds to other than a fused
        # layer's (_add, _target_ptr), and those a fused layer's loop set by
        # its first term: the rest are zeroed a chunk (_reverse)
        self.added: Set[str] = set()
        self.assigned: Set[str] = set()
        self.stored: Set[int] = set()        # (dense) accumulators a dot's loop stores whole
        self.uniform: List[str] = []
        self.rows: List[str] = []
        self.fold: List[Tuple[int, str, Optional[str]]] = []
        self.block_end: List[str] = []
        self._forward()
        if mode != "fwd":
            self._partials()
            self._reverse()
            if dense:
                self.rows[self.zero_at] = " ".join(_zero_runs(sorted(
                    i for k, i in self.di.items() if self.row("d", k) not in self.assigned), "D", "TA_W"))

    # ---------------------------------------------------------- values
    def row(self, name: str, k: int) -> str:
        """Node k's row value (name "v"), adjoint ("d") or per-sample uniform
        adjoint ("du") at lane l: a local array, or (mem) its place in V or D."""
        if self.dense:
            rows = self.vi if name == "v" else self.di
            if k not in rows:
                rows[k] = len(rows)
            return f"{'V' if name == 'v' else 'D'}[{rows[k]} * TA_W + l]"
        if self.mem:
            return f"{'V' if name == 'v' else 'D'}[{k} * TA_W + l]"
        return f"{name}{k}[l]"

    def decl(self, name: str, k: int) -> str:
        """The declaration of node k's row array name (nothing with mem: V and D hold it)."""
        return "" if self.mem else f"double {name}{k}[TA_W]; "

    def partial(self, k: int, which: str) -> str:
        """Uniform node k's partial "pdx" or "pdy": a local, or (mem) its place in Q."""
        return f"Q[{2 * k + (which == 'pdy')}]" if self.mem else f"{which}{k}"

    def val(self, k: int) -> str:
        """Node k's value at lane l."""
        C = self.code
        return f"U[{C.loc[k]}]" if C.uni[k] else self.row("v", k)

    def vval(self, k: int) -> str:
        """(dense) Node k's values at rows l .. l + 3 as a vector (ta_v4)."""
        C = self.code
        return f"TA_V4S(U[{C.loc[k]}])" if C.uni[k] else f"TA_V4L(&{self.row('v', k)})"

    def _rows_only(self, k: int) -> bool:
        """(dense) Node k's operands are rows (not uniform values)."""
        C = self.code
        return not C.uni[C.a[k]] and (_kind(C.op[k]) != "BIN" or not C.uni[C.b[k]])

    def _row_targets(self, k: int) -> bool:
        """(dense) Each operand of k that needs an adjoint has a row for it
        (a row node, or per sample a uniform one): no accumulator."""
        C = self.code
        ops = [C.a[k]] + ([C.b[k]] if _kind(C.op[k]) == "BIN" else [])
        return all(C.dloc[o] == NONE or not C.uni[o] or self.mode == "ps" for o in ops)

    def _ptr(self, k: int) -> "_Ref":
        """(dense) Node k's value row."""
        self.row("v", k)
        return ("V", self.vi[k])

    def _target_ptr(self, k: int) -> Optional["_Ref"]:
        """(dense) The row node k's adjoint goes to, or None."""
        C = self.code
        if C.dloc[k] == NONE:
            return None
        self.added.add(self.row("du" if C.uni[k] else "d", k))
        return ("D", self.di[k])

    def _c(self, k: int) -> str:
        """The constant a CST op's rules get, else 0.0 (an UN op's second argument)."""
        return literal(self.code.c[k]) if _kind(self.code.op[k]) == "CST" else "0.0"

    def _helper(self, d: str, op: int) -> str:
        name = f"ta_{d}_{_NAMES[op]}"
        self.helpers[name] = op
        return name

    def _second(self, k: int, y: int) -> str:
        """The second argument of node k's rules: its y (BIN), its constant (CST), else 0.0."""
        C = self.code
        kind = _kind(C.op[k])
        if kind == "BIN":
            return self.val(y)
        return literal(C.c[k]) if kind == "CST" else "0.0"

    # --------------------------------------------------------- forward
    def _forward(self) -> None:
        C, out = self.code, self.rows
        for j, k in enumerate(C.inp):
            if k != NONE:
                out.append(f"{self.decl('v', k)}TA_LANES({self.row('v', k)} = TA_IN({j}));")
        items: List[Any] = []                # (dense) fused by _fuse_forward
        for k, x, y, op, t0, nt in C.ins:
            if op == IDOT:
                terms = "".join(f" fwd_MUL({self.val(C.tp[t])}, {self.val(C.tq[t])}, &m_);"
                                f" fwd_ADD(r_, m_, &r_);" for t in range(t0, t0 + nt))
                if self.dense:           # vectors of four rows (RowsTarget)
                    ops = [x] + [o for t in range(t0, t0 + nt) for o in (C.tp[t], C.tq[t])]
                    items.append(_FDot(k, self.row("v", k), self.vval(x),
                                       [(self.vval(C.tp[t]), self.vval(C.tq[t])) for t in range(t0, t0 + nt)],
                                       {o for o in ops if not C.uni[o]}))
                else:
                    items.append(_Stmt(f"{self.decl('v', k)}TA_LANES(double r_ = {self.val(x)}, m_;{terms}"
                                       f" {self.row('v', k)} = r_);"))
            elif self.dense and self._rows_only(k):       # the op's loop: a function (helpers())
                call = _Call(True, self._helper("f", op), self._c(k),
                             [self._ptr(x), self._ptr(y if _kind(op) == "BIN" else x), self._ptr(k)])
                items.append(_Stmt(call.text(), {x, y} if _kind(op) == "BIN" else {x}, {k}, call))
            else:
                items.append(_Stmt(f"{self.decl('v', k)}TA_LANES(bad |= fwd_{_NAMES[op]}"
                                   f"({self.val(x)}, {self._second(k, y)}, &{self.row('v', k)}));"))
        out += _fuse_forward(items)
        for a, b, c, kind, cst, outcome in C.guards:
            if C.uni[a] and (cst or C.uni[b]):
                continue                                  # checked once per call (batch.c)
            yv = literal(c) if cst else self.val(b)
            out.append(f"TA_LANES(bad |= ta_compare({kind}, {self.val(a)}, {yv}) != {outcome});")
        out.append("if (bad) TA_FAILED;")
        for j, k in enumerate(C.out):
            out.append(f"TA_LANES(TA_OUT({j}, {self.val(k)}));")

    # --------------------------------------------------------- reverse
    def _partials(self) -> None:
        """The uniform ops' partials, computed as batch.c's ta_rv_uniform does."""
        C = self.code
        for k in C.uops:
            if C.dloc[k] == NONE:
                continue
            op = C.op[k]
            y = f"U[{C.loc[C.b[k]]}]" if _kind(op) == "BIN" else literal(C.c[k])
            px, py = self.partial(k, "pdx"), self.partial(k, "pdy")
            self.uniform.append(("" if self.mem else f"double {px}, {py}; ")
                                + f"d_{_NAMES[op]}(U[{C.loc[C.a[k]]}], {y}, U[{C.loc[k]}], &{px}, &{py});")

    def _add(self, k: int, expr: str, factor: Optional[str] = None,
             vec: Optional[Tuple[List[str], str]] = None) -> Optional[str]:
        """The statement adding expr (lane l's) to node k's adjoint (batch.c:
        ta_target): its row, its per-sample row, or (summed) a new accumulator
        folded into A; None if k needs no adjoint.  vec (dense): (a list, the
        vector form of expr): the same statement for rows l .. l + 3 is
        appended to the list."""
        C = self.code
        if C.dloc[k] == NONE:
            return None
        if not C.uni[k] or self.mode == "ps":
            r = self.row("du" if C.uni[k] else "d", k)
            self.added.add(r)
            if vec:
                vec[0].append(f"TA_V4ADDTO(&{r}, {vec[1]});")
            if self.mem or r in self.written:
                return f"{r} += {expr};"
            # The interpreter's adjoint starts at +0.0 and adds each term;
            # here the first term is assigned (one add fewer a term).  The
            # two differ only where every term so far is a zero: there
            # 0.0 + t is +0.0 and t may be -0.0 (or a signalling NaN seed,
            # which the first arithmetic quiets to the same bits).  A -0.0
            # adjoint times a partial, or added to a sum, gives the
            # interpreter's bits up to the sign of a zero again, and an
            # adjoint that starts at +0.0 is never -0.0 (round to nearest:
            # x + -x is +0.0), so _grad's "+ 0.0" on the way out makes them
            # the interpreter's bits.
            self.written[r] = True
            return f"{r} = {expr};"
        i = len(self.fold)
        self.fold.append((i, f"A[{C.dloc[k]}]", factor))
        if vec:
            vec[0].append(f"TA_V4ACC({i}, {vec[1]});")
        return f"TA_ACC({i}, {expr});"

    def _reverse(self) -> None:
        C, out = self.code, self.rows
        ps = self.mode == "ps"
        if self.dense:               # the adjoint rows to zero, known at the end (__init__)
            self.zero_at = len(out)
            out.append("")
        elif self.mem:               # every adjoint row at once (one statement, not one a node)
            out.append(f"memset(D, 0, {C.n} * TA_W * sizeof *D);")
        for k in range(C.n):     # declared here, set by their first term (_add) or _read
            if not self.mem and C.dloc[k] != NONE and C.loc[k] != NONE and (not C.uni[k] or ps):
                out.append(self.decl("du" if C.uni[k] else "d", k).strip())
        for j, o in enumerate(C.out):                      # seeds
            s = self._add(o, f"TA_SEED({j})")
            if s:
                out.append(f"TA_LANES({s});")
        items: List[Any] = []                # (dense, summed) fused by _fuse_reverse
        fuse = self.dense and not ps
        for k, x, y, op, t0, nt in reversed(C.ins):
            if C.dloc[k] == NONE:
                continue
            g = self._read("d", k)
            if op != IDOT and self.dense and self._rows_only(k) and self._row_targets(k):
                bin_ = _kind(op) == "BIN"
                ax, ay = self._target_ptr(x), self._target_ptr(y) if bin_ else None
                if ax or ay:
                    call = _Call(False, self._helper("r", op), self._c(k),
                                 [self._ptr(x), self._ptr(y if bin_ else x), self._ptr(k), ("D", self.di[k]), ax, ay])
                    if fuse:         # adjoint rows only: row nodes' (summed, _row_targets)
                        items.append(_Stmt(call.text(), {k}, {o for o, t in ((x, ax), (y, ay)) if t}, call))
                    else:
                        out.append(call.text())
                continue
            if op == IDOT and fuse:
                layer = self._layer_dot(k, x, t0, nt, g)
                if layer:
                    items.append(layer)
                    continue
            if items:
                out += _fuse_reverse(items, self)
                items.clear()
            if op != IDOT:
                parts = [self._add(x, f"dx_ * {g}")]
                if _kind(op) == "BIN":
                    parts.append(self._add(y, f"dy_ * {g}"))
                adds = " ".join(p for p in parts if p)
                if adds:
                    out.append(f"TA_LANES(double dx_, dy_; d_{_NAMES[op]}({self.val(x)}, "
                               f"{self._second(k, y)}, {self.row('v', k)}, &dx_, &dy_); {adds});")
                continue
            terms: List[str] = []
            vterms: List[str] = []
            for t in range(t0 + nt - 1, t0 - 1, -1):       # batch.c: ta_rv_dot
                if t == t0:
                    vec = (vterms, "TA_V4MUL(TA_V4S(dx_), g_4)") if self.dense else None
                    s = self._add(x, f"dx_ * {g}", vec=vec)
                    if s:
                        terms.append(f"{{ double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); {s} }}")
                        if vec:
                            vterms[-1] = (f"{{ double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); "
                                          f"{vterms[-1]} }}")
                for k1, k2 in ((C.tp[t], C.tq[t]), (C.tq[t], C.tp[t])):
                    s = self._factor(k1, k2, g, vterms if self.dense else None)
                    if s:
                        terms.append(s)
            if self.dense and terms:     # each row's terms in the same order, four rows a pass
                # the dot's accumulators (each used here alone) summed in locals, then stored
                accs = re.findall(r"TA_V4ACC\((\d+),", " ".join(vterms))
                self.stored.update(int(i) for i in accs)
                out.append("{ " + "".join(f"ta_v4 a{i}_ = TA_V4Z; " for i in accs)
                           + f"TA_V4SUMS(const ta_v4 g_4 = TA_V4L(&{g}); " + " ".join(vterms) + "); "
                           + "".join(f"TA_V4ST(acc + {4 * int(i)}, a{i}_); " for i in accs) + "} TA_VZ();")
            else:
                out += [f"TA_LANES({s});" for s in terms]
        out += _fuse_reverse(items, self)
        if ps:
            for k in reversed(C.uops):                     # batch.c: ta_rv_uniform, per sample
                if C.dloc[k] == NONE:
                    continue
                for x, d in ((C.a[k], "pdx"), (C.b[k], "pdy")):
                    if d == "pdy" and _kind(C.op[k]) != "BIN":
                        continue
                    if C.dloc[x] != NONE:
                        g = self._read("du", k)
                        out.append(f"TA_LANES({self._add(x, f'{self.partial(k, d)} * {g}')});")
            grads = [f"TA_GRAD({j}, {self._grad(k)});" for j, k in enumerate(C.wrt)]
            if self.dense:                                 # a row's gradients in one pass
                out.append("TA_LANES(" + " ".join(grads) + ");")
            else:
                out += [f"TA_LANES({g[:-1]});" for g in grads]
            return
        for j, k in enumerate(C.wrt):                      # sums of the wrt columns that are inputs
            if k != NONE and not C.uni[k]:
                i = len(self.fold)
                self.fold.append((i, f"Gb[{j}]", None))
                out.append(f"TA_LANES(TA_ACC({i}, {self._read('d', k)}));")
        end = self.block_end
        for k in reversed(C.uops):                         # batch.c: ta_rv_uniform, summed
            if C.dloc[k] == NONE:
                continue
            end.append(f"{{ double gk_ = A[{C.dloc[k]}];")
            end.append(f"  A[{C.dloc[C.a[k]]}] += {self.partial(k, 'pdx')} * gk_;"
                       if C.dloc[C.a[k]] != NONE else "")
            if _kind(C.op[k]) == "BIN" and C.dloc[C.b[k]] != NONE:
                end.append(f"  A[{C.dloc[C.b[k]]}] += {self.partial(k, 'pdy')} * gk_;")
            end.append("}")
        for j, k in enumerate(C.wrt):
            v = "0.0" if k == NONE else f"A[{C.dloc[k]}]" if C.uni[k] else f"Gb[{j}]"
            end.append(f"parts[{j}] = {v};")

    def _layer_dot(self, k: int, x: int, t0: int, nt: int, g: str) -> Optional["_RDot"]:
        """(dense, summed) Dot k's reverse as a _RDot if it is a layer's:
        each product a uniform w times a row x, the xs distinct, the start
        uniform or without an adjoint; else None (and nothing allocated).
        Its accumulators are allocated as the statement form's would be."""
        C = self.code
        cols = []
        for t in range(t0 + nt - 1, t0 - 1, -1):
            p, q = C.tp[t], C.tq[t]
            if bool(C.uni[p]) == bool(C.uni[q]):
                return None
            cols.append((p, q) if C.uni[p] else (q, p))
        if len({xr for _, xr in cols}) < len(cols) or (not C.uni[x] and C.dloc[x] != NONE):
            return None
        start = None
        out: List[Tuple[int, str, Optional[int], Optional[str], str]] = []
        for t, (w, xr) in zip(range(t0 + nt - 1, t0 - 1, -1), cols):
            if t == t0 and C.dloc[x] != NONE:
                start = len(self.fold)
                self._add(x, f"dx_ * {g}", vec=([], "TA_V4MUL(TA_V4S(dx_), g_4)"))
            n0 = len(self.fold)
            acc = n0 if self._factor(w, xr, g, []) else None
            drow = self.row("d", xr) if C.dloc[xr] != NONE else None      # (not _add: see added)
            out.append((xr, self.vval(xr), acc, drow, f"TA_V4S(U[{C.loc[w]}])"))
        self.stored.update(i for i in [start] + [c[2] for c in out] if i is not None)
        return _RDot(k, g, start, out)

    def _read(self, name: str, k: int) -> str:
        """Node k's adjoint row (name "d" or "du") about to be read: set to
        0.0 first if no term was added to it (not mem: _add)."""
        r = self.row(name, k)
        if not self.mem and r not in self.written:
            self.written[r] = False
            self.rows.append(f"TA_LANES({r} = 0.0);")
        return r

    def _grad(self, k: int) -> str:
        """(ps) The gradient of wrt node k at lane l, as the interpreter's bits (_add)."""
        if k == NONE:
            return "0.0"
        r = self._read("du" if self.code.uni[k] else "d", k)
        return f"{r} + 0.0" if self.written.get(r) else r

    def _factor(self, k: int, other: int, g: str, vec: Optional[List[str]] = None) -> Optional[str]:
        """One operand k of a dot's product: batch.c's ta_rv_factor (vec: as _add)."""
        C = self.code
        if C.dloc[k] == NONE:
            return None
        if C.uni[k] and self.mode == "sum" and C.uni[other]:           # w * (the lane sum of g)
            return self._add(k, g, factor=f"U[{C.loc[other]}]", vec=None if vec is None else (vec, "g_4"))
        return self._add(k, f"{self.val(other)} * {g}",
                         vec=None if vec is None else (vec, f"TA_V4MUL({self.vval(other)}, g_4)"))


# ------------------------------------------------------- fused dots (dense)
# A network's layer is a run of dots over the same rows.  RowsTarget runs a
# dot as one loop over the chunk's rows; a layer's dots, fused, share their
# loads and give the CPU several independent sums at once.  Each sum keeps
# its own order of operations (forward: each dot's terms in order; reverse:
# each adjoint row's terms dot by dot, each accumulator's rows in order), so
# the bits are the interpreter's.  Statements move only across statements
# whose rows they neither read nor write.

# Measured on the demo's network (16 x 16 layers; docs/native.md, issue 26
# part 8): a loop's start and end cost more than spilling its sums, so the
# reverse takes a whole layer a loop (up to _RBLOCK dots, _RTILE // dots
# products each: a layer of 16 in 8 loops; 4 dots a loop, 32 loops, were
# 6-9% slower, and no fusion 10% slower); the forward takes _FBLOCK dots a
# loop (2: 3-7% slower; 6 or 8: the same as 4).
_FBLOCK = 4
_RBLOCK = 16
_RTILE = 32


_Ref = Tuple[str, int]     # (dense) a row: ("V" or "D", its index)


class _Call:
    """(dense) A call of an op's loop function (_loop): the rows its
    pointers point to (None: NULL; the constant goes after the first two),
    for one row or, with strides (rows), a run of rows."""

    def __init__(self, bad: bool, name: str, c: str, ptrs: List[Optional[_Ref]]) -> None:
        self.bad, self.name, self.c, self.ptrs = bad, name, c, ptrs

    def text(self, rows: int = 1, strides: Optional[List[int]] = None) -> str:
        p = [f"&{r[0]}[{r[1]} * TA_W]" if r else "NULL" for r in self.ptrs]
        st = [f"{d} * (int64_t)TA_W" if d else "0" for d in strides or [0] * len(p)]
        args = p[:2] + [self.c] + p[2:] + ["n_", str(rows)] + st
        return f"{'bad |= ' if self.bad else ''}{self.name}({', '.join(args)});"


class _Stmt:
    """(dense) A statement of a sweep and the nodes whose rows it reads and
    writes; reads None: nothing moves across it.  call: the loop call it is,
    if it is one (_merged)."""

    def __init__(self, text: str, reads: Optional[Set[int]] = None,
                 writes: Optional[Set[int]] = None, call: Optional[_Call] = None) -> None:
        self.text, self.reads, self.writes, self.call = text, reads, writes or set(), call


def _merged(stmts: List[_Stmt]) -> List[str]:
    """stmts' texts, each run of calls of one loop function whose rows step
    evenly (a layer's relus) as one call over the run's rows; only where no
    row one of them writes is a row another reads (the rows run in order,
    but the functions' pointers are restrict)."""
    out: List[str] = []
    i = 0
    while i < len(stmts):
        c = stmts[i].call
        j = i + 1
        if c is not None:
            r0 = c.ptrs
            steps: Optional[List[int]] = None
            while j < len(stmts):
                d = stmts[j].call
                if d is None or (d.bad, d.name, d.c) != (c.bad, c.name, c.c):
                    break
                rj = d.ptrs
                if any((a is None) != (b is None) or (a and b and a[0] != b[0]) for a, b in zip(r0, rj)):
                    break
                st = [b[1] - a[1] if a and b else 0 for a, b in zip(r0, rj)]   # rows from call i
                if steps is None:
                    steps = st
                elif st != [d * (j - i) for d in steps]:
                    break
                j += 1
            if j - i > 1 and steps is not None:
                written = _rows_of(stmts[i:j], c, steps, out=True)
                if not written & _rows_of(stmts[i:j], c, steps, out=False):
                    out.append(c.text(j - i, steps))
                    i = j
                    continue
            j = i + 1
        out.append(stmts[i].text)
        i = j
    return out


def _rows_of(stmts: List[_Stmt], c: _Call, steps: List[int], out: bool) -> Set[_Ref]:
    """The (array, row) pairs a merged run of calls writes (out) or reads:
    the forward function writes its third pointer (r), the reverse its fifth
    and sixth (ax, ay)."""
    first = 2 if c.bad else 4
    picks = [p for p in range(len(c.ptrs)) if (p >= first) == out]
    rows = c.ptrs
    res: Set[_Ref] = set()
    for k in range(len(stmts)):
        for p in picks:
            r = rows[p]
            if r is not None:
                res.add((r[0], r[1] + k * steps[p]))
    return res


class _FDot:
    """(dense) A forward dot: node k's row := start + p0 * q0 + p1 * q1 + ...
    (vector expressions), reading the rows of the nodes in reads."""

    def __init__(self, k: int, row: str, start: str, terms: List[Tuple[str, str]],
                 reads: Set[int]) -> None:
        self.k, self.row, self.start, self.terms, self.reads = k, row, start, terms, reads


def _fuse(items: List[Any], kind: type, conflict: Callable[[List[Any], List[_Stmt], Any], bool],
          movable: Callable[[List[Any], _Stmt], bool],
          emit: Callable[[List[Any], List[_Stmt]], List[str]]) -> List[str]:
    """items' statements in order, each run of dots of kind fused: a dot
    joins the run unless conflict(run, moved, dot); a statement inside a
    run moves (into moved, which emit places with the run) if movable(run,
    statement), else it ends the run; a statement without rows ends it."""
    out: List[str] = []
    run: List[Any] = []
    moved: List[_Stmt] = []
    for it in items + [None]:
        dot = isinstance(it, kind)
        if dot and not (run and conflict(run, moved, it)):
            run.append(it)
        elif run and isinstance(it, _Stmt) and it.reads is not None and movable(run, it):
            moved.append(it)
        else:
            out += emit(run, moved) if run else []
            run, moved = ([it] if dot else []), []
            if isinstance(it, _Stmt):
                out.append(it.text)
    return out


def _fuse_forward(items: List[Any]) -> List[str]:
    """The forward statements, runs of dots fused _FBLOCK at a time; the loop
    calls between them (a layer's relus) move after the run, which never
    reads their rows (a row is written once)."""
    return _fuse(items, _FDot,
                 lambda run, moved, d: bool(d.reads & ({e.k for e in run} | {w for t in moved for w in t.writes})),
                 lambda run, t: True,
                 lambda run, moved: ([_fdots(run[i:i + _FBLOCK]) for i in range(0, len(run), _FBLOCK)]
                                     + _merged(moved)))


def _fdots(block: List[_FDot]) -> str:
    """One loop over vectors of four rows computing block's dots, their terms interleaved."""
    body = [f"ta_v4 r{j}_ = {d.start};" for j, d in enumerate(block)]
    for t in range(max(len(d.terms) for d in block)):
        body += [f"r{j}_ = TA_V4ADD(r{j}_, TA_V4MUL({d.terms[t][0]}, {d.terms[t][1]}));"
                 for j, d in enumerate(block) if t < len(d.terms)]
    body += [f"TA_V4ST(&{d.row}, r{j}_);" for j, d in enumerate(block)]
    return f"TA_V4ROWS({' '.join(body)}); TA_VZ();"


class _RDot:
    """(dense, summed) A layer dot's reverse (Body._layer_dot): node k's
    adjoint row g; start, the accumulator of its start's adjoint; per
    product (the statement form's order) (x node, x's vector, w's
    accumulator, x's adjoint row, w's vector), an accumulator or row None
    where none is needed."""

    def __init__(self, k: int, g: str, start: Optional[int],
                 cols: List[Tuple[int, str, Optional[int], Optional[str], str]]) -> None:
        self.k, self.g, self.start, self.cols = k, g, start, cols
        self.key = tuple(c[0] for c in cols)
        self.writes = {c[0] for c in cols if c[3] is not None}


def _fuse_reverse(items: List[Any], body: "Body") -> List[str]:
    """The reverse statements, runs of layer dots over the same rows fused
    _RBLOCK at a time; the loop calls between them (a layer's relus) move
    before the run when they touch none of its rows.  body: whose adjoint
    rows (Body.added, Body.assigned: see _rdots)."""
    def writes(run: List[_RDot]) -> Set[int]:
        return {w for d in run for w in d.writes}

    def emit(run: List[_RDot], moved: List[_Stmt]) -> List[str]:
        out = _merged(moved)
        for i in range(0, len(run), _RBLOCK):
            blk = run[i:i + _RBLOCK]
            out += _rdots(blk, max(1, _RTILE // len(blk)), body)
        return out

    return _fuse(items, _RDot,
                 lambda run, moved, d: (d.key != run[0].key or d.k in writes(run)
                                        or bool(d.writes & {e.k for e in run})),
                 lambda run, t: not ((t.reads or set()) & writes(run)
                                     or t.writes & ({e.k for e in run} | writes(run))),
                 emit)


def _rdots(block: List[_RDot], ncol: int, body: "Body") -> List[str]:
    """Loops over vectors of four rows for block's reverse, each for ncol
    products of every dot (their x rows read once a pass, their adjoint rows
    added to dot by dot in registers), the starts in the first; each
    accumulator summed in a local, stored at the loop's end (as the
    statement form's).  An adjoint row nothing has written yet (not in
    body.added or body.assigned) starts at its first term, not at a zeroed
    row plus it (Body._add: the same bits out, up to the sign of a zero
    adjoint, which every sum it reaches makes +0.0), and is not zeroed."""
    out = []
    cols = [c for c in range(len(block[0].cols))
            if block[0].cols[c][3] is not None or any(d.cols[c][2] is not None for d in block)]
    for c0 in range(0, max(len(cols), 1), ncol):
        group = cols[c0:c0 + ncol]
        accs = [d.start for d in block if d.start is not None] if c0 == 0 else []
        pre = "double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); " if accs else ""
        code = []
        fresh = set()
        for c in group:
            x, xv, _, drow, _ = block[0].cols[c]
            code.append(f"const ta_v4 x{x}_ = {xv};")
            if drow and drow not in body.added and drow not in body.assigned:
                fresh.add(drow)
                body.assigned.add(drow)
                code.append(f"ta_v4 d{x}_;")
            elif drow:
                code.append(f"ta_v4 d{x}_ = TA_V4L(&{drow});")
        for j, d in enumerate(block):
            code.append(f"const ta_v4 g{j}_ = TA_V4L(&{d.g});")
            if c0 == 0 and d.start is not None:
                code.append(f"TA_V4ACC({d.start}, TA_V4MUL(TA_V4S(dx_), g{j}_));")
            for c in group:
                x, _, i, drow, w = d.cols[c]
                if i is not None:
                    accs.append(i)
                    code.append(f"TA_V4ACC({i}, TA_V4MUL(x{x}_, g{j}_));")
                if drow:
                    term = f"TA_V4MUL({w}, g{j}_)"
                    code.append(f"d{x}_ = {term};" if j == 0 and drow in fresh
                                else f"d{x}_ = TA_V4ADD(d{x}_, {term});")
        for c in group:
            x, _, _, drow, _ = block[0].cols[c]
            code += [f"TA_V4ST(&{drow}, d{x}_);"] if drow else []
        out.append("{ " + pre + "".join(f"ta_v4 a{i}_ = TA_V4Z; " for i in accs)
                   + f"TA_V4SUMS({' '.join(code)}); "
                   + "".join(f"TA_V4ST(acc + {4 * i}, a{i}_); " for i in accs) + "} TA_VZ();")
    return out


class Target:
    """Makes a translation unit from a Program's code; see the module's docstring."""

    def source(self, code: Code) -> str:
        raise NotImplementedError


class CTarget(Target):
    """The CPU's kernel (csrc/cdef.h: ta_kernel_fn), for a C compiler.

    Straight-line code over doubles, ``lanes`` rows at a time (TA_W): with
    lanes 2 or 4 each statement is written once per row, side by side, so
    the rows' independent chains of operations overlap in the core (a row
    past the chunk's end recomputes the chunk's row s and writes nothing).
    Blocks run as the interpreter runs them: chunks of code.ch rows, each
    accumulator summed per chunk in lanes (row - chunk start) % 4, then added
    in order, so summed gradients are its bits too.  (Four rows at a time as
    one loop per statement for the vectoriser measured no faster and took
    GCC up to 100x longer to build: docs/native.md.)"""

    def __init__(self, lanes: int = 1, split: int = 0) -> None:
        if lanes not in (1, 2, 4):
            raise ValueError(f"lanes must be 1, 2 or 4, not {lanes!r}")
        if split < 0:
            raise ValueError(f"split must be >= 0, not {split!r}")
        self.lanes, self.split = lanes, split
        self.nscratch = 0

    def prelude(self) -> str:
        if self.lanes == 1:
            rows = """\
#define TA_W 1
#define TA_LANES(...) { const int l = 0; __VA_ARGS__; }
#define TA_ROW s
#define TA_REAL 1
"""
        else:      # several rows' statements side by side: independent chains in flight
            rows = f"#define TA_W {self.lanes}\n#define TA_LANES(...)" + "".join(
                f" {{ const int l = {i}; __VA_ARGS__; }}" for i in range(self.lanes)) + """
/* the rows loop runs while every lane has a row (TA_TAIL 0), then once
 * more if the chunk has rows left (TA_TAIL 1): there a lane past the
 * chunk's last row recomputes the row s and writes nothing */
#define TA_ROW (TA_TAIL && s + l >= c1 ? s : s + l)
#define TA_REAL (!TA_TAIL || s + l < c1)
"""
        return """\
/* generated by tapead.codegen (CTarget): see tapead/codegen.py */
#include "ops.h"
#include "replay.h"
""" + rows + """\
#define TA_IN(j) X[TA_ROW * nin + (j)]
#define TA_OUT(j, x) if (TA_REAL) Y[TA_ROW * nout + (j)] = (x)
#define TA_SEED(j) (seedmode == 1 ? seed[j] : seed[TA_ROW * nout + (j)])
#define TA_GRAD(j, x) if (TA_REAL) G[TA_ROW * nwrt + (j)] = (x)
#define TA_ACC(i, x) if (TA_REAL) acc[(i) * 4 + ((TA_ROW - c0) & 3)] += (x)
#define TA_FAILED return 1
static inline double TA_BITS(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
"""

    def _kernel(self, code: Code, mode: str) -> str:
        b = Body(code, mode)
        nacc = len(b.fold)
        self.nscratch = max(self.nscratch, code.ndu + code.nwrt + 1)
        lines = [f"""
static int ta_kernel_{mode}(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1,
                           double *parts, double *scratch)
{{
    const uint64_t nin = R->nin, nout = R->nout, nwrt = R->nwrt;
    const double *const X = R->X, *const seed = R->seed;
    double *const Y = R->Y, *const G = R->G;
    const int seedmode = R->seedmode;
    double acc[{max(nacc * 4, 1)}], *A = scratch, *Gb = A + {code.ndu};
    uint64_t c0, c1, s;
    int bad = 0;
    (void)nin; (void)nout; (void)nwrt; (void)X; (void)seed; (void)G; (void)seedmode;
    (void)acc; (void)A; (void)Gb; (void)parts;
"""]
        lines += ["    " + s for s in b.uniform]
        if mode == "sum":
            lines.append(f"    memset(A, 0, {max(code.ndu + code.nwrt, 1)} * sizeof *A);")
        lines.append(f"    for (c0 = r0; c0 < r1; c0 = c1) {{\n"
                     f"        c1 = c0 + {code.ch} < r1 ? c0 + {code.ch} : r1;")
        if nacc:
            lines.append(f"        memset(acc, 0, {nacc * 4} * sizeof *acc);")
        body = ["            " + s for s in b.rows]
        if self.lanes == 1:
            lines += [f"        for (s = c0; s < c1; s++) {{"] + body + ["        }"]
        else:     # the body twice: no lane's row is checked but in the chunk's last pass
            lines += ["#define TA_TAIL 0", f"        for (s = c0; s + {self.lanes} <= c1; s += {self.lanes}) {{"]
            lines += body + ["        }", "#undef TA_TAIL", "#define TA_TAIL 1", "        if (s < c1) {"]
            lines += body + ["        }", "#undef TA_TAIL"]
        for i, dest, factor in b.fold:
            sm = f"((acc[{4 * i}] + acc[{4 * i + 1}]) + (acc[{4 * i + 2}] + acc[{4 * i + 3}]))"
            lines.append(f"        {dest} += {factor + ' * ' if factor else ''}{sm};")
        lines.append("    }")
        lines += ["    " + s for s in b.block_end if s]
        lines.append("    return 0;\n}\n")
        return "\n".join(lines)

    def source(self, code: Code) -> str:
        """The kernel's C source; self.nscratch is then the scratch it needs (doubles)."""
        return "".join(self.units(code, 1))

    def units(self, code: Code, n: int = 1) -> List[str]:
        """The kernel's C source as up to n translation units that are
        compiled apart and linked into one library (several compilers at
        once; only the split shape has more than one); self.nscratch is then
        the scratch it needs (doubles)."""
        self.nscratch = 0
        if self.split:
            return self._split_units(code, n)
        return [self.prelude() + self._kernel(code, "fwd") + self._kernel(code, "sum")
                + self._kernel(code, "ps") + _DISPATCH]

    # ------------------------------------------------------------- split shape
    def _split_units(self, code: Code, n: int) -> List[str]:
        """Large programs: each mode's statements cut into functions of
        self.split statements over values and adjoints in memory (V, D, Q in
        the scratch), which a compiler builds in time about linear in the
        program (one long function's register allocation is not: docs/native.md);
        a part the modes share (the forward sweep) is written once."""
        W, nodes = self.lanes, code.n
        parts: Dict[str, str] = {}            # a part's statements -> its function's name
        kernels, nacc = [], 0

        def call(stmts: List[str]) -> List[str]:
            out = []
            for i in range(0, len(stmts), self.split):
                text = "\n".join("    " + t for t in stmts[i:i + self.split])
                if text not in parts:
                    parts[text] = f"ta_p{len(parts)}"
                out.append(f"bad |= {parts[text]}(&F);")
            return out

        for mode in ("fwd", "sum", "ps"):
            b = Body(code, mode, mem=True)
            nacc = max(nacc, len(b.fold))
            cut = b.rows.index("if (bad) TA_FAILED;")
            folds = [f"{dest} += {factor + ' * ' if factor else ''}((acc[{4 * i}] + acc[{4 * i + 1}])"
                     f" + (acc[{4 * i + 2}] + acc[{4 * i + 3}]));" for i, dest, factor in b.fold]
            ind = "\n            "
            kernels.append(f"""
static int ta_kernel_{mode}(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1,
                           double *parts, double *scratch)
{{
    ta_frame F;
    uint64_t c0, c1, s;
    int bad = 0;
    F.R = R; F.U = U; F.parts = parts; F.A = scratch; F.Gb = F.A + {code.ndu};
    F.V = F.Gb + {code.nwrt}; F.D = F.V + {nodes * W}; F.Q = F.D + {nodes * W}; F.acc = F.Q + {2 * nodes};
    F.s = F.c0 = F.c1 = r0;
    {ind.join(call(b.uniform))}
    {f"memset(F.A, 0, {max(code.ndu + code.nwrt, 1)} * sizeof *F.A);" if mode == "sum" else ""}
    for (c0 = r0; c0 < r1; c0 = c1) {{
        c1 = c0 + {code.ch} < r1 ? c0 + {code.ch} : r1;
        F.c0 = c0; F.c1 = c1;
        {f"memset(F.acc, 0, {len(b.fold) * 4} * sizeof *F.acc);" if b.fold else ""}
        for (s = c0; s < c1; s += {W}) {{
            F.s = s;
            {ind.join(call(b.rows[:cut]))}
            if (bad) TA_FAILED;
            {ind.join(call(b.rows[cut + 1:]))}
        }}
        {ind.join(call(folds))}
    }}
    {ind.join(call(_statements(b.block_end)))}
    return bad;
}}
""")
        self.nscratch = code.ndu + code.nwrt + 2 * nodes * W + 2 * nodes + 4 * nacc + 1
        pre = self.prelude() + "#define TA_TAIL 1\n" + _FRAME       # every pass checks its lanes
        funcs = [f"TA_PART int {name}(const ta_frame *F)\n{{\n    TA_FRAME\n{text}\n    return bad;\n}}\n"
                 for text, name in parts.items()]
        decls = "".join(f"TA_PART int {name}(const ta_frame *F);\n" for name in parts.values())
        n = max(1, min(n, len(funcs)))
        units = [funcs[i::n] for i in range(n)]          # dealt out: each unit gets parts of each kind
        return [pre + decls + "".join(kernels) + _DISPATCH + "".join(units[0])] + [
            pre + "".join(u) for u in units[1:] if u]


class RowsTarget(CTarget):
    """The CPU's kernel with the rows innermost, as the interpreter runs them
    (csrc/batch.c): per chunk of code.ch rows, each statement of the body (an
    instruction: an op, or a whole dot, forward or reverse; the per-sample
    gradients of a row) is one loop over the chunk's rows; a dot's loop takes
    four rows a pass as vectors (GCC's vector extension, IEEE operations lane
    by lane: the same bits; the kernel is built for AVX2 where the CPU has
    it, native.avx2); an op whose operands are rows (and, reverse, whose
    adjoints go to rows) calls a loop function of its own (ta_f_OP, ta_r_OP:
    the op's rules over n rows, which GCC vectorises at -O3 as it does the
    interpreter's loops; the kernels are built at -O1).  Values and adjoints
    live in rows of the scratch between loops, only the rows used
    (Body(dense=True)).  A network's dots
    run across rows as the interpreter's do, without its dispatch; the
    kernel's size is one loop per instruction, not per node.  Lanes past the
    chunk's last row compute on what their rows hold and are never read,
    except that the accumulators get +0.0 for them (the prelude's mk_)."""

    def __init__(self) -> None:
        super().__init__(lanes=1)

    def prelude(self) -> str:
        return """\
/* generated by tapead.codegen (RowsTarget): see tapead/codegen.py */
#include "ops.h"
#include "replay.h"
/* one statement: a loop over the chunk's rows; a dot: one loop over vectors
 * of four rows (GCC's vector extension: each lane an IEEE double operation,
 * the same bits as the rows one by one).  Lanes past the chunk's last row
 * (up to a multiple of four: rows hold TA_W >= that) compute on what their
 * rows hold and are never read, except that the accumulators' (TA_V4ACC)
 * get +0.0 instead (mk_): an accumulator starts at +0.0, so it is never
 * -0.0, and adding +0.0 leaves its bits. */
#define TA_LANES(...) for (l_ = 0; l_ < n_; l_++) { const uint64_t l = l_; const int ln_ = (int)(l & 3u); \\
    __VA_ARGS__; }
#if !defined(__GNUC__)
#error "tapead's generated rows kernel needs GCC's vector extension (GCC or Clang)"
#endif
typedef double ta_v4 __attribute__((vector_size(32)));
typedef double ta_v4u __attribute__((vector_size(32), aligned(8), may_alias));
typedef long long ta_i4 __attribute__((vector_size(32)));
/* After each statement on vectors (Body: dense), the upper halves of the
 * vector registers are cleared (vzeroupper), as GCC does itself only from -O2 on: with them
 * left dirty, code built without AVX that runs next (libm's exp, the
 * interpreter, Python) paid for it on every instruction, here 10-25x on a
 * loop of exp calls (docs/native.md, part 7). */
#if defined(__AVX__)
#define TA_VZ() __builtin_ia32_vzeroupper()
#else
#define TA_VZ() ((void)0)
#endif
#define TA_V4ROWS(...) for (g_ = 0; g_ < n_; g_ += 4u) { const uint64_t l = g_; __VA_ARGS__; }
/* the same where the statement adds to accumulators: mk_, the lanes that
 * hold one of the chunk's rows, from the chunk's masks M_ (TA_MASKS, once a
 * chunk: one load a pass, where computing it took nine instructions) */
#define TA_V4SUMS(...) for (g_ = 0; g_ < n_; g_ += 4u) { const uint64_t l = g_; \\
    const ta_i4 mk_ = M_[g_ >> 2]; __VA_ARGS__; }
#define TA_MASKS() for (g_ = 0; g_ < n_; g_ += 4u) { const long long gl_ = (long long)g_, nl_ = (long long)n_; \\
    M_[g_ >> 2] = (ta_i4){gl_, gl_ + 1, gl_ + 2, gl_ + 3} < (ta_i4){nl_, nl_, nl_, nl_}; }
#define TA_V4L(p) (*(const ta_v4u *)(p))
#define TA_V4S(x) ((ta_v4){(x), (x), (x), (x)})
#define TA_V4ST(p, x) (*(ta_v4u *)(p) = (x))
#define TA_V4MUL(a, b) ((a) * (b))
#define TA_V4ADD(a, b) ((a) + (b))
#define TA_V4ADDTO(p, x) TA_V4ST(p, TA_V4L(p) + (x))
#define TA_V4Z ((ta_v4){0.0, 0.0, 0.0, 0.0})
/* rows l .. l + 3 into lanes 0 .. 3 of accumulator i (l is a multiple of
 * four), summed in the local a<i>_ (from +0.0, as acc), which the statement
 * stores into acc when its loop is done */
#define TA_V4ACC(i, x) (a##i##_ = a##i##_ + (ta_v4)((ta_i4)(x) & mk_))
#define TA_ROW (c0 + l)
#define TA_IN(j) X[TA_ROW * nin + (j)]
#define TA_OUT(j, x) Y[TA_ROW * nout + (j)] = (x)
#define TA_SEED(j) (seedmode == 1 ? seed[j] : seed[TA_ROW * nout + (j)])
#define TA_GRAD(j, x) G[TA_ROW * nwrt + (j)] = (x)
#define TA_ACC(i, x) acc[(i) * 4 + ln_] += (x)
#define TA_FAILED return 1
static inline double TA_BITS(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
"""

    def _forward(self, code: Code) -> Tuple[List[str], str]:
        """The forward sweep's statements (inputs, instructions, guards: the
        same in every mode), and the function that runs them for a chunk,
        which each mode's kernel calls (one copy to compile, not three)."""
        b = Body(code, "fwd", dense=True)
        self.helpers.update(b.helpers)
        fw = b.rows[:b.rows.index("if (bad) TA_FAILED;")]
        ind = "\n    "
        return fw, f"""
#define TA_W {code.ch}
TA_PART int ta_rows_forward(const ta_run_t *R, const double *U, double *const restrict V,
                            uint64_t c0, uint64_t n_)
{{
    const uint64_t nin = R->nin;
    const double *const X = R->X;
    uint64_t g_, l_;
    int bad = 0;
    (void)nin; (void)X; (void)U; (void)g_; (void)l_;
    {ind.join(fw)}
    return bad;
}}
#undef TA_W
"""

    def _kernel(self, code: Code, mode: str, fw: Optional[List[str]] = None) -> str:
        """Mode's kernel; fw: the forward statements, which it then runs by
        calling ta_rows_forward instead of holding them."""
        b = Body(code, mode, dense=True)
        self.helpers.update(b.helpers)
        nacc, W = len(b.fold), code.ch
        nv, nd = len(b.vi), len(b.di)
        self.nscratch = max(self.nscratch, code.ndu + code.nwrt + (nv + nd) * W + 2 * code.n
                            + 4 * nacc + 1)
        cut = b.rows.index("if (bad) TA_FAILED;")
        ind = "\n        "
        folds = [f"{dest} += {factor + ' * ' if factor else ''}((acc[{4 * i}] + acc[{4 * i + 1}])"
                 f" + (acc[{4 * i + 2}] + acc[{4 * i + 3}]));" for i, dest, factor in b.fold]
        forward = b.rows[:cut]
        if fw is not None:
            if forward != fw:
                raise AssertionError("the modes' forward sweeps differ")
            forward = ["bad |= ta_rows_forward(R, U, V, c0, n_);"]
        return f"""
#define TA_W {W}
#define TA_ND {nd}
static inline int ta_kernel_{mode}(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1,
                                   double *parts, double *scratch)
{{
    const uint64_t nin = R->nin, nout = R->nout, nwrt = R->nwrt;
    const double *const X = R->X, *const seed = R->seed;
    double *const Y = R->Y, *const G = R->G;
    const int seedmode = R->seedmode;
    double *const A = scratch, *const Gb = A + {code.ndu};
    double *const restrict V = Gb + {code.nwrt}, *const restrict D = V + {nv * W};
    double *const restrict Q = D + {nd * W}, *const restrict acc = Q + {2 * code.n};
    uint64_t c0, c1, n_, g_, l_;
    ta_i4 M_[(TA_W + 3) / 4];
    int bad = 0;
    (void)nin; (void)nout; (void)nwrt; (void)X; (void)seed; (void)Y; (void)G; (void)seedmode;
    (void)acc; (void)A; (void)Gb; (void)parts; (void)V; (void)D; (void)Q; (void)g_; (void)l_; (void)M_;
    {ind.join(b.uniform)}
    {f"memset(A, 0, {max(code.ndu + code.nwrt, 1)} * sizeof *A);" if mode == "sum" else ""}
    for (c0 = r0; c0 < r1; c0 = c1) {{
        c1 = c0 + {W} < r1 ? c0 + {W} : r1;
        n_ = c1 - c0;
        {ind.join(_zero_runs([i for i in range(nacc) if i not in b.stored]))}
        {ind.join(forward)}
        if (bad) TA_FAILED;
        {"TA_MASKS();" if mode != "fwd" else ""}
        {ind.join(b.rows[cut + 1:])}
        {ind.join(folds)}
    }}
    {ind.join(t for t in b.block_end if t)}
    return 0;
}}
#undef TA_W
#undef TA_ND
"""

    def units(self, code: Code, n: int = 1) -> List[str]:
        """One unit per mode (compiled at once when n > 1), the first with the dispatch."""
        self.nscratch = 0
        self.helpers: Dict[str, int] = {}
        fw, fwfn = self._forward(code)
        ks = [self._kernel(code, m, fw).replace("static inline int", "TA_PART int")
              for m in ("fwd", "sum", "ps")]
        decls = "".join(f"TA_PART int ta_kernel_{m}(const ta_run_t *R, const double *U, uint64_t r0, "
                        f"uint64_t r1, double *parts, double *scratch);\n" for m in ("fwd", "sum", "ps"))
        helpers = [_loop(name, op) for name, op in sorted(self.helpers.items())]
        pre = (self.prelude() + _VISIBILITY + _LOOP_ATTR + "".join(h[0] + ";\n" for h in helpers)
               + "TA_PART int ta_rows_forward(const ta_run_t *R, const double *U, "
               "double *const restrict V, uint64_t c0, uint64_t n_);\n")
        defs = "".join(h[0] + "\n" + h[1] for h in helpers)
        if n <= 1:
            return [pre + defs + fwfn + "".join(ks) + _DISPATCH]
        return [pre + decls + defs + fwfn + ks[0] + _DISPATCH, pre + ks[1], pre + ks[2]]


# RowsTarget: an op's loop over a chunk's rows, a function of its own (its
# rows as arguments) that GCC vectorises, as it does the interpreter's loops
# (batch.c: ta_fw_op, ta_rv_op) from the same rules; the kernels are built
# at -O1 (which does not vectorise), these at -O3
_LOOP_ATTR = """\
#if defined(__GNUC__) && !defined(__clang__)
#define TA_LOOP TA_PART __attribute__((optimize("O3", "fp-contract=off")))
#else
#define TA_LOOP TA_PART
#endif
"""


def _loop(name: str, op: int) -> Tuple[str, str]:
    """(declaration, body) of RowsTarget's loop function name (ta_f_OP: the
    op forward over n rows; ta_r_OP: its reverse step, adding to the rows ax
    and ay, either NULL), for `rows` such rows at once, each pointer moving
    by its stride (doubles) from one to the next (_Call: a run of calls as
    one)."""
    op_name, kind = _NAMES[op], _kind(op)
    second = "yk[s]" if kind == "BIN" else "c" if kind == "CST" else "0.0"
    if name.startswith("ta_f_"):
        return (f"TA_LOOP int {name}(const double *x, const double *y, double c, double *r, uint64_t n, "
                f"uint64_t rows, int64_t sx, int64_t sy, int64_t sr)",
                f"{{\n    int bad = 0;\n    uint64_t s, k;\n    (void)y; (void)c;\n"
                f"    for (k = 0; k < rows; k++) {{\n"
                f"        const double *restrict xk = x + (int64_t)k * sx, *restrict yk = y + (int64_t)k * sy;\n"
                f"        double *restrict rk = r + (int64_t)k * sr;\n        (void)yk;\n"
                f"        for (s = 0; s < n; s++) bad |= fwd_{op_name}(xk[s], {second}, &rk[s]);\n    }}\n"
                f"    return bad;\n}}\n")
    step = f"double dx, dy; d_{op_name}(xk[s], {second}, rk[s], &dx, &dy);"
    return (f"TA_LOOP void {name}(const double *x, const double *y, double c, const double *r, "
            f"const double *g, double *ax, double *ay, uint64_t n, uint64_t rows, int64_t sx, int64_t sy, "
            f"int64_t sr, int64_t sg, int64_t sax, int64_t say)",
            f"{{\n    uint64_t s, k;\n    (void)y; (void)c;\n"
            f"    for (k = 0; k < rows; k++) {{\n"
            f"        const double *xk = x + (int64_t)k * sx, *yk = y + (int64_t)k * sy;\n"
            f"        const double *rk = r + (int64_t)k * sr, *gk = g + (int64_t)k * sg;\n"
            f"        double *axk = ax ? ax + (int64_t)k * sax : NULL, *ayk = ay ? ay + (int64_t)k * say : NULL;\n"
            f"        (void)yk;\n"
            f"        if (axk && ayk) for (s = 0; s < n; s++) {{ {step} axk[s] += dx * gk[s]; ayk[s] += dy * gk[s]; }}\n"
            f"        else if (axk) for (s = 0; s < n; s++) {{ {step} axk[s] += dx * gk[s]; }}\n"
            f"        else for (s = 0; s < n; s++) {{ {step} ayk[s] += dy * gk[s]; }}\n    }}\n}}\n")


def _zero_runs(idx: List[int], base: str = "acc", width: str = "4") -> List[str]:
    """Statements zeroing items idx (ascending) of base, width doubles each
    (accumulators: four lanes; adjoint rows: TA_W), a memset a run."""
    out: List[str] = []
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(f"memset({base} + {width} * {idx[i]}, 0, {width} * {j - i + 1} * sizeof *{base});")
        i = j + 1
    return out


def _statements(lines: List[str]) -> List[str]:
    """block_end's lines as whole statements ("{ ...", "  ...", "}" joined)."""
    out: List[str] = []
    depth = 0
    for t in lines:
        if not t:
            continue
        if depth:
            out[-1] += " " + t.strip()
        else:
            out.append(t)
        depth += t.count("{") - t.count("}")
    return out


_VISIBILITY = """\
#if defined(__GNUC__)
#define TA_PART __attribute__((visibility("hidden")))
#else
#define TA_PART
#endif
"""

# the split shape's frame: what each part function reads, from one struct
_FRAME = _VISIBILITY + """\
typedef struct {
    const ta_run_t *R; const double *U;
    double *V, *D, *Q, *acc, *A, *Gb, *parts;
    uint64_t s, c0, c1;
} ta_frame;
#define TA_FRAME \\
    const ta_run_t *const R = F->R; const double *const U = F->U; \\
    double *const restrict V = F->V, *const restrict D = F->D, *const restrict Q = F->Q; \\
    double *const restrict acc = F->acc, *const A = F->A, *const Gb = F->Gb; \\
    double *const parts = F->parts; \\
    const uint64_t s = F->s, c0 = F->c0, c1 = F->c1; \\
    const uint64_t nin = R->nin, nout = R->nout, nwrt = R->nwrt; \\
    const double *const X = R->X, *const seed = R->seed; \\
    double *const Y = R->Y, *const G = R->G; \\
    const int seedmode = R->seedmode; \\
    int bad = 0; \\
    (void)U; (void)V; (void)D; (void)Q; (void)acc; (void)A; (void)Gb; (void)parts; (void)s; \\
    (void)c0; (void)c1; (void)nin; (void)nout; (void)nwrt; (void)X; (void)seed; (void)Y; (void)G; \\
    (void)seedmode;
"""

_DISPATCH = """
int ta_kernel(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1, double *parts,
              double *scratch)
{
    if (!R->seedmode) return ta_kernel_fwd(R, U, r0, r1, parts, scratch);
    if (R->per_sample) return ta_kernel_ps(R, U, r0, r1, parts, scratch);
    return ta_kernel_sum(R, U, r0, r1, parts, scratch);
}
"""
