"""The rows shape: the CPU's kernel with the rows innermost, as the
interpreter runs them (csrc/replay/batch.c).

Per chunk of code.ch rows, each statement (an instruction: an op, or a
whole dot, forward or reverse; the per-sample gradients of a row) is one
loop over the chunk's rows; a dot's loop takes four rows a pass as vectors
(GCC's vector extension, IEEE operations lane by lane: the same bits; the
kernel is built for AVX2 where the CPU has it); an op whose operands are
rows (and, reverse, whose adjoints go to rows) calls a loop function of its
own (ta_f_OP, ta_r_OP: the op's rules over n rows, which GCC vectorises at
-O3 as it does the interpreter's loops; the kernels are built at -O1).
Values and adjoints live in rows of the scratch between loops, only the
rows used (schedule.Dense).  A network's dots run across rows as the
interpreter's do, without its dispatch, a layer's dots fused
(schedule.fuse_forward, fuse_reverse); the kernel's size is one loop per
instruction, not per node.  Lanes past the chunk's last row compute on what
their rows hold and are never read, except that the accumulators get +0.0
for them (the prelude's mk_)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from .code import NAMES, Code
from .cprint import (DISPATCH, RUN_DECLS, SIGNATURE, TABLE_ITEMS, Names, Printer, Sweeps, block_init, chunks, deal,
                     kernel, prelude, uniform_library)
from .lower import Acc, Dot, DotRev, Forward, Grads, Op, OpRev, RevStart, Row, dests, forward
from .schedule import (Barrier, Dense, FDot, LoopCall, RDot, fuse_forward, fuse_reverse, layer_dot,
                       uniform_dots)

__all__ = ["RowsPrinter"]


class DenseNames(Names):
    """Rows numbered by schedule.Dense: V[i * TA_W + l], D[i * TA_W + l]."""

    def __init__(self, code: Code, dense: Dense) -> None:
        super().__init__(code)
        self.dense = dense

    def row(self, name: str, k: int) -> str:
        if name == "v":
            return f"V[{self.dense.v(k)} * TA_W + l]"
        return f"D[{self.dense.d(k)} * TA_W + l]"

    def adj_index(self, k: int) -> int:
        return self.dense.d(k)


class RowsStatements(Printer):
    """Lowered statements as the rows shape's loops."""

    def __init__(self, code: Code, dense: Dense) -> None:
        super().__init__(code, DenseNames(code, dense))
        self.dense = dense
        self.tables = True
        self.helpers: Dict[str, int] = {}    # loop functions called: name -> op
        self.stored: Set[int] = set()        # accumulators a dot's loop stores whole
        self.assigned: Set[int] = set()      # adjoint rows a fused layer's loop sets by its first term

    def vval(self, k: int) -> str:
        """Node k's values at rows l .. l + 3 as a vector (ta_v4)."""
        C = self.code
        return f"TA_V4S(U[{C.loc[k]}])" if C.uni[k] else f"TA_V4L(&{self.names.row('v', k)})"

    def rows_only(self, k: int, x: int, y: int) -> bool:
        """Node k's operands are rows (not uniform values)."""
        C = self.code
        return not C.uni[x] and (y < 0 or not C.uni[y])

    def row_targets(self, s: OpRev) -> bool:
        """Each operand of s that needs an adjoint has a row for it (no accumulator)."""
        return not isinstance(s.dx, Acc) and not isinstance(s.dy, Acc)

    def ref(self, arr: str, k: int) -> Tuple[str, int]:
        return (arr, self.dense.v(k) if arr == "V" else self.dense.d(k))

    # -- forward
    def forward_items(self, stmts: List[Any]) -> List[Any]:
        """The forward proper as items for schedule.fuse_forward."""
        items: List[Any] = []
        for s in stmts:
            if isinstance(s, Dot):
                items.append(FDot(s, self.code))
            elif isinstance(s, Op) and self.rows_only(s.k, s.x, s.y):
                y = s.y if s.y >= 0 else s.x
                items.append(LoopCall(True, s.op, s.k, [self.ref("V", s.x), self.ref("V", y), self.ref("V", s.k)],
                                      {s.x, y}, {s.k}))
            else:
                items.append(Barrier(s))
        return items

    def reverse_items(self, stmts: List[Any], fuse: bool) -> List[Any]:
        """The reverse sweep as loop calls, layer dots (fuse: summed) and statements."""
        C = self.code
        items: List[Any] = []
        for s in stmts:
            if isinstance(s, OpRev) and self.rows_only(s.k, s.x, s.y) and self.row_targets(s):
                if s.dx is None and s.dy is None:
                    continue
                y = s.y if s.y >= 0 else s.x
                ax = self.ref("D", s.x) if s.dx is not None else None
                ay = self.ref("D", s.y) if s.dy is not None else None
                items.append(LoopCall(False, s.op, s.k, [self.ref("V", s.x), self.ref("V", y), self.ref("V", s.k),
                                                         self.ref("D", s.k), ax, ay],
                                      {s.k}, {d.k for d in (s.dx, s.dy) if isinstance(d, Row)}))
                continue
            if isinstance(s, DotRev) and fuse:
                r = layer_dot(s, C)
                if r is not None:
                    items.append(r)
                    self.stored.update(i for i in [r.start] + [c[1] for c in r.cols] if i is not None)
                    continue
            items.append(Barrier(s))
        return items

    def schedule_reverse(self, items: List[Any]) -> List[Any]:
        """(summed) items with runs of layer dots fused: a batch between two
        statements at a time, with the adjoint rows written before it."""
        out: List[Any] = []
        added: Set[int] = set()
        batch: List[Any] = []
        for it in items + [None]:
            if it is None or isinstance(it, Barrier):
                for b in batch:
                    if isinstance(b, LoopCall):
                        added |= b.writes
                if batch:
                    out += fuse_reverse(batch, self.code, added, self.assigned)
                    batch = []
                if it is not None:
                    out.append(it)
                    added.update(d.k for d in dests(it.stmt) if isinstance(d, Row))
            else:
                batch.append(it)
        return out

    # -- text
    def text(self, it: Any) -> List[str]:
        if isinstance(it, Barrier):
            return self.lines(it.stmt)
        if isinstance(it, LoopCall):
            return [self.call(it)]
        if isinstance(it, list):
            return [self.fdots(it)]
        if isinstance(it, tuple):
            return self.rdots(*it)
        return self.lines(it)

    def call(self, c: LoopCall) -> str:
        name = f"ta_{'f' if c.fwd else 'r'}_{NAMES[c.op]}"
        self.helpers[name] = c.op
        p = [f"&{r[0]}[{r[1]} * TA_W]" if r else "NULL" for r in c.ptrs]
        st = [f"{d} * (int64_t)TA_W" if d else "0" for d in c.steps]
        args = p[:2] + [self.const(c.k)] + p[2:] + ["n_", str(c.rows)] + st
        return f"{'bad |= ' if c.fwd else ''}{name}({', '.join(args)});"

    def fdots(self, block: List[FDot]) -> str:
        """One loop over vectors of four rows computing block's dots, their terms interleaved."""
        body = [f"ta_v4 r{j}_ = {self.vval(d.dot.x)};" for j, d in enumerate(block)]
        for t in range(max(len(d.dot.terms) for d in block)):
            body += [f"r{j}_ = TA_V4ADD(r{j}_, TA_V4MUL({self.vval(d.dot.terms[t][0])}, "
                     f"{self.vval(d.dot.terms[t][1])}));"
                     for j, d in enumerate(block) if t < len(d.dot.terms)]
        body += [f"TA_V4ST(&{self.names.row('v', d.k)}, r{j}_);" for j, d in enumerate(block)]
        return f"TA_V4ROWS({' '.join(body)}); TA_VZ();"

    def rdots(self, block: List[RDot], ncol: int) -> List[str]:
        """Loops over vectors of four rows for block's reverse, each for ncol
        products of every dot (their x rows read once a pass, their adjoint
        rows added to dot by dot in registers), the starts in the first; each
        accumulator summed in a local, stored at the loop's end (as the
        statement form's).  An adjoint row the run sets by its first term
        (RDot.fresh) is not zeroed (its first term assigned, not added to a
        zeroed row: the same bits up to the sign of a zero, lower.py)."""
        C = self.code
        out = []
        fresh = block[0].fresh
        cols = [c for c in range(len(block[0].cols)) if block[0].cols[c][2] or any(d.cols[c][1] is not None
                                                                                    for d in block)]
        for c0 in range(0, max(len(cols), 1), ncol):
            group = cols[c0:c0 + ncol]
            accs = [d.start for d in block if d.start is not None] if c0 == 0 else []
            pre = "double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); " if accs else ""
            code = []
            for c in group:
                x, _, drow, _ = block[0].cols[c]
                code.append(f"const ta_v4 x{x}_ = {self.vval(x)};")
                if drow and x in fresh:
                    code.append(f"ta_v4 d{x}_;")
                elif drow:
                    code.append(f"ta_v4 d{x}_ = TA_V4L(&{self.names.row('d', x)});")
            for j, d in enumerate(block):
                code.append(f"const ta_v4 g{j}_ = TA_V4L(&{self.names.row('d', d.k)});")
                if c0 == 0 and d.start is not None:
                    code.append(f"TA_V4ACC({d.start}, TA_V4MUL(TA_V4S(dx_), g{j}_));")
                for c in group:
                    x, i, drow, w = d.cols[c]
                    if i is not None:
                        accs.append(i)
                        code.append(f"TA_V4ACC({i}, TA_V4MUL(x{x}_, g{j}_));")
                    if drow:
                        term = f"TA_V4MUL(TA_V4S(U[{C.loc[w]}]), g{j}_)"
                        code.append(f"d{x}_ = {term};" if j == 0 and x in fresh
                                    else f"d{x}_ = TA_V4ADD(d{x}_, {term});")
            for c in group:
                x, _, drow, _ = block[0].cols[c]
                code += [f"TA_V4ST(&{self.names.row('d', x)}, d{x}_);"] if drow else []
            out.append("{ " + pre + "".join(f"ta_v4 a{i}_ = TA_V4Z; " for i in accs)
                       + f"TA_V4SUMS({' '.join(code)}); "
                       + "".join(f"TA_V4ST(acc + {4 * i}, a{i}_); " for i in accs) + "} TA_VZ();")
        return out

    # -- statements whose dense form differs
    def vadd(self, d: Any, v: str) -> Optional[str]:
        if d is None:
            return None
        if isinstance(d, Acc):
            return f"TA_V4ACC({d.i}, {v});"
        return f"TA_V4ADDTO(&{self.adj(d.k)}, {v});"

    def p_DotRev(self, s: DotRev) -> List[str]:
        """Each row's terms in the same order, four rows a pass; the dot's
        accumulators (each used here alone) summed in locals, then stored."""
        vterms = []
        for t in s.terms:
            if t.kind == "start":
                vterms.append(f"{{ double dx_, dy_; d_ADD(0.0, 0.0, 0.0, &dx_, &dy_); "
                              f"{self.vadd(t.dest, 'TA_V4MUL(TA_V4S(dx_), g_4)')} }}")
            elif t.kind == "g":
                vterms.append(self.vadd(t.dest, "g_4") or "")
            else:
                vterms.append(self.vadd(t.dest, f"TA_V4MUL({self.vval(t.other)}, g_4)") or "")
        if not vterms:
            return []
        accs = [t.dest.i for t in s.terms if isinstance(t.dest, Acc)]
        self.stored.update(accs)
        g = self.names.row("d", s.k)
        return ["{ " + "".join(f"ta_v4 a{i}_ = TA_V4Z; " for i in accs)
                + f"TA_V4SUMS(const ta_v4 g_4 = TA_V4L(&{g}); " + " ".join(vterms) + "); "
                + "".join(f"TA_V4ST(acc + {4 * i}, a{i}_); " for i in accs) + "} TA_VZ();"]

    def p_Grads(self, s: Grads) -> List[str]:                  # a row's gradients in one pass
        if len(s.items) > TABLE_ITEMS:
            return [f"TA_LANES({self.grads_table(s)});"]
        return ["TA_LANES(" + " ".join(f"TA_GRAD({j}, {self.grad(k, p)});" for j, k, p in s.items) + ");"]

    def p_RevStart(self, s: RevStart) -> List[str]:
        """The adjoint rows to zero a chunk: all but those a fused layer's loop sets first."""
        rows = sorted(i for k, i in self.dense.di.items() if k not in self.assigned)
        return [" ".join(zero_runs(rows, "D", "TA_W"))]


