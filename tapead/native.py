"""Native replay: a Program run by generated machine code.  tapead.codegen
writes the kernel (its shape chosen for the program: codegen.choose) and
builds, caches and loads it (codegen.build: the compiler, its flags, the
cache and its rules: docs/native.md, "The kernel cache"); this module
decides which path runs a Program (NativeState) and hands the kernel to C
(csrc/api/cdef.h: ta_prog_set_kernel), which runs it on the Program's threads
with the GIL released.  A kernel is loaded once per process and never
unloaded (a Program on another thread may still be in it).

    >>> import os, tapead.native as nat
    >>> os.path.isabs(nat.cache_dir())
    True
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

from . import codegen
from ._c.program import KERNEL_ABI
from .codegen import build
from .codegen.build import CompilerError, avx2, cache_dir, compiler, flags, jobs

__all__ = ["CompilerError", "compiler", "cache_dir", "key", "kernel"]

_TAG = f"ta_kernel ABI {KERNEL_ABI}"     # in every kernel's key: a new ABI never meets an old kernel


def key(source: Union[str, List[str]], argv: List[str], opt: str = "-O1") -> str:
    """The cache key of the kernel built from source (one translation unit,
    or several) by argv at opt: a hash of all that makes it (its file in the
    cache: k-<key>.so)."""
    units = [source] if isinstance(source, str) else list(source)
    return build.c_key(units, argv, opt, build.headers(codegen.include_dirs(), (".h", ".def")), _TAG)


def opt_flags(s: "codegen.Shape", gcc: bool, avx2: bool) -> str:
    """Shape s's optimisation flags (before codegen.build.flags adds the
    rest) for a compiler that is GCC or not, on a CPU with AVX2 or not."""
    return s.opt + (" " + s.gcc if s.gcc and gcc else "") + (" -mavx2" if s.avx2 and avx2 else "")


def kernel(code: "codegen.Code", shape: Union[str, "codegen.Shape"],
           timeout: Optional[float] = None) -> Tuple[int, int, int]:
    """(the kernel's address, its uniform values' function's, scratch doubles)
    for code in shape, built or found in the cache and loaded (csrc/api/cdef.h:
    ta_kernel_fn, ta_uniform_fn).  timeout: the longest one compiler may run
    (default: codegen.build.build_timeout()).  CompilerError if it cannot be
    built."""
    s = codegen.shape(shape)
    source, nscratch = codegen.source(code, s, jobs())
    opt = opt_flags(s, build.is_gcc(), avx2())
    include = codegen.include_dirs()
    fn, ufn = build.library(source, opt, include, ("ta_kernel", "ta_uniform"),
                            build.headers(include, (".h", ".def")), _TAG, timeout)
    return fn, ufn, nscratch


# ------------------------------------------------------------ a Program's path
# native=None runs the interpreter, which is never slower, first call
# included: generated code is faster only for some programs (small ones,
# networks, programs of parameters: codegen.choose), and only once its build
# (tenths of a second to seconds) is paid back over many rows or calls.
# native=True builds it (such a program run often; checking; the CPU twin of
# the GPU's kernels).  docs/native.md has the figures and their command.
NONE_REASON = ("native=None: the interpreter, never slower; generated code pays only for small "
               "programs, networks and programs of parameters over many rows or calls (native=True), "
               "see docs/native.md")


class NativeState:
    """Which path runs a Program: generated code (native=True, built now) or
    the interpreter, and why.  mode: the Program's native argument; landed:
    it was unpickled (a failed build then falls back, where it lands,
    instead of raising).  (It keeps no reference to the Program: no cycle.)"""

    def __init__(self, prog: Any, mode: Union[None, bool, str, "codegen.Shape"], landed: bool = False) -> None:
        self.mode = mode
        self.why = "native=False" if mode is False else NONE_REASON if mode is None else ""
        if mode:
            code = codegen.Code.of(prog)
            shape = codegen.choose(code) if mode is True or mode is False else mode
            if shape is None:
                self.why = "native=True, but " + codegen.why_not(code)
                return
            try:
                address, uniform, nscratch = kernel(code, shape)
            except CompilerError as e:
                late = isinstance(e, build.BuildTimeout) and mode is True    # (a shape named: asked for)
                if not (landed or late):
                    raise
                self.why = (f"native=True, but the build failed where it was unpickled: {e}" if landed
                            else f"native=True, but its kernel took too long to build: {e}")
                if not landed:
                    import warnings
                    warnings.warn(f"tapead.compile: the interpreter runs this program: {self.why}",
                                  stacklevel=4)
                return
            from ._c import program as _prog
            _prog.prog_set_kernel(prog._p, address, uniform, nscratch)

    def describe(self, running_native: bool) -> str:
        if running_native:
            return "'native'"
        return f"'interpreter' ({self.why})"
