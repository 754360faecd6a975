"""Printing: lowered statements (lower.py) as C, for the CPU's one-row, lanes
and split shapes; the rows shape (rows.py) and CUDA (cuda.py) print with it.

The statements use these names, which a kernel's prelude defines:

``TA_W``            lanes: rows one instance of the sweep computes
``TA_LANES(...)``   run the statement once per lane ``l`` (0 .. TA_W-1)
``TA_IN(j)``        input column j at lane l's row
``TA_OUT(j, x)``    output column j at lane l's row := x
``TA_SEED(j)``      the seed of output j at lane l's row
``TA_GRAD(j, x)``   (ps) gradient column j at lane l's row := x
``TA_ACC(i, x)``    (sum) add lane l's x to accumulator i (its lane)
``TA_BITS(u)``      the double whose bits are the uint64 u (non-finite
                    constants; finite ones are C99 hex literals); every
                    constant goes through ops.h's ``ta_opaque``, so the
                    compiler computes with it as the interpreter does, never
                    folding it into a libm call (code.literal)
``U``               the uniform values, a ``const double *``
``A``, ``Gb``       (sum) ``double *``: the uniform adjoints summed over the
                    block (``code.ndu``), the wrt sums (``nwrt``)
``parts``           (sum) ``double *``: the block's nwrt sums
``bad``             an int: every op's status and every flipped guard is
                    or-ed into it (nonzero: some row failed)
``TA_FAILED``       what to do when, after the forward sweep and the
                    guards, ``bad`` is nonzero (C: return 1, so the
                    interpreter runs the block again and names the row)

Each op is computed by its own rule functions from csrc/ops/ops.h (fwd_NAME,
d_NAME), which the kernel includes: an op stays defined once, in ops.def
and ops.h.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .code import NAMES, NONE, Code, literal
from .lower import (Acc, Check, Dest, Dot, DotRev, Fold, Forward, Grads, Guard, Input, Op, OpRev, Output,
                    Params, Parts, Partial, RevStart, Reverse, Row, Seed, UDot, UDotRev, UGuard, UOp, URev, URevSum,
                    WrtSum, Zero, forward, reverse, uniform_forward)
from .schedule import first_writes, fuse_uniform, split, uniform_dots

__all__ = ["Names", "Locals", "Frame", "Printer", "CPrinter", "SplitPrinter", "DISPATCH", "VISIBILITY"]


# ------------------------------------------------------------ storage names
class Names:
    """How a storage names node k's row value ("v"), adjoint ("d") or
    per-sample uniform adjoint ("du") at lane l, and a uniform node's partials."""

    def __init__(self, code: Code) -> None:
        self.code = code

    def row(self, name: str, k: int) -> str:
        raise NotImplementedError

    def decl(self, name: str, k: int) -> str:
        """The declaration of node k's row array name ("" where the storage holds it)."""
        return ""

    def partial(self, k: int, which: str) -> str:
        """Uniform node k's partial "pdx" or "pdy": its place in Q (the scratch)."""
        return f"Q[{2 * k + (which == 'pdy')}]"

    def declares_partials(self) -> bool:
        return False

    def adj_index(self, k: int) -> int:
        """i where node k's adjoint row is D[i * TA_W + l] (a storage in memory)."""
        raise NotImplementedError


class Locals(Names):
    """Each node's rows a local array (v<k>, d<k>, du<k>), its partials locals."""

    def row(self, name: str, k: int) -> str:
        return f"{name}{k}[l]"

    def decl(self, name: str, k: int) -> str:
        return f"double {name}{k}[TA_W]; "

    def partial(self, k: int, which: str) -> str:
        return f"{which}{k}"

    def declares_partials(self) -> bool:
        return True


class Frame(Names):
    """Node k's rows in the scratch, node by node (V, D), its partials in Q."""

    def row(self, name: str, k: int) -> str:
        return f"{'V' if name == 'v' else 'D'}[{k} * TA_W + l]"

    def adj_index(self, k: int) -> int:
        return k


