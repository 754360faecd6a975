"""Native replay: a Program's kernel generated (tapead.codegen), built with a
C compiler, cached on disk and loaded into this process.

- The compiler: ``$CC`` if set, else the one that built Python (sysconfig's
  CC), with ``-O1 -ffp-contract=off`` (no fast-math, no FMA contraction:
  the kernel's arithmetic is the interpreter's, bit for bit; -O1: build
  time grows with a kernel's size much faster at -O2, for no speed
  measured: docs/native.md).
- The cache: one shared library per kernel, named by a hash of everything
  that makes it (the source, the headers it includes, the compiler, its
  version and flags), in ``$TAPEAD_CACHE``, else ``$XDG_CACHE_HOME/tapead``,
  else ``~/.cache/tapead``.  At most ``$TAPEAD_CACHE_MB`` MiB (default 256):
  past that the least recently used kernels are deleted.  A kernel is
  written under a temporary name and renamed into place, so processes that
  build the same kernel at once never see half a file.
- Loading: ctypes, once per kernel per process (never unloaded: a Program
  running on another thread may still be in it); the kernel's address is
  handed to C (csrc/cdef.h: ta_prog_set_kernel), which runs it on the
  Program's threads with the GIL released.

    >>> import tapead.native as nat
    >>> nat.cache_dir().endswith("tapead") or "TAPEAD_CACHE" in __import__("os").environ
    True
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple, Union

from . import codegen

__all__ = ["CompilerError", "compiler", "cache_dir", "build", "kernel"]


class CompilerError(RuntimeError):
    """Generated code could not be built: no C compiler, or it failed (the message says which and why)."""


_ABI = 2                    # csrc/cdef.h: TA_KERNEL_ABI
_lock = threading.Lock()
_loaded: Dict[str, Tuple[Any, Tuple[int, int]]] = {}   # key -> (the ctypes library, its two functions' addresses)
_versions: Dict[Tuple[str, ...], str] = {}      # compiler argv -> its --version output


def compiler() -> Optional[List[str]]:
    """The C compiler's command ($CC, else sysconfig's CC) as argv, or None if it is not found."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    try:
        argv = shlex.split(cc)
    except ValueError:
        return None
    if not argv or shutil.which(argv[0]) is None:
        return None
    return argv


def _cc_name() -> str:
    return os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"


def flags(opt: str = "-O1") -> List[str]:
    """The flags kernels are compiled with (besides -I, -c, -o and the file), at optimisation level opt."""
    return opt.split() + ["-std=c99", "-fPIC", "-ffp-contract=off", "-fno-strict-aliasing"]


_avx2: Optional[bool] = None


def avx2() -> bool:
    """Whether this machine's CPU has AVX2 (x86-64 Linux: /proc/cpuinfo's flags;
    elsewhere False).  A kernel built with -mavx2 has the flag in its cache
    key, so a machine without AVX2 never finds it there (a shared cache)."""
    global _avx2
    if _avx2 is None:
        _avx2 = False
        if sys.platform.startswith("linux") and os.uname().machine in ("x86_64", "amd64"):
            try:
                with open("/proc/cpuinfo") as fh:
                    for line in fh:
                        if line.startswith("flags"):
                            _avx2 = " avx2" in line
                            break
            except OSError:
                pass
    return _avx2


def _link_flags() -> List[str]:
    f = ["-shared"]
    if sys.platform == "darwin":
        f += ["-undefined", "dynamic_lookup"]
    return f


def jobs() -> int:
    """How many compilers a build runs at once: the CPUs this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def cache_dir() -> str:
    """The folder kernels are cached in (created on first use)."""
    d = os.environ.get("TAPEAD_CACHE")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tapead")
    return d


def cache_limit() -> int:
    """The cache's bound in bytes ($TAPEAD_CACHE_MB MiB, default 256)."""
    try:
        mb = float(os.environ.get("TAPEAD_CACHE_MB", "256"))
    except ValueError:
        mb = 256.0
    return int(mb * 2 ** 20)


def _version(argv: List[str]) -> str:
    key = tuple(argv)
    if key not in _versions:
        try:
            r = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=30)
            _versions[key] = r.stdout + r.stderr
        except (OSError, subprocess.SubprocessError) as e:
            _versions[key] = repr(e)
    return _versions[key]


def _headers() -> bytes:
    d = codegen.include_dir()
    out = []
    for name in sorted(os.listdir(d)):
        if name.endswith((".h", ".def")):
            with open(os.path.join(d, name), "rb") as fh:
                out.append(name.encode() + b"\0" + fh.read())
    return b"\0".join(out)


def key(source: Union[str, List[str]], argv: List[str], opt: str = "-O1") -> str:
    """The cache name of the kernel built from source (one translation unit,
    or several) by argv at opt: a hash of all that makes it."""
    units = [source] if isinstance(source, str) else list(source)
    h = hashlib.sha256()
    for part in (str(_ABI), str(len(units)), *units, "\0".join(argv), _version(argv),
                 "\0".join(flags(opt) + _link_flags())):
        h.update(part.encode() + b"\0")
    h.update(_headers())
    return h.hexdigest()[:32]


def _suffix() -> str:
    return ".dll" if sys.platform == "win32" else ".so"