def zero_runs(idx: List[int], base: str = "acc", width: str = "4") -> List[str]:
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


# the rows shape's macros (the shared prelude adds the statements' names)
_ROWS = """\
/* one statement: a loop over the chunk's rows; a dot: one loop over vectors
 * of four rows (GCC's vector extension: each lane an IEEE double operation,
 * the same bits as the rows one by one).  Lanes past the chunk's last row
 * (up to a multiple of four: rows hold TA_W >= that) compute on what their
 * rows hold and are never read, except that the accumulators' (TA_V4ACC)
 * get +0.0 instead (mk_): an accumulator starts at +0.0, so it is never
 * -0.0, and adding +0.0 leaves its bits. */
#define TA_LANES(...) for (l_ = 0; l_ < n_; l_++) { const uint64_t l = l_; __VA_ARGS__; }
#define TA_ROW (c0 + l)
#define TA_REAL 1
#if !defined(__GNUC__)
#error "tapead's generated rows kernel needs GCC's vector extension (GCC or Clang)"
#endif
typedef double ta_v4 __attribute__((vector_size(32)));
typedef double ta_v4u __attribute__((vector_size(32), aligned(8), may_alias));
typedef long long ta_i4 __attribute__((vector_size(32)));
/* After each statement on vectors, the upper halves of the vector registers
 * are cleared (vzeroupper), as GCC does itself only from -O2 on: with them
 * left dirty, code built without AVX that runs next (libm's exp, the
 * interpreter, Python) pays for it on every instruction (10-25x on a loop
 * of exp calls, docs/native.md). */
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
"""