# ------------------------------------------------------------ statements
class Printer:
    """C text of lowered statements, over a storage's names."""

    def __init__(self, code: Code, names: Names) -> None:
        self.code, self.names = code, names

    # -- values
    def val(self, k: int) -> str:
        """Node k's value at lane l."""
        C = self.code
        return f"U[{C.loc[k]}]" if C.uni[k] else self.names.row("v", k)

    def adj(self, k: int) -> str:
        """Node k's adjoint row at lane l (a per-sample uniform adjoint for a uniform node)."""
        return self.names.row("du" if self.code.uni[k] else "d", k)

    def const(self, k: int) -> str:
        """The constant a CST op's rules get, else 0.0 (an UN op's second argument)."""
        C = self.code
        return literal(C.c[k]) if C.kind(k) == "CST" else "0.0"

    def second(self, k: int, y: int) -> str:
        """The second argument of node k's rules: its y (BIN), its constant (CST), else 0.0."""
        return self.val(y) if y >= 0 else self.const(k)

    def add(self, d: Dest, expr: str) -> Optional[str]:
        """The statement adding expr (lane l's) to d."""
        if d is None:
            return None
        if isinstance(d, Acc):
            return f"TA_ACC({d.i}, {expr});"
        r = self.adj(d.k)
        return f"{r} = {expr};" if d.first else f"{r} += {expr};"

    # -- statements
    def lines(self, s: Any) -> List[str]:
        """s as lines of C (one statement each; none where it does nothing here)."""
        lines: List[str] = getattr(self, "p_" + type(s).__name__)(s)
        return lines

    def p_Input(self, s: Input) -> List[str]:
        n = self.names
        return [f"{n.decl('v', s.k)}TA_LANES({n.row('v', s.k)} = TA_IN({s.j}));"]

    def p_Dot(self, s: Dot) -> List[str]:
        n = self.names
        terms = "".join(f" fwd_MUL({self.val(p)}, {self.val(q)}, &m_); fwd_ADD(r_, m_, &r_);" for p, q in s.terms)
        return [f"{n.decl('v', s.k)}TA_LANES(double r_ = {self.val(s.x)}, m_;{terms} {n.row('v', s.k)} = r_);"]

    def p_Op(self, s: Op) -> List[str]:
        n = self.names
        return [f"{n.decl('v', s.k)}TA_LANES(bad |= fwd_{NAMES[s.op]}"
                f"({self.val(s.x)}, {self.second(s.k, s.y)}, &{n.row('v', s.k)}));"]

    def compare(self, g: Guard) -> str:
        yv = literal(g.c) if g.cst else self.val(g.b)
        return f"bad |= ta_compare({g.kind}, {self.val(g.a)}, {yv}) != {g.outcome}"

    def p_Guard(self, s: Guard) -> List[str]:
        return [f"TA_LANES({self.compare(s)});"]

    def p_Check(self, s: Check) -> List[str]:
        return ["if (bad) TA_FAILED;"]

    def p_Output(self, s: Output) -> List[str]:
        return [f"TA_LANES(TA_OUT({s.j}, {self.val(s.k)}));"]

    tables = False      # long lists of items as loops over tables (a storage in memory sets it)

    def table(self, items: List[Any], body: str, kind: str = "uint32_t") -> str:
        """One statement: body (over t_[j_]) for j_ in 0 .. len(items) - 1, items a static table."""
        return (f"{{ static const {kind} t_[] = {{{', '.join(map(str, items))}}}; uint32_t j_; "
                f"for (j_ = 0; j_ < {len(items)}u; j_++) {body} }}")

    def p_Params(self, s: Params) -> List[str]:
        L = self.code.loc
        if self.tables and len(s.items) > TABLE_ITEMS:
            return [self.table([L[k] for _, k in s.items], "U[t_[j_]] = par[j_];")]
        return [f"U[{L[k]}] = par[{j}];" for j, k in s.items]

    def p_UOp(self, s: UOp) -> List[str]:
        C = self.code
        y = f"U[{C.loc[s.y]}]" if s.y >= 0 else self.const(s.k)
        return [f"bad |= fwd_{NAMES[s.op]}(U[{C.loc[s.x]}], {y}, &U[{C.loc[s.k]}]);"]

    def p_UGuard(self, s: UGuard) -> List[str]:
        return [self.compare(s.g) + ";"]

    def p_UDot(self, s: UDot) -> List[str]:
        L = self.code.loc
        table = ", ".join(f"{L[p]}, {L[q]}, {L[m]}, {L[t]}" for p, q, m, t in s.terms)
        start = f"U[{L[s.x]}]" if s.x >= 0 else literal(s.c)
        return [f"{{ static const uint32_t t_[] = {{{table}}}; double r_ = {start}; uint32_t i_; "
                f"for (i_ = 0; i_ < {4 * len(s.terms)}u; i_ += 4u) {{ double m_; "
                f"fwd_MUL(U[t_[i_]], U[t_[i_ + 1u]], &m_); U[t_[i_ + 2u]] = m_; "
                f"fwd_ADD(r_, m_, &r_); U[t_[i_ + 3u]] = r_; }} }}"]

    def p_UDotRev(self, s: UDotRev) -> List[str]:
        """(The bits: lower.UDotRev.)  A term's adjoint index NONE where it needs none."""
        C = self.code
        if s.sum:
            def idx(n: int) -> int:
                return C.dloc[n] if n >= 0 else NONE
            at, g = "A[{}]", f"A[{C.dloc[s.k]}]"
        else:
            def idx(n: int) -> int:
                return self.names.adj_index(n) if n >= 0 else NONE
            at, g = "D[{} * TA_W + l]", f"D[{self.names.adj_index(s.k)} * TA_W + l]"
        table = ", ".join(f"{C.loc[p]}, {C.loc[q]}, {idx(ap)}u, {idx(aq)}u" for p, q, ap, aq in s.terms)
        start = f"if (i_ == 0u) {at.format(idx(s.x))} += g_; " if s.x >= 0 else ""
        text = (f"{{ static const uint32_t t_[] = {{{table}}}; const double g_ = 0.0 + {g}; "
                f"uint32_t i_ = {4 * len(s.terms)}u; while (i_ > 0u) {{ i_ -= 4u; {start}"
                f"if (t_[i_ + 2u] != {NONE}u) {at.format('t_[i_ + 2u]')} += U[t_[i_ + 1u]] * g_; "
                f"if (t_[i_ + 3u] != {NONE}u) {at.format('t_[i_ + 3u]')} += U[t_[i_]] * g_; }} }}")
        return [text if s.sum else f"TA_LANES({text});"]

    def p_Partial(self, s: Partial) -> List[str]:
        C, n = self.code, self.names
        y = f"U[{C.loc[s.y]}]" if s.y >= 0 else literal(C.c[s.k])
        px, py = n.partial(s.k, "pdx"), n.partial(s.k, "pdy")
        decl = f"double {px}, {py}; " if n.declares_partials() else ""
        return [decl + f"d_{NAMES[s.op]}(U[{C.loc[s.x]}], {y}, U[{C.loc[s.k]}], &{px}, &{py});"]

    def p_RevStart(self, s: RevStart) -> List[str]:
        C, n = self.code, self.names
        if isinstance(n, Frame):            # every adjoint row at once (one statement, not one a node)
            return [f"memset(D, 0, {C.n} * TA_W * sizeof *D);"]
        ps = self.mode == "ps"
        return [n.decl("du" if C.uni[k] else "d", k).strip() for k in range(C.n)
                if C.dloc[k] != NONE and C.loc[k] != NONE and (not C.uni[k] or ps)]

    def p_Seed(self, s: Seed) -> List[str]:
        return [f"TA_LANES({self.add(s.dest, f'TA_SEED({s.j})')});"]

    def p_Zero(self, s: Zero) -> List[str]:
        return [f"TA_LANES({self.adj(s.k)} = 0.0);"]

    def p_OpRev(self, s: OpRev) -> List[str]:
        g = self.names.row("d", s.k)
        adds = " ".join(a for a in (self.add(s.dx, f"dx_ * {g}"), self.add(s.dy, f"dy_ * {g}")) if a)
        if not adds:
            return []
        return [f"TA_LANES(double dx_, dy_; d_{NAMES[s.op]}({self.val(s.x)}, "
                f"{self.second(s.k, s.y)}, {self.names.row('v', s.k)}, &dx_, &dy_); {adds});"]

    def term(self, t: Any, g: str) -> str:
        """A dot's reverse term (lower.DotTerm) as a statement at lane l."""
        if t.kind == "start":
            return f"{{ double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); {self.add(t.dest, f'dx_ * {g}')} }}"
        if t.kind == "g":
            return self.add(t.dest, g) or ""
        return self.add(t.dest, f"{self.val(t.other)} * {g}") or ""

    def p_DotRev(self, s: DotRev) -> List[str]:
        g = self.names.row("d", s.k)
        return [f"TA_LANES({self.term(t, g)});" for t in s.terms]

    def p_URev(self, s: URev) -> List[str]:
        g = self.names.row("du", s.k)
        return [f"TA_LANES({self.add(s.dest, f'{self.names.partial(s.k, s.which)} * {g}')});"]

    def grad(self, k: int, plus0: bool) -> str:
        if k == NONE:
            return "0.0"
        return f"{self.adj(k)} + 0.0" if plus0 else self.adj(k)

    def p_Grads(self, s: Grads) -> List[str]:
        if self.tables and len(s.items) > TABLE_ITEMS:
            return [f"TA_LANES({self.grads_table(s)});"]
        return [f"TA_LANES(TA_GRAD({j}, {self.grad(k, p)}));" for j, k, p in s.items]

    def grads_table(self, s: Grads) -> str:
        """(A storage in memory, where no first write is an assignment) s as one loop over a table."""
        idx = [self.names.adj_index(k) if k != NONE else NONE for _, k, _ in s.items]
        return self.table([f"{i}u" for i in idx], f"TA_GRAD(j_, t_[j_] != {NONE}u ? D[t_[j_] * TA_W + l] : 0.0);")

    def p_WrtSum(self, s: WrtSum) -> List[str]:
        return [f"TA_LANES(TA_ACC({s.i}, {self.names.row('d', s.k)}));"]

    def p_URevSum(self, s: URevSum) -> List[str]:
        C, n = self.code, self.names
        out = [f"{{ double gk_ = A[{C.dloc[s.k]}];"]
        if C.dloc[s.x] != NONE:
            out.append(f"  A[{C.dloc[s.x]}] += {n.partial(s.k, 'pdx')} * gk_;")
        if s.y >= 0 and C.dloc[s.y] != NONE:
            out.append(f"  A[{C.dloc[s.y]}] += {n.partial(s.k, 'pdy')} * gk_;")
        return out + ["}"]

    def p_Parts(self, s: Parts) -> List[str]:
        C = self.code
        if self.tables and len(s.items) > TABLE_ITEMS:      # A's index, or -1: Gb[j], -2: 0.0
            idx = [-2 if k == NONE else C.dloc[k] if C.uni[k] else -1 for _, k in s.items]
            return [self.table(idx, "parts[j_] = t_[j_] >= 0 ? A[t_[j_]] : t_[j_] == -1 ? Gb[j_] : 0.0;",
                               "int64_t")]
        return [f"parts[{j}] = {'0.0' if k == NONE else f'A[{C.dloc[k]}]' if C.uni[k] else f'Gb[{j}]'};"
                for j, k in s.items]

    def fold(self, f: Fold) -> str:
        """Accumulator f.i's lanes, summed in the interpreter's order, added to its destination."""
        dest = f"{f.dest[0]}[{f.dest[1]}]"
        factor = f"U[{self.code.loc[f.factor]}] * " if f.factor is not None else ""
        i = f.i
        return f"{dest} += {factor}((acc[{4 * i}] + acc[{4 * i + 1}]) + (acc[{4 * i + 2}] + acc[{4 * i + 3}]));"

    mode = "fwd"

    def all_lines(self, stmts: List[Any]) -> List[str]:
        return [t for s in stmts for t in self.lines(s)]


