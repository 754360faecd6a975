"""Native replay: a Program's kernel generated (tapead.codegen), built,
cached and loaded by tapead.kcache (the compiler, its flags, the cache and
its rules: docs/native.md, "The kernel cache").  This module picks the
kernel's shape and optimisation level by the program's size (the bounds
below; -O1 at most: build time grows much faster at -O2, for no speed
measured; never fast-math or FMA contraction: the kernel's arithmetic is
the interpreter's, bit for bit) and which path runs a Program
(NativeState).  A kernel is loaded once per process and never
unloaded (a Program on another thread may still be in it); its address is
handed to C (csrc/cdef.h: ta_prog_set_kernel), which runs it on the
Program's threads with the GIL released.

    >>> import os, tapead.native as nat
    >>> os.path.isabs(nat.cache_dir())
    True
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

from . import codegen, kcache
from .kcache import CompilerError, avx2, cache_dir, compiler, flags, jobs

__all__ = ["CompilerError", "compiler", "cache_dir", "key", "kernel"]


_ABI = 1                    # csrc/cdef.h: TA_KERNEL_ABI
_TAG = f"ta_kernel ABI {_ABI}"


def key(source: Union[str, List[str]], argv: List[str], opt: str = "-O1") -> str:
    """The cache key of the kernel built from source (one translation unit,
    or several) by argv at opt: a hash of all that makes it (its file in the
    cache: k-<key>.so)."""
    units = [source] if isinstance(source, str) else list(source)
    return kcache.c_key(units, argv, opt, kcache.headers(codegen.include_dir(), (".h", ".def")), _TAG)


# Programs up to this many nodes get two rows' statements side by side
# (codegen.CTarget(lanes=2)): one row's chain of dependent operations leaves
# the core waiting on latency, two independent chains overlap.  Measured
# (docs/native.md): 0.67x -> 0.53x of the interpreter at 26 nodes; at 112
# nodes mixed (per sample a loss, summed a gain, in the same runs), and the
# build twice as long (1.1-1.3 s at 112 nodes against 0.5 s; 0.7 s at 52)
LANES2_NODES = 64


# Programs past this many nodes get the split shape (codegen.CTarget(split=
# SPLIT)): functions of SPLIT statements over values in memory, the forward
# sweep shared by the three modes, compiled at SPLIT_OPT by several compilers
# at once.  One long function per mode costs the compiler time that grows
# faster than the program (register allocation): docs/native.md.  The split
# kernel runs 1.2-1.4x the interpreter's time, the straight one 0.8-1.1x up
# to ~250 nodes, but its build passes ~0.8 s there (0.6-0.8 s at 214 nodes,
# 0.8-1.1 s at 254, 4-7 s at 899; split: 0.3-0.6 s)
SPLIT_NODES = 192
SPLIT = 50
SPLIT_OPT = "-Og"


# Programs past LANES2_NODES with at least ROWS_INS nodes per row
# instruction (their nodes mostly in dots: a network) get the rows shape
# (codegen.RowsTarget): the interpreter's loops over rows, a dot's terms in
# vectors of four rows, without its dispatch, built at ROWS_OPT (and for AVX2
# where the CPU has it), a layer's dots fused.  The demo (984 nodes, 69
# instructions): 0.52-0.58x of the interpreter's time a call (its C call
# 0.45-0.49x), built in 1.5-1.9 s, against the split shape's 1.8-1.9x;
# before the fusion (issue 26 part 6) smaller networks 0.63-0.77x (190-300
# nodes, against 1.2-2.0x).  A program without dots builds more
# slowly in it (fastest-autograd, 899 nodes: 3.2 s for 0.93x per sample,
# where the split shape builds in 1.0-1.6 s for 1.2-1.25x), so it is kept
# for programs of dots, and the split shape for the first call of large
# programs of ops (docs/native.md)
ROWS_INS = 4
ROWS_OPT = "-O1 -fno-tree-bit-ccp"     # bit-CCP took 40% of the build, for no speed measured


def shape(code: "codegen.Code") -> "codegen.CTarget":
    """The CPU target for code, by its size (the bounds above)."""
    if code.n > LANES2_NODES and len(code.ins) * ROWS_INS <= code.n:
        return codegen.RowsTarget()
    if code.n > SPLIT_NODES:
        return codegen.CTarget(split=SPLIT)
    return codegen.CTarget(lanes=2 if code.n <= LANES2_NODES else 1)


def kernel(code: "codegen.Code", timeout: Optional[float] = None) -> Tuple[int, int]:
    """(address, scratch doubles) of the CPU kernel for code, built or found
    in the cache and loaded.  timeout: the longest one compiler may run
    (default: kcache.build_timeout()).  CompilerError if it cannot be built."""
    t = shape(code)
    if isinstance(t, codegen.RowsTarget):
        source, opt = t.units(code, jobs()), ROWS_OPT + (" -mavx2" if avx2() else "")
    elif t.split:
        source, opt = t.units(code, jobs()), SPLIT_OPT
    else:
        source, opt = t.units(code), "-O1"
    include = codegen.include_dir()
    address = kcache.library(source, opt, include, "ta_kernel", kcache.headers(include, (".h", ".def")),
                             _TAG, timeout)
    return address, t.nscratch


# ------------------------------------------------------------ a Program's path
# native=None runs the interpreter.  Generated CPU code is faster only for
# small programs (docs/native.md: 0.53-0.8x of the interpreter under ~200
# nodes, 1.0-1.4x above), where its compiler run (0.2-1 s) pays off only
# past tens of millions of rows, and for networks (the rows shape: 8-20 us a
# call saved on the demo for a 1.5-3.4 s build); native=None is never slower than the
# interpreter, first call included.  native=True builds it (a small program
# over many rows; checking; the CPU twin of the GPU's kernels).
NONE_REASON = ("native=None: the interpreter, never slower; generated code pays only for "
               "small programs over many rows (native=True), see docs/native.md")


class NativeState:
    """Which path runs a Program: generated code (native=True, built now) or
    the interpreter, and why.  mode: the Program's native argument; landed:
    it was unpickled (a failed build then falls back, where it lands,
    instead of raising).  (It keeps no reference to the Program: no cycle.)"""

    def __init__(self, prog: Any, mode: Optional[bool], landed: bool = False) -> None:
        self.mode = mode
        self.why = "native=False" if mode is False else NONE_REASON if mode is None else ""
        if mode:
            try:
                address, nscratch = kernel(codegen.Code.of(prog))
            except CompilerError as e:
                if not landed:
                    raise
                self.why = f"native=True, but the build failed where it was unpickled: {e}"
                return
            from ._c import program as _prog
            _prog.prog_set_kernel(prog._p, address, nscratch)

    def describe(self, running_native: bool) -> str:
        if running_native:
            return "'native'"
        return f"'interpreter' ({self.why})"