def _evict(d: str, keep: str) -> None:
    """Delete the least recently used kernels until the folder is within its bound."""
    try:
        entries = []
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if name.startswith("k-") and name.endswith(_suffix()):
                st = os.stat(p)
                entries.append((st.st_mtime, st.st_size, p))
            elif name.startswith("tmp-") and time.time() - os.stat(p).st_mtime > 3600:
                shutil.rmtree(p, ignore_errors=True)      # left by a process that died building
    except OSError:
        return
    total, limit = sum(e[1] for e in entries), cache_limit()
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        if p == keep:
            continue
        try:
            os.remove(p)
            total -= size
        except OSError:
            pass


def _check(r: "subprocess.CompletedProcess[str]", argv: List[str]) -> None:
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip()
        if len(msg) > 2000:
            msg = msg[:2000] + " ..."
        raise CompilerError(f"the C compiler {argv[0]!r} failed (exit {r.returncode}):\n{msg}")


def _compile(argv: List[str], opt: str, tmp: str, units: List[str]) -> str:
    """Compile units (each a file in tmp, all at once) and link them: the library's path in tmp."""
    out = os.path.join(tmp, "kernel" + _suffix())
    srcs = []
    for i, text in enumerate(units):
        srcs.append(os.path.join(tmp, f"unit{i}.c"))
        with open(srcs[-1], "w") as fh:
            fh.write(text)
    inc = ["-I", codegen.include_dir()]
    try:
        if len(units) == 1:
            r = subprocess.run(argv + flags(opt) + _link_flags() + inc + ["-o", out, srcs[0], "-lm"],
                               capture_output=True, text=True, timeout=600)
            _check(r, argv)
            return out
        objs = [src[:-2] + ".o" for src in srcs]
        procs = [subprocess.Popen(argv + flags(opt) + inc + ["-c", "-o", o, src], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for src, o in zip(srcs, objs)]
        try:
            for p in procs:
                so, se = p.communicate(timeout=600)
                _check(subprocess.CompletedProcess(p.args, p.returncode, so, se), argv)
        finally:
            for p in procs:             # one failed: the others are not waited for
                if p.poll() is None:
                    p.kill()
                    p.wait()
        r = subprocess.run(argv + _link_flags() + ["-o", out] + objs + ["-lm"],
                           capture_output=True, text=True, timeout=600)
        _check(r, argv)
        return out
    except (OSError, subprocess.SubprocessError) as e:
        raise CompilerError(f"the C compiler {argv[0]!r} could not run: {e}") from e


def build(source: Union[str, List[str]], opt: str = "-O1") -> str:
    """The path of the shared library built from source (one translation
    unit, or several compiled at once and linked) at optimisation level opt:
    from the cache, or compiled into it.  CompilerError if there is no
    compiler or it fails."""
    argv = compiler()
    if argv is None:
        raise CompilerError(f"no C compiler found (CC={_cc_name()!r}): native replay needs one; "
                            "set CC, or pass native=False")
    units = [source] if isinstance(source, str) else list(source)
    k = key(units, argv, opt)
    d = cache_dir()
    path = os.path.join(d, f"k-{k}{_suffix()}")
    if os.path.exists(path):
        try:
            os.utime(path)                  # recently used: evicted last
        except OSError:
            pass
        return path
    try:
        os.makedirs(d, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="tmp-", dir=d)
    except OSError as e:
        raise CompilerError(f"cannot write the kernel cache {d!r} ({e}); set TAPEAD_CACHE") from e
    try:
        out = _compile(argv, opt, tmp, units)
        os.replace(out, path)               # atomic: another process sees all of it or none
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _evict(d, path)
    return path


def _load(path: str, k: str) -> Tuple[int, int]:
    import ctypes
    with _lock:
        if k not in _loaded:
            lib = ctypes.CDLL(path)
            _loaded[k] = (lib, (ctypes.cast(lib.ta_kernel, ctypes.c_void_p).value or 0,
                                ctypes.cast(lib.ta_uniform, ctypes.c_void_p).value or 0))
        return _loaded[k][1]


def kernel(code: "codegen.Code", shape: Union[str, "codegen.Shape"]) -> Tuple[int, int, int]:
    """(the kernel's address, its uniform values' function's, scratch doubles)
    for code in shape, built or found in the cache and loaded (csrc/cdef.h:
    ta_kernel_fn, ta_uniform_fn).  CompilerError if it cannot be built."""
    s = codegen.shape(shape)
    source, nscratch = codegen.source(code, s, jobs())
    opt = s.opt + (" -mavx2" if s.avx2 and avx2() else "")
    for attempt in (0, 1):
        path = build(source, opt)
        try:
            return _load(path, os.path.basename(path)) + (nscratch,)
        except OSError as e:            # deleted by another process's eviction, or unloadable
            if attempt:
                raise CompilerError(f"the kernel {path!r} could not be loaded: {e}") from e
            try:
                os.remove(path)
            except OSError:
                pass
    raise AssertionError("not reached")


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
                if not landed:
                    raise
                self.why = f"native=True, but the build failed where it was unpickled: {e}"
                return
            from ._c import program as _prog
            _prog.prog_set_kernel(prog._p, address, uniform, nscratch)

    def describe(self, running_native: bool) -> str:
        if running_native:
            return "'native'"
        return f"'interpreter' ({self.why})"