class Sweeps:
    """A mode's statements, lowered and scheduled for a storage: uniform (the
    partials), rows (forward, then the reverse), fold, block_end."""

    def __init__(self, code: Code, mode: str, fw: Forward, locals_: bool,
                 dots: Optional[Dict[int, UDot]] = None) -> None:
        """locals_: the storage is Locals (first writes marked); dots: the
        uniform dots to fuse (a storage in memory: schedule.uniform_dots)."""
        self.mode = mode
        self.forward = fw.stmts
        self.cut = fw.check
        self.fold: List[Fold] = []
        self.partials: List[Any] = []
        self.reverse: List[Any] = []
        self.end: List[Any] = []
        if mode != "fwd":
            rv = reverse(code, mode)
            self.fold, self.partials, self.end = rv.fold, rv.partials, rv.end
            self.reverse = first_writes(rv.stmts) if locals_ else rv.stmts
            if dots:
                self.partials = fuse_uniform(self.partials, dots, code, mode == "sum")
                self.end = fuse_uniform(self.end, dots, code, True)
                self.reverse = fuse_uniform(self.reverse, dots, code, False)


# ------------------------------------------------------------ the CPU's kernels
VISIBILITY = """\
#if defined(__GNUC__) && !defined(_WIN32)   /* (Windows' PE/COFF has no symbol visibility) */
#define TA_PART __attribute__((visibility("hidden")))
#else
#define TA_PART
#endif
"""

