"""Programs on an NVIDIA GPU: ``prog(X, device="cuda")``, ``prog.grad(X, ..., device="cuda")``.

One CUDA thread runs one row, in float64.  Two ways to run a Program
(docs/gpu.md):

- small programs (at most ``GENERATED_MAX_NODES`` nodes): straight-line
  CUDA generated from the Program (every value and adjoint a local
  variable), compiled with NVRTC for this program;
- larger ones: one interpreter kernel (csrc/gpu/gpu_interp.cu), compiled once,
  that reads the program as data, its values and adjoints in [node][row]
  arrays in GPU memory (NVRTC's compile time grows faster than linearly
  with straight-line code: minutes for thousands of nodes).

Both run ops.h's op rules as device functions (csrc/gpu/gpu.cuh), compiled
without FMA contraction or fast math (``NVRTC_OPTIONS``): +, -, *, / and
sqrt give the CPU Program's bits; exp, log, log1p, tanh, pow, sin and cos
are CUDA's math library, within an ulp or two of the C library's.
Gradients summed over rows are added on the GPU in a fixed order
(csrc/gpu/gpu.cuh: ta_gpu_rowsum), so every launch gives the same bits.  A
row that fails (a domain error, a flipped guard) raises the CPU
Program's exception, naming the first failing row.

X may be a numpy array (results come back as numpy) or a CuPy array
(results stay on the GPU, as CuPy arrays).  Kernels are compiled once per
process and kept on disk, in the kernel cache (tapead.codegen.build).  Needs CuPy (``pip install
cupy-cuda13x``, or the cupy-cudaXXx matching your CUDA), imported only when a GPU is asked for.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .codegen import KINDS, Code, CUDAPrinter, NONE as _NONE
from .codegen import build as kcache
from .codegen.build import cache_dir
from .errors import TapeadError
from .replay import _check_rows, _check_seed, _vector

__all__ = ["run", "require", "cuda_source", "interpreter_source", "NVRTC_OPTIONS", "GENERATED_MAX_NODES",
           "cache_dir", "CUDAUnavailable"]

# Programs of at most this many nodes get generated straight-line code;
# larger ones the interpreter.  Measured on an H100 (docs/gpu.md): NVRTC
# 0.45 s at 152 nodes, 0.81 s at 226; the first result costs ~0.25 s more
# (CUDA start-up, the run), so ~190 nodes keep it within 1 s, and
# generated code ran 2-4x the interpreter's speed at every size.
GENERATED_MAX_NODES = 192

# No FMA contraction (a * b + c rounds twice, as on the CPU), no fast math,
# C++17 (hexadecimal float literals); -default-device: the headers'
# functions are device functions.  The -arch option is added per GPU.
NVRTC_OPTIONS = ("--fmad=false", "-std=c++17", "-default-device")

_THREADS = 128                   # rows (threads) per block of the row kernels
_BLOCK = (_THREADS,)
_BLOCKS_PER_SM = 128             # the generated kernel's grid: at most this many blocks a
                                 # multiprocessor (several waves, so a partial last one costs
                                 # little; 2^24 rows on 132 SMs: 8 rows a thread)
_SUMTHREADS, _SUMROWS = 256, 1024   # csrc/gpu/gpu.cuh: TA_GPU_SUMTHREADS, TA_GPU_SUMROWS
_NOFAIL = (1 << 64) - 1

# NVRTC has no C library headers; csrc/gpu/gpu.cuh says why these are enough
_STUBS = {
    "math.h": "", "string.h": "",
    "stddef.h": "typedef decltype(sizeof(0)) size_t;\n",   # (NVRTC's own, if it has one: the same type)
    "stdint.h": ("typedef unsigned char uint8_t; typedef unsigned short uint16_t;\n"
                 "typedef unsigned int uint32_t; typedef unsigned long long uint64_t;\n"
                 "typedef signed char int8_t; typedef short int16_t; typedef int int32_t;\n"
                 "typedef long long int64_t;\n#define UINT32_MAX 0xffffffffu\n"
                 "#define UINT64_MAX 0xffffffffffffffffull\n#define INT64_MAX 0x7fffffffffffffffll\n"),
}


class CUDAUnavailable(RuntimeError):
    """device="cuda" was asked for where no usable CUDA GPU is."""


# ------------------------------------------------------------------ CuPy

_READY: Any = None      # the CuPy module once a GPU was found with it


def _cupy() -> Any:
    """CuPy, with a usable GPU; a clear error otherwise (checked once a
    process, while sys.modules holds the same CuPy)."""
    global _READY
    ready = sys.modules.get("cupy")
    if ready is not None and ready is _READY:
        return ready
    try:
        import cupy
    except ImportError as e:
        from ._install import needs
        raise needs("cuda", 'device="cuda"') from e
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:   # CUDARuntimeError: no driver, or too old a one
        raise CUDAUnavailable(f'device="cuda": no usable CUDA GPU here ({e})') from e
    if n < 1:
        raise CUDAUnavailable('device="cuda": no CUDA GPU here')
    _READY = cupy
    return cupy


def require() -> Any:
    """The CuPy module, once a usable GPU is known to be there (else
    ImportError without CuPy, CUDAUnavailable without a GPU)."""
    return _cupy()


def _device_index(device: str) -> Optional[int]:
    """None for "cuda" (CuPy's current device), N for "cuda:N"."""
    if device == "cuda":
        return None
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    raise ValueError(f'device must be None, "cpu", "cuda" or "cuda:N", not {device!r}')


# --------------------------------------------------------------- sources

def _csrc() -> List[str]:
    """The folders of the C sources the kernels are compiled from: codegen's
    include_dirs() (the source tree's csrc folders, or the headers installed
    with the package)."""
    from .codegen import include_dirs
    try:
        ds = include_dirs()
    except FileNotFoundError:
        ds = []
    if not any(os.path.isfile(os.path.join(d, "gpu.cuh")) for d in ds):
        raise CUDAUnavailable("device=\"cuda\" compiles tapead's C sources (csrc's headers, gpu.cuh, "
                              "gpu_interp.cu), which this installation lacks")
    return ds


def _headers() -> Dict[str, str]:
    """Every header a kernel may include, by name: csrc's, and the stubs."""
    hs = {n: b.decode() for n, b in kcache.headers(_csrc(), (".h", ".def", ".cuh")).items()}
    hs.update(_STUBS)
    return hs


def interpreter_source() -> str:
    """The interpreter kernel's source (csrc/gpu/gpu_interp.cu)."""
    path = next(p for p in (os.path.join(d, "gpu_interp.cu") for d in _csrc()) if os.path.isfile(p))
    with open(path) as f:
        return f.read()


def cuda_source(prog: Any, mode: str = "ps") -> str:
    """The generated CUDA of prog (tapead.codegen.CUDAPrinter): mode "ps"
    computes outputs and per-sample gradients, "fwd" outputs only."""
    return CUDAPrinter(mode).source(Code.of(prog))


# ------------------------------------------------------------- compiling
# Compiled kernels are kept in memory per process and GPU, and on disk in
# the kernel cache with the C kernels (tapead.codegen.build: its folder, bound and
# rules, docs/native.md "The kernel cache").

def nvrtc_compile(source: str, arch: str, name: str = "tapead.cu",
                  ptx: bool = False) -> bytes:
    """source compiled by NVRTC (CuPy's binding) for sm_<arch>: a cubin, or
    PTX; a RuntimeError with NVRTC's log if it does not compile.  Needs no
    GPU (the tests use it)."""
    from cupy_backends.cuda.libs import nvrtc
    hs = _headers()
    prog = nvrtc.createProgram(source, name, [v.encode() for v in hs.values()],
                               [k.encode() for k in hs])
    try:
        opts = [o for o in NVRTC_OPTIONS + (f"-arch={'compute' if ptx else 'sm'}_{arch}",)]
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC could not compile {name}:\n{nvrtc.getProgramLog(prog)}") from e
        return bytes(nvrtc.getPTX(prog) if ptx else nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)


def _nvcc_compile(source: str, arch: str, why: Exception, b: "kcache.Build") -> bytes:
    """source compiled by nvcc in build folder b, with the same options,
    where NVRTC could not (a warning says why); re-raises why without nvcc."""
    import shutil
    import warnings
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise why
    warnings.warn(f"tapead.cuda: NVRTC failed, compiling with nvcc instead ({str(why)[:500]})")
    with open(os.path.join(b.path, "k.cu"), "w") as f:
        f.write(source)
    inc = [a for d in _csrc() for a in ("-I", d)]
    b.run([([nvcc, "-cubin", f"-arch=sm_{arch}", "--fmad=false", "-std=c++17", *inc, "-x", "cu",
             "k.cu", "-o", "k.cubin"], f"the CUDA kernel (k.cu: {source.count(chr(10)) + 1:,} lines)")],
          kcache.build_timeout(), "nvcc", advice="run the program on the CPU instead")
    with open(os.path.join(b.path, "k.cubin"), "rb") as f:
        return f.read()


def _nvrtc_version() -> str:
    try:
        from cupy_backends.cuda.libs import nvrtc
        return repr(nvrtc.getVersion())
    except Exception:      # (no CuPy, or no NVRTC library: nvcc builds it, if anything)
        return ""


_MODULES: Dict[Tuple[str, int], Any] = {}     # (key, device) -> the loaded module
_COMPILING = threading.Lock()     # one compile at a time in a process (threads wanting it wait)


def _module(cp: Any, source: str, arch: str) -> Any:
    """The compiled module of source on the current GPU: from memory, from
    the disk cache (checked), or compiled now (and kept in both)."""
    if os.environ.get("TAPEAD_CUDA_CACHE"):
        import warnings
        warnings.warn("tapead.cuda: TAPEAD_CUDA_CACHE is no longer read: CUDA kernels are kept with "
                      "the C kernels, in the kernel cache (TAPEAD_CACHE; docs/native.md)")
    dev = int(cp.cuda.runtime.getDevice())
    k = kcache.key("CUDA", source, list(NVRTC_OPTIONS), arch, _nvrtc_version(), _headers())
    mod = _MODULES.get((k, dev))
    if mod is not None:
        return mod
    with _COMPILING:
        mod = _MODULES.get((k, dev))     # (another thread's, made while this one waited)
        if mod is None:
            mod = _MODULES[(k, dev)] = _load(cp, source, arch, k)
    return mod


def _compile(source: str, arch: str, b: "kcache.Build") -> bytes:
    try:
        return nvrtc_compile(source, arch)
    except (ImportError, RuntimeError) as e:
        return _nvcc_compile(source, arch, e, b)


def _load(cp: Any, source: str, arch: str, k: str) -> Any:
    """source's module, loaded on the current GPU from the cubin's checked
    bytes (kcache.fetch: from the disk cache, or compiled now and kept)."""
    e = kcache.fetch(k, f".sm_{arch}.cubin", lambda b: _compile(source, arch, b))
    try:
        mod = cp.cuda.function.Module()
        mod.load(e.data)
        return mod
    finally:
        e.close()


# ------------------------------------------------------------------ plans

class _Plan:
    """A Program's device-side form on one GPU (cached on the Program): the
    interpreter's arrays (its instructions, constants, columns, guards) and
    the kernels, compiled when first needed."""

    def __init__(self, prog: Any, cp: Any, arch: str) -> None:
        C = self.code = Code.of(prog)
        if C.takes:
            raise TapeadError(f"tapead.cuda: this Program has take nodes ({C.takes}), which run on "
                              f"the CPU only (device='cpu')")
        n = C.n
        self.n, self.nin, self.nout, self.nwrt, self.ng = n, C.nin, C.nout, C.nwrt, len(C.guards)
        self.cp, self.arch = cp, arch
        self.generated = n <= GENERATED_MAX_NODES
        # the interpreter's instructions (csrc/gpu/gpu_interp.cu): op, a, b, dslot
        ins = np.zeros((max(n, 1), 4), dtype=np.int32)
        ins[:n, 0] = C.op
        ins[:n, 1] = np.array(C.a, dtype=np.int64)
        ins[:n, 2] = np.array(C.b, dtype=np.int64)
        for j, q in enumerate(C.inp):
            if q != _NONE:
                ins[q, 1], ins[q, 2] = j, 0
        for p, q in enumerate(C.par):
            ins[q, 1], ins[q, 2] = p, 1
        need = np.array(C.need, dtype=bool)
        ins[:n, 3] = np.where(need, np.cumsum(need) - 1, -1)
        self.nd = int(need.sum())
        # and each node's inputs' adjoint slots (a's; b's for a binary op)
        kinds = np.array(KINDS)[np.array(C.op, dtype=np.int64)]
        ads = np.full((max(n, 1), 2), -1, dtype=np.int32)
        ads[:n, 0] = np.where(kinds != "LEAF", ins[np.array(C.a, dtype=np.int64), 3], -1)
        ads[:n, 1] = np.where(kinds == "BIN", ins[np.array(C.b, dtype=np.int64), 3], -1)
        wslot = [int(ins[w, 3]) if w != _NONE else -1 for w in C.wrt]
        g = C.guards
        self.ins, self.ads = cp.asarray(ins), cp.asarray(ads)
        self.c = cp.asarray(np.array(C.c, dtype=np.float64))
        self.out = cp.asarray(np.array(C.out, dtype=np.uint32))
        self.wslot = cp.asarray(np.array(wslot or [-1], dtype=np.int32))
        self.gab = cp.asarray(np.array([v for t in g for v in t[:2]] or [0], dtype=np.uint32))
        self.gc = cp.asarray(np.array([t[2] for t in g] or [0.0], dtype=np.float64))
        self.gk = cp.asarray(np.array([t[3] | t[4] << 2 | t[5] << 3 for t in g] or [0],
                                      dtype=np.uint8))
        # what every launch passes, made once: the seed of ones, the last
        # parameters uploaded (key: their bytes; never written in place, so
        # a call holding an old pair is safe), the generated kernel's grid
        self.ones = cp.ones(max(self.nout, 1), dtype=cp.float64)
        self.nopar = cp.zeros(1, dtype=cp.float64)
        self.nodetail = cp.zeros(8, dtype=cp.float64)   # (describe 0: never written)
        self.par: Tuple[bytes, Any] = (b"", None)
        rt = cp.cuda.runtime
        self.maxblocks = _BLOCKS_PER_SM * int(rt.deviceGetAttribute(
            rt.cudaDevAttrMultiProcessorCount, cp.cuda.Device().id))
        self._gen: Dict[str, Any] = {}
        self._interp = None
        mod = _module(cp, interpreter_source(), arch) if not self.generated else None
        if mod is not None:
            self._interp = mod.get_function("ta_gpu_interp")
            self.sum = mod.get_function("ta_gpu_rowsum")

    def gen(self, mode: str) -> Any:
        """The generated kernel for mode ("fwd" or "ps"), compiled when first needed."""
        fn = self._gen.get(mode)
        if fn is None:
            mod = _module(self.cp, CUDAPrinter(mode).source(self.code), self.arch)
            fn = self._gen[mode] = mod.get_function("ta_gpu_gen")
            self.sum = mod.get_function("ta_gpu_rowsum")
        return fn

    def interp(self) -> Any:
        """The interpreter kernel (compiled when first needed: a generated
        program needs it only to describe a failing row)."""
        if self._interp is None:
            self._interp = _module(self.cp, interpreter_source(), self.arch).get_function(
                "ta_gpu_interp")
        return self._interp


def _plan(prog: Any, cp: Any, dev: Optional[int] = None) -> _Plan:
    """prog's plan on GPU dev (default: the current one).  Two threads may
    make one each at once; one is kept, both are sound."""
    if dev is None:
        dev = cp.cuda.runtime.getDevice()
    plans: Dict[int, _Plan] = prog.__dict__.setdefault("_gpu_plans", {})
    p = plans.get(dev)
    if p is None:
        p = plans[dev] = _Plan(prog, cp, str(cp.cuda.Device(dev).compute_capability))
    return p


def _params(cp: Any, P: _Plan, pv: Any) -> Any:
    """The parameters on the GPU: uploaded only when they change."""
    key = pv.tobytes()
    cached = P.par
    if cached[1] is None or cached[0] != key:
        cached = P.par = (key, cp.asarray(pv if len(pv) else np.zeros(1)))
    return cached[1]


# ---------------------------------------------------------------- running

def _blocks(rows: int, per: int) -> int:
    return max(1, -(-rows // per))


def _interp(cp: Any, P: _Plan, X: Any, par: Any, seed: Any, seedmode: int, Y: Any, G: Any,
            fail: Any, row0: int, rows: int, detail: Any = None) -> None:
    """Rows [row0, row0 + rows) through the interpreter, in chunks that fit
    the GPU's memory (values and adjoints: (n + nd) doubles a row); Y and G
    [column][row], Y.shape[1] rows."""
    n = P.n
    per_row = 8 * (n + (P.nd if seedmode else 0))
    cap = int(cp.cuda.runtime.memGetInfo()[0] * 0.5) // per_row   # half the free memory
    ld = rows if rows <= cap else max(1024, cap // 1024 * 1024)
    V = cp.empty(n * ld, dtype=cp.float64)
    D = cp.empty(max(P.nd * ld, 1) if seedmode else 1, dtype=cp.float64)
    fn = P.interp()
    describe = detail if detail is not None else P.nodetail
    for r0 in range(row0, row0 + rows, ld):
        m = min(ld, row0 + rows - r0)
        fn((_blocks(m, _THREADS),), (_THREADS,), (
            P.ins, P.ads, P.c, np.int32(n), X, np.int32(P.nin), par,
            P.out, np.int32(P.nout), P.wslot, np.int32(P.nwrt),
            P.gab, P.gc, P.gk, np.int32(P.ng),
            seed, np.int32(seedmode), np.int32(P.nd if seedmode else 0),
            V, D, np.int64(ld), np.int64(r0), np.int64(m), np.int64(Y.shape[1]),
            Y, G, fail, describe, np.int32(detail is not None)))


def _nofail(cp: Any) -> Any:
    """A fresh failure word, zeroed on the GPU (no upload): no row has
    failed (csrc/gpu/gpu.cuh: ta_gpu_fail).  (The slow path: a failing row's
    rerun; a call's own word is the thread's _FailWord.)"""
    return cp.zeros(1, dtype=cp.uint64)


def _failed(fail: Any) -> Optional[int]:
    """The failure word of the lowest failing row (row << 8 | status), or None."""
    v = int(fail.get()[0])
    return None if v == 0 else v ^ _NOFAIL


class _FailWord:
    """One thread's failure word on one GPU, kept from call to call
    (csrc/gpu/gpu.cuh: ta_gpu_fail): zeroed once when made.  A kernel writes it
    only when a row fails, so after a call that read it as 0 it is still 0:
    no zeroing per call.  A call reads it back with one 8-byte copy into
    pinned host memory on the call's stream, then waits for the stream (the
    call returns once its kernels are done, its results known good).
    Thread-local (_TLS), so calls in different threads never share one;
    `dirty` while a launch may have written it and the read has not
    finished (an exception in between, a KeyboardInterrupt in the wait):
    the next call zeroes it first."""

    __slots__ = ("dev", "dptr", "host", "hptr", "dirty")

    def __init__(self, cp: Any) -> None:
        self.dev = cp.zeros(1, dtype=cp.uint64)
        self.dptr = self.dev.data.ptr
        self.host = np.frombuffer(cp.cuda.alloc_pinned_memory(8), dtype=np.uint64, count=1)
        self.hptr = self.host.ctypes.data
        self.dirty = False

    def arm(self, rt: Any, stream: int) -> Any:
        """The word for a launch on stream (zeroed first, on the stream, if
        an earlier call left it dirty)."""
        if self.dirty:
            rt.memsetAsync(self.dptr, 0, 8, stream)
        self.dirty = True
        return self.dev

    def read(self, rt: Any, stream: int) -> Optional[int]:
        """After the launches on stream: the failure word of the lowest failing row (row
        << 8 | status), or None; waits for the stream."""
        rt.memcpyAsync(self.hptr, self.dptr, 8, rt.memcpyDeviceToHost, stream)
        rt.streamSynchronize(stream)
        v = int(self.host[0])
        if v == 0:
            self.dirty = False
            return None
        return v ^ _NOFAIL           # (stays dirty: zeroed before its next use)


_TLS = threading.local()


def _failword(cp: Any, dev: int) -> _FailWord:
    """This thread's failure word on GPU dev."""
    words = getattr(_TLS, "words", None)
    if words is None:
        words = _TLS.words = {}
    w = words.get(dev)
    if w is None:
        w = words[dev] = _FailWord(cp)
    return w


def _rowsum(cp: Any, P: _Plan, A: Any) -> Any:
    """The row sums of At (A: (ncol, rows), [column][row], rows >= 1), in
    the fixed order of csrc/gpu/gpu.cuh."""
    ncol, rows = A.shape
    if ncol == 0:
        return cp.zeros(0, dtype=cp.float64)
    fn = P.sum
    rs, cs = 1, rows
    while rows > 1:
        nb = _blocks(rows, _SUMROWS)
        parts = cp.empty((nb, ncol), dtype=cp.float64)
        fn((nb,), (_SUMTHREADS,), (A, np.int64(rows), np.int32(ncol), np.int64(rs), np.int64(cs),
                                   parts))
        A, rows, rs, cs = parts, nb, ncol, 1
    return A.reshape(ncol)


def _failure(cp: Any, P: _Plan, prog: Any, X: Any, par: Any, seed: Any, seedmode: int,
             fail: int, row0: int) -> Exception:
    """The exception for the first failing row (fail: its failure word, *fail): that row rerun
    alone through the interpreter, which writes down what failed there."""
    from ._c.program import _run_error
    from types import SimpleNamespace
    row = fail >> 8
    Y = cp.empty((max(P.nout, 1), row + 1), dtype=cp.float64)
    G = cp.empty((max(P.nwrt, 1), row + 1), dtype=cp.float64)
    fail = _nofail(cp)
    detail = cp.zeros(8, dtype=cp.float64)
    _interp(cp, P, X, par, seed, seedmode, Y, G, fail, row, 1, detail)
    d = detail.get().tolist()
    st = int(d[0]) if _failed(fail) is not None else 0
    if st == 0:    # cannot happen: the same device functions on the same row
        return RuntimeError(f"Program on the GPU: row {row + row0} failed (status {fail & 0xFF})")
    f = SimpleNamespace(row=row, op=int(d[1]), x=d[2], y=d[3], guard=int(d[4]),
                        kind=int(d[5]), outcome=int(d[6]))
    return _run_error(st, f, row0)


def run(prog: Any, X: Any, seed: Any, grad: Optional[str], params: Any, device: str,
        parts: bool = False, row0: int = 0) -> Tuple[Any, Any]:
    """Program._run on a GPU: (Y, G), numpy or CuPy as X.  grad: None,
    "sum" or "per_sample"; parts: G as one row of sums (tapead.dask adds
    the chunks' rows); row0: X's first row's number in error messages.

    Returns once the kernels are done and no row failed (else raises the
    CPU Program's exception), for CuPy input too.  Results of numpy input
    are C-contiguous numpy arrays, as the CPU Program's; of CuPy input,
    (rows, columns) views of the kernels' [column][row] arrays (column-major:
    making them C-contiguous would be one more pass over them on the GPU,
    as long as the European kernel itself)."""
    index = _device_index(device)
    cp = _cupy()
    if index is None:            # the current device: no switching
        return _run(cp, prog, X, seed, grad, params, parts, row0)
    with cp.cuda.Device(index):
        return _run(cp, prog, X, seed, grad, params, parts, row0)


_SEEDMODE = (np.int32(0), np.int32(1), np.int32(2))
_ZERO64 = np.int64(0)


def _run(cp: Any, prog: Any, X: Any, seed: Any, grad: Optional[str], params: Any,
         parts: bool, row0: int) -> Tuple[Any, Any]:
    """run on the current device."""
    on_gpu = isinstance(X, cp.ndarray)
    if on_gpu and X.dtype == np.float64 and X.flags.c_contiguous:
        Xd = X
    else:
        Xd = cp.ascontiguousarray(cp.asarray(X, dtype=cp.float64))
    nin, nout, nwrt, npar = prog._dims[:4]
    _check_rows(Xd.shape, nin)
    B = Xd.shape[0]
    rt = cp.cuda.runtime
    dev = rt.getDevice()
    P = _plan(prog, cp, dev)
    if npar:
        pv = prog.params if params is None else params
        par = _params(cp, P, _vector(pv.get() if isinstance(pv, cp.ndarray) else pv, npar, "params"))
    else:
        if params is not None:
            _vector(params.get() if isinstance(params, cp.ndarray) else params, 0, "params")
        par = P.nopar
    seedmode, sd = 0, P.ones
    if grad is not None:
        if seed is not None:
            sd = cp.ascontiguousarray(cp.asarray(seed, dtype=cp.float64))
            _check_seed(sd.shape, B, nout)
        seedmode = 1 if sd.ndim == 1 else 2
    # the kernels write [column][row] (coalesced)
    Y = cp.empty((nout, B), dtype=cp.float64)
    G = cp.empty((nwrt, B) if grad is not None else (1,), dtype=cp.float64)
    if B:
        stream = cp.cuda.get_current_stream().ptr
        fw = _failword(cp, dev)
        fail = fw.arm(rt, stream)
        if P.generated:
            b64 = np.int64(B)
            P.gen("ps" if seedmode else "fwd")(
                (min(-(-B // _THREADS), P.maxblocks),), _BLOCK,
                (Xd, par, sd, _SEEDMODE[seedmode], _ZERO64, b64, b64, Y, G, fail))
        else:
            _interp(cp, P, Xd, par, sd, seedmode, Y, G, fail, 0, B)
        if grad == "sum":            # queued before the wait: one wait a call
            G = _rowsum(cp, P, G)
        fail = fw.read(rt, stream)
        if fail is not None:
            raise _failure(cp, P, prog, Xd, par, sd, seedmode, fail, row0)
    elif grad == "sum":
        G = cp.zeros(nwrt, dtype=cp.float64)
    if grad is None:
        G = None
    elif grad == "sum":
        if parts:
            G = G.reshape(1, nwrt)
    else:
        G = G.T
    Y = Y.T
    if on_gpu:
        return Y, G
    # numpy in, numpy out, C-contiguous as the CPU Program's (transposed on
    # the GPU, where it is a small part of the copy to the host)
    return (cp.ascontiguousarray(Y).get(),
            None if G is None else cp.ascontiguousarray(G).get())
