"""Code generation: a Program's execution code as a kernel for a target.

A Program (tapead.replay) runs its rows through execution code derived in C
(csrc/code.c).  The interpreter (csrc/batch.c) runs that code; this package
turns it into source that runs the same operations, in the same order, so
the results are the same bits:

    code.py      Code.of(prog): the execution code as Python lists
    lower.py     the typed statements of each sweep, every decision the
                 interpreter makes at run time made here once
    schedule.py  transforms of those statements: storage, split, layer
                 fusion, merged runs
    cprint.py    the C printer (one row or lanes of rows at a time; split)
    rows.py      the rows shape's printer (loops over a chunk's rows)
    cuda.py      the CUDA printer (one thread a row)

The imports go one way, down that list.  The CPU's shapes, and which a
Program gets (``choose``):

========  ===================================  =======================================
shape     what                                 chosen when
========  ===================================  =======================================
lanes2    two rows' statements side by side    at most LANES2_NODES nodes
row       one row at a time, straight-line     up to SPLIT_NODES nodes
split     functions of SPLIT statements over   past SPLIT_NODES nodes
          values in memory
rows      each statement a loop over a chunk   past LANES2_NODES nodes, at least ROWS_INS
          of rows, dots in vectors of four     nodes a row instruction (a network)
========  ===================================  =======================================

    >>> import tapead
    >>> x = tapead.Value(0.5); w = tapead.Value(2.0); y = (w * x).exp()
    >>> p = tapead.compile(y, [x], wrt=[w], native=False)
    >>> code = Code.of(p); choose(code)
    'lanes2'
    >>> "fwd_EXP" in source(code, "row")[0][0]
    True
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Tuple, Union

from .code import IDOT, KINDS, NAMES, NONE, Code, include_dir, literal
from .cprint import CPrinter, SplitPrinter
from .cuda import CUDAPrinter
from .rows import RowsPrinter

__all__ = ["Code", "IDOT", "KINDS", "NAMES", "NONE", "include_dir", "literal", "Shape", "SHAPES", "shape", "printer",
           "choose", "source",
           "CPrinter", "SplitPrinter", "RowsPrinter", "CUDAPrinter"]


class Shape(NamedTuple):
    """A CPU kernel shape: its name (a key of SHAPES), the optimisation flags
    its units are built with, whether it takes AVX2 where the CPU has it,
    (split) statements a function, and the translation units it is cut into
    (0: as many as compilers run at once).  A shape is a value: a variant is
    ``SHAPES["split"]._replace(part=7)``."""
    name: str
    opt: str
    avx2: bool = False
    part: int = 0
    units: int = 0


# Programs up to this many nodes get two rows' statements side by side: one
# row's chain of dependent operations leaves the core waiting on latency,
# two independent chains overlap.  Measured (docs/native.md): 0.67x ->
# 0.53x of the interpreter at 26 nodes; at 112 nodes mixed, and the build
# twice as long (1.1-1.3 s at 112 nodes against 0.5 s; 0.7 s at 52).
LANES2_NODES = 64

# Programs past this many nodes get the split shape: one long function per
# mode costs the compiler time that grows faster than the program (register
# allocation).  The split kernel runs 1.2-1.4x the interpreter's time, the
# straight one 0.8-1.1x up to ~250 nodes, but its build passes ~0.8 s
# there (0.6-0.8 s at 214 nodes, 0.8-1.1 s at 254, 4-7 s at 899; split:
# 0.3-0.6 s).
SPLIT_NODES = 192
SPLIT = 50

# Programs past LANES2_NODES with at least ROWS_INS nodes per row instruction
# (their nodes mostly in dots: a network) get the rows shape.  The demo (984
# nodes, 69 instructions): 0.52-0.58x of the interpreter's time a call,
# built in 1.5-1.9 s, against the split shape's 1.8-1.9x.  A program
# without dots builds more slowly in it (fastest-autograd, 899 nodes: 3.2 s
# for 0.93x per sample, where the split shape builds in 1.0-1.6 s for
# 1.2-1.25x), so it is kept for programs of dots.
ROWS_INS = 4

SHAPES: Dict[str, Shape] = {s.name: s for s in (
    Shape("lanes2", "-O1"),
    Shape("row", "-O1"),
    Shape("split", "-Og", part=SPLIT),
    # bit-CCP took 40% of the rows shape's build, for no speed measured
    Shape("rows", "-O1 -fno-tree-bit-ccp", avx2=True),
)}


def shape(s: Union[str, Shape]) -> Shape:
    """s as a Shape (a name: SHAPES's)."""
    if isinstance(s, Shape):
        return s
    if s not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(map(repr, SHAPES))}, not {s!r}")
    return SHAPES[s]


def printer(s: Shape) -> Any:
    """A printer for shape s (one a kernel: printers keep what they print)."""
    if s.name == "rows":
        return RowsPrinter()
    if s.name == "split":
        return SplitPrinter(s.part)
    return CPrinter(lanes=2 if s.name == "lanes2" else 1)


def choose(code: Code) -> str:
    """The CPU shape for code, by its size (the bounds above)."""
    if code.n > LANES2_NODES and 0 < len(code.ins) * ROWS_INS <= code.n:
        return "rows"
    if code.n > SPLIT_NODES:
        return "split"
    return "lanes2" if code.n <= LANES2_NODES else "row"


def source(code: Code, s: Union[str, Shape], units: int = 1) -> Tuple[List[str], int]:
    """(the kernel's C source as at most `units` translation units (the
    shape's own count if it has one), the scratch it needs in doubles) for
    code in shape s."""
    s = shape(s)
    p = printer(s)
    texts = p.units(code, s.units or units)
    return texts, p.nscratch