# Lists longer than this (parameters in, wrt sums and gradients out) are
# printed as a loop over a table (in memory storages), not a statement an item
TABLE_ITEMS = 16

# A generated function holds at most this many statements: a compiler's time
# grows faster than the function's length (register allocation), linearly
# with the number of functions.
FN_STATEMENTS = 200


def functions(prefix: str, lines: List[str], params: str, args: str) -> Tuple[List[str], str, List[str]]:
    """lines (statements over the names in params) cut into functions of at
    most FN_STATEMENTS: (their definitions, their prototypes, the statements
    calling them in order, each or-ing its status into bad)."""
    defs, protos, calls = [], [], []
    for i in range(0, len(lines), FN_STATEMENTS):
        sig = f"TA_PART int {prefix}{i // FN_STATEMENTS}({params})"
        defs.append(sig + "\n{\n    int bad = 0;\n" + "".join("    " + t + "\n" for t in lines[i:i + FN_STATEMENTS])
                    + "    return bad;\n}\n")
        protos.append(sig + ";\n")
        calls.append(f"bad |= {prefix}{i // FN_STATEMENTS}({args});")
    return defs, "".join(protos), calls


def uniform_library(code: Code, dots: Dict[int, UDot]) -> Tuple[List[str], str]:
    """The kernel library's uniform values (cdef.h: ta_uniform_fn), computed as
    batch.c's ta_uniform_forward computes them, every uniform node's value
    (dots fused): (its part functions, the text of ta_uniform with their
    prototypes, for the first unit)."""
    stmts = uniform_forward(code)
    if dots:
        stmts = fuse_uniform(stmts, dots, code, True)
    pr = Printer(code, Frame(code))
    pr.tables = True
    lines = [t for s in stmts if not isinstance(s, Check) for t in pr.lines(s)]
    defs, protos, calls = functions("ta_u", lines, "double *restrict U, const double *restrict par", "U, par")
    top = ("\nint ta_uniform(double *U, const double *par)\n{\n    int bad = 0;\n"
           + "".join("    " + t + "\n" for t in calls) + "    (void)U; (void)par;\n    return bad;\n}\n")
    return defs, protos + top