# RowsPrinter: an op's loop over a chunk's rows, a function of its own (its
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


def loop_function(name: str, op: int) -> Tuple[str, str]:
    """(declaration, body) of loop function name (ta_f_OP: the op forward
    over n rows; ta_r_OP: its reverse step, adding to the rows ax and ay,
    either NULL), for `rows` such rows at once, each pointer moving by its
    stride (doubles) from one to the next (a merged run of calls as one)."""
    from .code import KINDS
    op_name, kind = NAMES[op], KINDS[op]
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


class RowsPrinter:
    """The rows shape's translation units (see the module's docstring)."""

    def __init__(self) -> None:
        self.nscratch = 0
        self.lanes = 1

    def prelude(self) -> str:
        return prelude("rows innermost", ["ops.h", "replay.h"], _ROWS)

    def _sweeps(self, code: Code, mode: str, fw: Forward) -> Tuple[RowsStatements, Sweeps, List[str], List[str]]:
        """Mode's statements printed: (printer, sweeps, forward lines, the rest)."""
        sw = Sweeps(code, mode, fw, False, self.dots)
        dense = Dense(code)
        dense.number(sw.forward + sw.reverse)
        pr = RowsStatements(code, dense)
        pr.mode = mode
        fwd: List[str] = []
        for it in fuse_forward(pr.forward_items(sw.forward[:sw.cut]), code):
            fwd += pr.text(it)
        rest: List[str] = []
        for s in sw.forward[sw.cut + 1:]:
            rest += pr.lines(s)
        if mode != "fwd":
            items = pr.reverse_items(sw.reverse, mode == "sum")
            if mode == "sum":
                items = pr.schedule_reverse(items)
            body = []
            for it in items[1:]:
                body += pr.text(it)
            rest += pr.text(items[0]) + body          # RevStart last: the rows to zero are known then
        return pr, sw, fwd, rest

    def _forward(self, code: Code, fw: Forward) -> str:
        """The forward sweep (the same in every mode) as the function each mode's kernel calls."""
        pr, sw, fwd, _ = self._sweeps(code, "fwd", fw)
        self.helpers.update(pr.helpers)
        ind = "\n    "
        return f"""
#define TA_W {code.ch}
TA_PART int ta_rows_forward(const ta_run_t *R, const double *U, double *const restrict V,
                            uint64_t c0, uint64_t n_)
{{
    const uint64_t nin = R->nin;
    const double *const X = R->X;
    uint64_t g_, l_;
    int bad = 0;
    (void)nin; (void)X; (void)U; (void)g_; (void)l_;
    {ind.join(fwd)}
    return bad;
}}
#undef TA_W
"""

    def _kernel(self, code: Code, mode: str, fw: Forward) -> str:
        pr, sw, fwd, rest = self._sweeps(code, mode, fw)
        self.helpers.update(pr.helpers)
        nacc, W = len(sw.fold), code.ch
        nv, nd = len(pr.dense.vi), len(pr.dense.di)
        self.nscratch = max(self.nscratch, code.ndu + code.nwrt + (nv + nd) * W + 2 * code.n
                            + 4 * nacc + 1)
        decls = RUN_DECLS + ["double *const A = scratch, *const Gb = A + %d;" % code.ndu,
                             f"double *const restrict V = Gb + {code.nwrt}, *const restrict D = V + {nv * W};",
                             f"double *const restrict Q = D + {nd * W}, *const restrict acc = Q + {2 * code.n};",
                             "uint64_t c0, c1, n_, g_, l_;", "ta_i4 M_[(TA_W + 3) / 4];",
                             "(void)acc; (void)A; (void)Gb; (void)parts; (void)V; (void)D; (void)Q; (void)g_; "
                             "(void)l_; (void)M_;"]
        head = ["n_ = c1 - c0;"] + zero_runs([i for i in range(nacc) if i not in pr.stored])
        rows = ["bad |= ta_rows_forward(R, U, V, c0, n_);", "if (bad) TA_FAILED;"]
        rows += (["TA_MASKS();"] if mode != "fwd" else []) + rest
        loop, lines = chunks(code, "TA_W", head, rows, [pr.fold(f) for f in sw.fold])
        partials = [t for s in sw.partials for t in pr.lines(s)]
        end = [t for s in sw.end for t in pr.lines(s)]
        return (f"\n#define TA_W {W}\n"
                + kernel(SIGNATURE.format(spec="TA_PART ", mode=mode), decls, partials + block_init(code, mode),
                         loop, lines, end) + "#undef TA_W\n")

    def units(self, code: Code, n: int = 1) -> List[str]:
        """One unit per mode (compiled at once when n > 1), the first with the dispatch."""
        self.nscratch = 0
        self.helpers: Dict[str, int] = {}
        self.dots = uniform_dots(code)
        fw = forward(code)
        fwfn = self._forward(code, fw)
        ks = [self._kernel(code, m, fw) for m in ("fwd", "sum", "ps")]
        decls = "".join(f"TA_PART int ta_kernel_{m}(const ta_run_t *R, const double *U, uint64_t r0, "
                        f"uint64_t r1, double *parts, double *scratch);\n" for m in ("fwd", "sum", "ps"))
        helpers = [loop_function(name, op) for name, op in sorted(self.helpers.items())]
        pre = (self.prelude() + _LOOP_ATTR + "".join(h[0] + ";\n" for h in helpers)
               + "TA_PART int ta_rows_forward(const ta_run_t *R, const double *U, "
               "double *const restrict V, uint64_t c0, uint64_t n_);\n")
        defs = "".join(h[0] + "\n" + h[1] for h in helpers)
        uparts, utop = uniform_library(code, self.dots)
        if n <= 1:
            return [pre + defs + fwfn + "".join(ks) + DISPATCH + utop + "".join(uparts)]
        return deal([pre + decls + defs + fwfn + ks[0] + DISPATCH + utop, pre + ks[1], pre + ks[2]], uparts, pre)

