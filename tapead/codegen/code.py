"""A Program's execution code as plain Python: what every printer reads.

``Code.of(prog)`` copies a Program's flat form and its execution code (made
in C by csrc/replay/code.c: uniform nodes computed once per call, row instructions,
fused dots, value and adjoint slots) into lists of ints and floats.  The
meaning of each field is csrc/api/cdef.h's (ta_flat_t, ta_codeview_t)."""
from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from .._c import OP, OP_KINDS
from .._c import program as _prog

if TYPE_CHECKING:
    from ..replay import Program

__all__ = ["Code", "NONE", "IDOT", "NAMES", "KINDS", "literal", "include_dirs"]

NONE = 0xFFFFFFFF          # csrc/replay/replay.h: TA_NONE, "no slot" / "not reached"
IDOT = 0xFF                # csrc/replay/replay.h: TA_IDOT, a dot instruction
NAMES = {code: name for name, code in OP.items()}                         # op -> its ops.def name
KINDS = [("LEAF", "UN", "BIN", "CST", "NARY")[k] for k in OP_KINDS]       # op -> csrc/api/tapead.h: enum ta_kind


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


def include_dirs() -> List[str]:
    """The folders holding csrc's headers (ops.h and what it includes,
    replay.h, gpu.cuh, ...), which a generated kernel includes by bare name:
    tapead/_include in an installed package (setup.py copies them there,
    flat), else the source tree's csrc folders, one per floor."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inst = os.path.join(pkg, "_include")
    if os.path.isfile(os.path.join(inst, "ops.h")):
        return [os.path.normpath(inst)]
    csrc = os.path.normpath(os.path.join(pkg, os.pardir, "csrc"))
    if os.path.isfile(os.path.join(csrc, "ops", "ops.h")):
        return sorted(os.path.join(csrc, d) for d in os.listdir(csrc) if os.path.isdir(os.path.join(csrc, d)))
    raise FileNotFoundError("tapead's C headers (ops.h) are not installed with it")


class Code:
    """A Program's flat form and execution code as Python lists (see csrc/api/cdef.h:
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
        self.lst: List[int] = list(flat["lst"])        # operand lists (a TAKE node's b: its start)
        self.takes: int = self.op.count(OP["TAKE"])
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

    def kind(self, k: int) -> str:
        """Node k's op's kind: "LEAF", "UN", "BIN", "CST" or "NARY"."""
        return KINDS[self.op[k]]