# A translation unit holds about this many bytes of C at most (more units
# are made where a program needs them, compiled a few at a time): a
# compiler's memory grows with its unit (about 170 MB for 1.3 MB of C here)
UNIT_BYTES = 2 << 20


def deal(units: List[str], funcs: List[str], pre: str) -> List[str]:
    """units with funcs dealt out among them in turn (each gets some of each
    kind), and more units (each starting with pre) while the functions
    would make a unit pass UNIT_BYTES."""
    size = sum(map(len, funcs)) + sum(map(len, units))
    out = list(units) + [pre] * max(0, -(-size // UNIT_BYTES) - len(units))
    for i, f in enumerate(funcs):
        out[i % len(out)] += f
    return out

# A CPU kernel's rows: TA_ROW, the row lane l computes (TA_REAL: a row of
# the call's, not a lane past its end recomputing one); each printer defines
# TA_W, TA_LANES, TA_ROW and TA_REAL, these the rest.
_CPU_IO = """\
#define TA_IN(j) X[TA_ROW * nin + (j)]
#define TA_OUT(j, x) if (TA_REAL) Y[TA_ROW * nout + (j)] = (x)
#define TA_SEED(j) (seedmode == 1 ? seed[j] : seed[TA_ROW * nout + (j)])
#define TA_GRAD(j, x) if (TA_REAL) G[TA_ROW * nwrt + (j)] = (x)
#define TA_ACC(i, x) if (TA_REAL) acc[(i) * 4 + ((TA_ROW - c0) & 3)] += (x)
#define TA_FAILED return 1
static inline double TA_BITS(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
"""


def prelude(what: str, includes: List[str], rows: str, io: str = "") -> str:
    """A translation unit's prelude: what made it, the headers it includes,
    the rows macros of its shape, then the names the statements use (io: a
    target's own; by default the CPU's, and TA_PART for the functions that
    only the kernel's units call)."""
    return (f"/* generated by tapead.codegen ({what}): see tapead/codegen/__init__.py */\n"
            + "".join(f'#include "{h}"\n' for h in includes) + rows + (io or _CPU_IO + VISIBILITY))


def kernel(signature: str, decls: List[str], once: List[str], loop: str, body: List[str],
           after: List[str], ret: Optional[str] = "0") -> str:
    """One kernel, every shape's: its signature; its declarations; what runs
    once a call (the uniform partials, zeroing the block's sums); the loop
    over the rows (loop: its head; body: its lines, already indented
    within it); what runs after it (the block's reverse through the uniform
    nodes); the return."""
    lines = [signature, "{"] + ["    " + t for t in decls + once if t]
    lines += ["    " + loop] + ["        " + t for t in body if t] + ["    }"]
    lines += ["    " + t for t in after if t] + ([f"    return {ret};"] if ret is not None else []) + ["}", ""]
    return "\n" + "\n".join(lines)


SIGNATURE = ("{spec}int ta_kernel_{mode}(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1,\n"
             "    double *parts, double *scratch)")

# what every CPU kernel reads from its run (csrc/api/cdef.h: ta_run_t)
RUN_DECLS = ["const uint64_t nin = R->nin, nout = R->nout, nwrt = R->nwrt;",
             "const double *const X = R->X, *const seed = R->seed;",
             "double *const Y = R->Y, *const G = R->G;",
             "const int seedmode = R->seedmode;",
             "int bad = 0;",
             "(void)nin; (void)nout; (void)nwrt; (void)X; (void)seed; (void)Y; (void)G; (void)seedmode;"]


def chunks(code: Code, ch: str, head: List[str], rows: List[str], folds: List[str]) -> Tuple[str, List[str]]:
    """The loop over a block's chunks of ch rows (the interpreter's: summed
    gradients are summed a chunk at a time, in its order): its head and its
    body (the chunk's bounds, head, its rows, the accumulators' folds)."""
    return ("for (c0 = r0; c0 < r1; c0 = c1) {",
            [f"c1 = c0 + {ch} < r1 ? c0 + {ch} : r1;"] + head + rows + folds)


def block_init(code: Code, mode: str, A: str = "A") -> List[str]:
    """(summed) The block's uniform adjoints and wrt sums start at zero."""
    return [f"memset({A}, 0, {max(code.ndu + code.nwrt, 1)} * sizeof *{A});"] if mode == "sum" else []


DISPATCH = """
int ta_kernel(const ta_run_t *R, const double *U, uint64_t r0, uint64_t r1, double *parts,
              double *scratch)
{
    if (!R->seedmode) return ta_kernel_fwd(R, U, r0, r1, parts, scratch);
    if (R->per_sample) return ta_kernel_ps(R, U, r0, r1, parts, scratch);
    return ta_kernel_sum(R, U, r0, r1, parts, scratch);
}
"""


class CPrinter:
    """The CPU's kernel (csrc/api/cdef.h: ta_kernel_fn), for a C compiler.

    Straight-line code over doubles, ``lanes`` rows at a time (TA_W): with
    lanes 2 each statement is written once per row, side by side, so the
    rows' independent chains of operations overlap in the core (a row past
    the chunk's end recomputes the chunk's row s and writes nothing).
    Blocks run as the interpreter runs them: chunks of code.ch rows, each
    accumulator summed per chunk in lanes (row - chunk start) % 4, then added
    in order, so summed gradients are its bits too."""

    def __init__(self, lanes: int = 1) -> None:
        if lanes not in (1, 2):      # (four rows side by side measured no faster than two: docs/native.md)
            raise ValueError(f"lanes must be 1 or 2, not {lanes!r}")
        self.lanes = lanes
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
        return prelude(f"{self.lanes} row{'s' if self.lanes > 1 else ''} at a time",
                       ["ops.h", "replay.h"], rows)

    def _kernel(self, code: Code, mode: str, fw: Forward) -> str:
        sw = Sweeps(code, mode, fw, True)
        pr = Printer(code, Locals(code))
        pr.mode = mode
        nacc = len(sw.fold)
        self.nscratch = max(self.nscratch, code.ndu + code.nwrt + 1)
        decls = RUN_DECLS + [f"double acc[{max(nacc * 4, 1)}], *A = scratch, *Gb = A + {code.ndu};",
                             "uint64_t c0, c1, s;", "(void)acc; (void)A; (void)Gb; (void)parts;"]
        body = ["    " + t for t in pr.all_lines(sw.forward + sw.reverse)]
        if self.lanes == 1:
            rows = ["for (s = c0; s < c1; s++) {"] + body + ["}"]
        else:     # the body twice: no lane's row is checked but in the chunk's last pass
            rows = ["#define TA_TAIL 0", f"for (s = c0; s + {self.lanes} <= c1; s += {self.lanes}) {{"]
            rows += body + ["}", "#undef TA_TAIL", "#define TA_TAIL 1", "if (s < c1) {"]
            rows += body + ["}", "#undef TA_TAIL"]
        head = [f"memset(acc, 0, {nacc * 4} * sizeof *acc);"] if nacc else []
        loop, lines = chunks(code, str(code.ch), head, rows, [pr.fold(f) for f in sw.fold])
        return kernel(SIGNATURE.format(spec="static ", mode=mode), decls,
                      pr.all_lines(sw.partials) + block_init(code, mode), loop, lines, pr.all_lines(sw.end))

    def units(self, code: Code, n: int = 1) -> List[str]:
        """The kernel's C source as translation units (here one); self.nscratch
        is then the scratch it needs (doubles)."""
        self.nscratch = 0
        fw = forward(code)
        parts, top = uniform_library(code, {})
        return [self.prelude() + self._kernel(code, "fwd", fw) + self._kernel(code, "sum", fw)
                + self._kernel(code, "ps", fw) + DISPATCH + "".join(parts) + top]


# the split shape's frame: what each part function reads, from one struct
_FRAME = """\
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


class SplitPrinter(CPrinter):
    """Large programs: each mode's statements cut into functions of ``part``
    statements over values and adjoints in memory (V, D, Q in the scratch),
    which a compiler builds in time about linear in the program (one long
    function's register allocation is not: docs/native.md); a part the
    modes share (the forward sweep) is written once."""

    def __init__(self, part: int = 50) -> None:
        super().__init__(lanes=1)
        self.part = part

    def units(self, code: Code, n: int = 1) -> List[str]:
        W, nodes = self.lanes, code.n
        parts: Dict[Tuple[Any, ...], int] = {}       # a run of statements -> its function's number
        kernels, nacc = [], 0
        fw = forward(code)
        dots = uniform_dots(code)

        def call(items: List[Tuple[Any, str]]) -> List[str]:
            return [f"bad |= ta_p{num}(&F);" for num in split(items, self.part, parts)]

        def statements(pr: Printer, stmts: List[Any]) -> List[Tuple[Any, str]]:
            """stmts as (key, one statement's text): a dot's reverse a statement a term."""
            items: List[Tuple[Any, str]] = []
            for s in stmts:
                ls = pr.lines(s)
                if isinstance(s, URevSum):       # one statement on several lines
                    ls = [" ".join(x.strip() for x in ls)]
                keys: List[Tuple[Any, ...]] = ([("term", s.k, t) for t in s.terms] if isinstance(s, DotRev)
                        else [(s, i) for i in range(len(ls))])
                items += [(key, t) for key, t in zip(keys, ls) if t]
            return items

        for mode in ("fwd", "sum", "ps"):
            sw = Sweeps(code, mode, fw, False, dots)
            pr = Printer(code, Frame(code))
            pr.mode = mode
            pr.tables = True
            nacc = max(nacc, len(sw.fold))
            decls = ["ta_frame F;", "uint64_t c0, c1, s;", "int bad = 0;",
                     f"F.R = R; F.U = U; F.parts = parts; F.A = scratch; F.Gb = F.A + {code.ndu};",
                     f"F.V = F.Gb + {code.nwrt}; F.D = F.V + {nodes * W}; F.Q = F.D + {nodes * W}; "
                     f"F.acc = F.Q + {2 * nodes};",
                     "F.s = F.c0 = F.c1 = r0;"]
            once = call(statements(pr, sw.partials)) + block_init(code, mode, "F.A")
            rows = ([f"for (s = c0; s < c1; s += {W}) {{", "    F.s = s;"]
                    + ["    " + t for t in call(statements(pr, sw.forward[:sw.cut]))]
                    + ["    if (bad) TA_FAILED;"]
                    + ["    " + t for t in call(statements(pr, sw.forward[sw.cut + 1:] + sw.reverse))] + ["}"])
            head = ["F.c0 = c0; F.c1 = c1;"] + ([f"memset(F.acc, 0, {len(sw.fold) * 4} * sizeof *F.acc);"]
                                              if sw.fold else [])
            folds = call([(("fold", t), t) for t in (pr.fold(f) for f in sw.fold)])
            loop, lines = chunks(code, str(code.ch), head, rows, folds)
            kernels.append(kernel(SIGNATURE.format(spec="static ", mode=mode), decls, once, loop, lines,
                                  call(statements(pr, sw.end)), "bad"))
        self.nscratch = code.ndu + code.nwrt + 2 * nodes * W + 2 * nodes + 4 * nacc + 1
        pre = self.prelude() + "#define TA_TAIL 1\n" + _FRAME       # every pass checks its lanes
        funcs = ["TA_PART int ta_p%d(const ta_frame *F)\n{\n    TA_FRAME\n%s\n    return bad;\n}\n"
                 % (num, "\n".join("    " + t for _, t in run)) for run, num in parts.items()]
        decl = "".join(f"TA_PART int ta_p{num}(const ta_frame *F);\n" for num in range(len(parts)))
        uparts, utop = uniform_library(code, dots)
        n = max(1, min(n, len(funcs) + len(uparts)))
        units = [pre + decl + "".join(kernels) + DISPATCH + utop] + [pre] * (n - 1)
        return deal(units, funcs + uparts, pre)
