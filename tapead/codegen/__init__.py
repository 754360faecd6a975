"""Code generation: a Program's execution code as a kernel for a target.

A Program (tapead.replay) runs its rows through execution code derived in C
(csrc/replay/code.c).  The interpreter (csrc/replay/batch.c) runs that code; this package
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
Program gets with native=True (``choose``; a shape can also be named):

========  ========================================  ======================================
shape     what                                      chosen when
========  ========================================  ======================================
lanes2    two rows' statements side by side,        at most LANES2_NODES nodes
          straight-line
rows      each statement a loop over a chunk of     past LANES2_NODES nodes, at least
          rows, dots in vectors of four             ROWS_INS nodes a row instruction
                                                    (a network)
split     functions of SPLIT statements over        more uniform nodes than row
          values in memory                          instructions (a program of parameters)
========  ========================================  ======================================

Any other program runs in the interpreter even with native=True (repr says
so): for programs of many row operations generated code measured no faster
than the interpreter, which runs each operation as a loop over many rows,
and its build grows with the program (docs/native.md).

    >>> import tapead
    >>> x = tapead.Value(0.5); w = tapead.Value(2.0); y = (w * x).exp()
    >>> p = tapead.compile(y, [x], wrt=[w], native=False)
    >>> code = Code.of(p); choose(code)
    'lanes2'
    >>> "fwd_EXP" in source(code, "lanes2")[0][0]
    True
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from .code import IDOT, KINDS, NAMES, NONE, Code, include_dirs, literal
from .cprint import CPrinter, SplitPrinter
from .cuda import CUDAPrinter
from .rows import RowsPrinter

__all__ = ["Code", "IDOT", "KINDS", "NAMES", "NONE", "include_dirs", "literal", "Shape", "SHAPES", "shape", "printer",
           "choose", "why_not", "source",
           "CPrinter", "SplitPrinter", "RowsPrinter", "CUDAPrinter"]


class Shape(NamedTuple):
    """A CPU kernel shape: its name (a key of SHAPES), the optimisation flags
    its units are built with, whether it takes AVX2 where the CPU has it,
    (split) statements a function, the translation units it is cut into
    (0: as many as compilers run at once), and flags it takes only from GCC
    (others, Clang, refuse them).  A shape is a value: a variant is
    ``SHAPES["split"]._replace(part=7)``."""
    name: str
    opt: str
    avx2: bool = False
    part: int = 0
    units: int = 0
    gcc: str = ""


# Programs up to this many nodes get two rows' statements side by side: one
# row's chain of dependent operations leaves the core waiting on latency,
# two independent chains overlap.  Measured (docs/native.md): a European
# call's price and Greeks (18 nodes) 0.72-0.76x of the interpreter's time;
# random graphs of 3-8 nodes 0.68-0.70x, of 112 nodes 0.93-0.95x built in
# 0.6-0.9 s, of 212 nodes 1.08x built in 3.6 s; one row at a time was
# slower than the interpreter at every size (0.82x at 3 nodes, 1.13x at 112,
# 2x on the European call).
LANES2_NODES = 64

# Programs past LANES2_NODES with at least ROWS_INS nodes per row instruction
# (their nodes mostly in dots: a network) get the rows shape: the demo (984
# nodes, 69 instructions) 0.52-0.58x of the interpreter's time a call, built
# in 1.5-1.9 s.  Programs of operations were slower in it (fastest-autograd:
# 1.22x at 1,012 nodes, 2.32x at 5,012 built in 31 s).
ROWS_INS = 4

# Programs whose work is mostly uniform (computed once a call from the
# parameters: a GPT's loss over its parameters) get the split shape, its
# uniform dots fused: examples/gpt.py's loss for one name (40,005 nodes)
# 0.37x of the interpreter's time, built in 6-8 s.  SPLIT statements a
# function.
SPLIT = 50

SHAPES: Dict[str, Shape] = {s.name: s for s in (
    Shape("lanes2", "-O1"),
    Shape("split", "-Og", part=SPLIT),
    # bit-CCP took 40% of the rows shape's build, for no speed measured
    Shape("rows", "-O1", avx2=True, gcc="-fno-tree-bit-ccp"),
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
    return CPrinter(lanes=2)


def choose(code: Code) -> Optional[str]:
    """The CPU shape for code by the rules above, or None where generated code
    would not be faster than the interpreter (or cannot run it: take nodes)."""
    if code.takes:
        return None
    if code.n <= LANES2_NODES:
        return "lanes2"
    if len(code.uops) > len(code.ins):
        return "split"
    if len(code.ins) * ROWS_INS <= code.n:
        return "rows"
    return None


def why_not(code: Code) -> str:
    """Why choose(code) is None, for a Program's repr."""
    if code.takes:
        return (f"a program with take nodes ({code.takes}) runs in the interpreter: generated code "
                f"does not pick by index")
    return (f"a program of {code.n} nodes in {len(code.ins)} row operations and {len(code.uops)} "
            f"uniform ones is not one generated code runs faster than the interpreter (docs/native.md); "
            f"a shape named ({', '.join(map(repr, SHAPES))}) builds it all the same")


def source(code: Code, s: Union[str, Shape], units: int = 1) -> Tuple[List[str], int]:
    """(the kernel's C source as at most `units` translation units (the
    shape's own count if it has one), the scratch it needs in doubles) for
    code in shape s."""
    s = shape(s)
    if code.takes:
        raise ValueError(f"tapead.native: {why_not(code)} (no shape builds it)")
    p = printer(s)
    texts = p.units(code, s.units or units)
    return texts, p.nscratch
