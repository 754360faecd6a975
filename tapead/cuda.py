"""Programs on an NVIDIA GPU: ``prog(X, device="cuda")``, ``prog.grad(X, ..., device="cuda")``.

One CUDA thread runs one row, in float64.  Two ways to run a Program
(docs/gpu.md):

- small programs (at most ``GENERATED_MAX_NODES`` nodes): straight-line
  CUDA generated from the Program (every value and adjoint a local
  variable), compiled with NVRTC for this program;
- larger ones: one interpreter kernel (csrc/gpu_interp.cu), compiled once,
  that reads the program as data, its values and adjoints in [node][row]
  arrays in GPU memory (NVRTC's compile time grows faster than linearly
  with straight-line code: minutes for thousands of nodes).

Both run ops.h's op rules as device functions (csrc/gpu.cuh), compiled
without FMA contraction or fast math (``NVRTC_OPTIONS``): +, -, *, / and
sqrt give the CPU Program's bits; exp, log, log1p, tanh, pow, sin and cos
are CUDA's math library, within an ulp or two of the C library's.
Gradients summed over rows are added on the GPU in a fixed order
(csrc/gpu.cuh: ta_gpu_rowsum), so every launch gives the same bits.  A
row that fails (a domain error, a flipped guard) raises the CPU
Program's exception, naming the first failing row.

X may be a numpy array (results come back as numpy) or a CuPy array
(results stay on the GPU, as CuPy arrays).  Kernels are compiled once per
process and kept on disk (``cache_dir()``).  Needs CuPy (``pip install
"tapead[cuda]"``), imported only when a GPU is asked for.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._c import OP_KINDS
from ._opsurface import IDENTS

__all__ = ["run", "cuda_source", "interpreter_source", "NVRTC_OPTIONS", "GENERATED_MAX_NODES",
           "cache_dir", "CUDAUnavailable"]

# Programs of at most this many nodes get generated straight-line code;
# larger ones the interpreter (docs/gpu.md: where it was measured).
GENERATED_MAX_NODES = 256

# No FMA contraction (a * b + c rounds twice, as on the CPU), no fast math,
# C++17 (hexadecimal float literals); -default-device: the headers'
# functions are device functions.  The -arch option is added per GPU.
NVRTC_OPTIONS = ("--fmad=false", "-std=c++17", "-default-device", "-diag-suppress=20044")

_THREADS = 128                   # rows (threads) per block of the row kernels
_SUMTHREADS, _SUMROWS = 256, 1024   # csrc/gpu.cuh: TA_GPU_SUMTHREADS, TA_GPU_SUMROWS
_NONE = 0xFFFFFFFF               # a column the outputs do not reach (replay.h: TA_NONE)
_NOFAIL = (1 << 64) - 1
_LEAF, _UN, _BIN, _CST = 0, 1, 2, 3    # tapead.h: enum ta_kind

# NVRTC has no C library headers; csrc/gpu.cuh says why these are enough
_STUBS = {
    "math.h": "", "string.h": "", "stddef.h": "",
    "stdint.h": ("typedef unsigned char uint8_t; typedef unsigned short uint16_t;\n"
                 "typedef unsigned int uint32_t; typedef unsigned long long uint64_t;\n"
                 "typedef signed char int8_t; typedef short int16_t; typedef int int32_t;\n"
                 "typedef long long int64_t;\n#define UINT32_MAX 0xffffffffu\n"
                 "#define UINT64_MAX 0xffffffffffffffffull\n#define INT64_MAX 0x7fffffffffffffffll\n"),
}


class CUDAUnavailable(RuntimeError):
    """device="cuda" was asked for where no usable CUDA GPU is."""


# ------------------------------------------------------------------ CuPy

def _cupy() -> Any:
    """CuPy, with a usable GPU; a clear error otherwise."""
    try:
        import cupy
    except ImportError as e:
        raise ImportError('device="cuda" needs CuPy: pip install "tapead[cuda]" '
                          '(or a cupy-cudaXXx wheel matching your CUDA)') from e
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:   # CUDARuntimeError: no driver, or too old a one
        raise CUDAUnavailable(f'device="cuda": no usable CUDA GPU here ({e})') from e
    if n < 1:
        raise CUDAUnavailable('device="cuda": no CUDA GPU here')
    return cupy


def _device_index(device: str) -> Optional[int]:
    """None for "cuda" (CuPy's current device), N for "cuda:N"."""
    if device == "cuda":
        return None
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    raise ValueError(f'device must be None, "cpu", "cuda" or "cuda:N", not {device!r}')


# --------------------------------------------------------------- sources

def _csrc() -> str:
    """The C sources the kernels are compiled from (csrc/ beside the package)."""
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(os.path.dirname(here), "csrc")
    if not os.path.isfile(os.path.join(d, "gpu.cuh")):
        raise CUDAUnavailable("device=\"cuda\" compiles tapead's C sources (csrc/), which this "
                              "installation lacks: install tapead from a source checkout")
    return d


def _headers() -> Dict[str, str]:
    """Every header a kernel may include, by name: csrc's, and the stubs."""
    d = _csrc()
    hs = {}
    for name in sorted(os.listdir(d)):
        if name.endswith((".h", ".def", ".cuh")):
            with open(os.path.join(d, name)) as f:
                hs[name] = f.read()
    hs.update(_STUBS)
    return hs


def interpreter_source() -> str:
    """The interpreter kernel's source (csrc/gpu_interp.cu)."""
    with open(os.path.join(_csrc(), "gpu_interp.cu")) as f:
        return f.read()


def _literal(c: float) -> str:
    """c as an exact C++ double literal."""
    if c != c or c in (float("inf"), float("-inf")):
        return f"__longlong_as_double({int(np.float64(c).view(np.int64))}LL)"
    return f"({float(c).hex()})"


def cuda_source(prog: Any) -> str:
    """Straight-line CUDA for prog: one thread per row, every value and
    adjoint a local variable, the op rules ops.h's (kernel ta_gpu_gen; its
    arguments as the interpreter's, less the program)."""
    sizes, f = prog._flat()
    return _generate(sizes, f, _needs(sizes, f))


def _needs(sizes: Dict[str, int], f: Dict[str, Any]) -> List[bool]:
    """Per node: a wrt leaf is behind it (it gets an adjoint)."""
    n = sizes["n"]
    need = [False] * n
    for w in f["wrt"][:sizes["nwrt"]].tolist():
        if w != _NONE:
            need[w] = True
    ops, a, b = f["op"].tolist(), f["a"].tolist(), f["b"].tolist()
    for k in range(n):
        kind = OP_KINDS[ops[k]]
        if kind != _LEAF:
            need[k] = need[a[k]] or (kind == _BIN and need[b[k]])
    return need


def _generate(sizes: Dict[str, int], f: Dict[str, Any], need: List[bool]) -> str:
    n, nin, nout, nwrt, ng = (sizes[k] for k in ("n", "nin", "nout", "nwrt", "ng"))
    ops, a, b, c = f["op"].tolist(), f["a"].tolist(), f["b"].tolist(), f["c"].tolist()
    col = {q: j for j, q in enumerate(f["in"][:nin].tolist()) if q != _NONE}
    par = {q: p for p, q in enumerate(f["par"][:sizes["npar"]].tolist())}
    L = ['#include "gpu.cuh"',
         'extern "C" __global__ void ta_gpu_gen(const double *__restrict__ X, '
         'const double *__restrict__ par, const double *__restrict__ seed, int seedmode,',
         '    long long row0, long long rows, double *Y, double *G, ta_u64 *fail)',
         '{',
         '    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;',
         '    const long long row = row0 + i;',
         '    int st = TA_OK;',
         '    if (i >= rows) return;']
    for k in range(n):
        kind, name = OP_KINDS[ops[k]], IDENTS[ops[k]]
        if kind == _LEAF:
            src = f"X[row * {nin} + {col[k]}]" if k in col else f"par[{par[k]}]"
            L.append(f"    const double v{k} = {src};")
            continue
        y = "0.0" if kind == _UN else f"v{b[k]}" if kind == _BIN else _literal(c[k])
        L.append(f"    double v{k}; st |= fwd_{name}(v{a[k]}, {y}, &v{k});")
    L.append("    if (st != TA_OK) { ta_gpu_fail(fail, row, st); return; }")
    gab, gc, gk = f["gab"].tolist(), f["gc"].tolist(), f["gkind"].tolist()
    for j in range(ng):
        y = _literal(gc[j]) if (gk[j] >> 2) & 1 else f"v{gab[2 * j + 1]}"
        L.append(f"    if (ta_compare({gk[j] & 3}, v{gab[2 * j]}, {y}) != {(gk[j] >> 3) & 1}) "
                 "{ ta_gpu_fail(fail, row, TA_EGUARD); return; }")
    out = f["out"][:nout].tolist()
    for j, o in enumerate(out):
        L.append(f"    Y[row * {nout} + {j}] = v{o};")
    L.append("    if (!seedmode) return;")
    L += [f"    double g{k} = 0.0;" for k in range(n) if need[k]]
    for j, o in enumerate(out):
        if need[o]:
            L.append(f"    g{o} += seedmode == 1 ? seed[{j}] : seed[row * {nout} + {j}];")
    for k in range(n - 1, -1, -1):
        kind = OP_KINDS[ops[k]]
        if not need[k] or kind == _LEAF:
            continue
        y = "0.0" if kind == _UN else f"v{b[k]}" if kind == _BIN else _literal(c[k])
        s = f"    {{ double dx, dy; d_{IDENTS[ops[k]]}(v{a[k]}, {y}, v{k}, &dx, &dy);"
        if need[a[k]]:
            s += f" g{a[k]} += dx * g{k};"
        if kind == _BIN and need[b[k]]:
            s += f" g{b[k]} += dy * g{k};"
        L.append(s + " }")
    for j, w in enumerate(f["wrt"][:nwrt].tolist()):
        L.append(f"    G[row * {nwrt} + {j}] = {f'g{w}' if w != _NONE else '0.0'};")
    L.append("}")
    return "\n".join(L) + "\n"


# ------------------------------------------------------------- compiling

def cache_dir() -> str:
    """Where compiled kernels are kept ($TAPEAD_CUDA_CACHE, else
    ~/.cache/tapead/cuda): one file per kernel source, options and GPU
    architecture, a few hundred KB each; delete it at any time."""
    d = os.environ.get("TAPEAD_CUDA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tapead", "cuda")
    return d


def nvrtc_compile(source: str, arch: str, name: str = "tapead.cu",
                  ptx: bool = False) -> bytes:
    """source compiled by NVRTC (CuPy's binding) for sm_<arch>: a cubin, or
    PTX; a RuntimeError with NVRTC's log if it does not compile.  Needs no
    GPU (the tests use it)."""
    from cupy_backends.cuda.libs import nvrtc   # type: ignore[import-not-found]
    hs = _headers()
    prog = nvrtc.createProgram(source, name, [v.encode() for v in hs.values()],
                               [k.encode() for k in hs])
    try:
        opts = [o for o in NVRTC_OPTIONS + (f"-arch={'compute' if ptx else 'sm'}_{arch}",)]
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC could not compile {name}:\n{nvrtc.getProgramLog(prog)}") from e
        return nvrtc.getPTX(prog) if ptx else nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


_MODULES: Dict[Tuple[str, str], Any] = {}     # (source hash, arch) -> RawModule


def _module(cp: Any, source: str, arch: str) -> Any:
    """The compiled module of source: from memory, from the disk cache, or
    compiled now (and kept in both)."""
    h = hashlib.sha256("\0".join((source, " ".join(NVRTC_OPTIONS), arch)
                                 + tuple(_headers().values())).encode()).hexdigest()[:32]
    mod = _MODULES.get((h, arch))
    if mod is not None:
        return mod
    d = cache_dir()
    path = os.path.join(d, f"{h}.sm_{arch}.cubin")
    if not os.path.isfile(path):
        cubin = nvrtc_compile(source, arch)
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(cubin)
        os.replace(tmp, path)     # whole, or not there: safe with other processes
    mod = cp.RawModule(path=path)
    _MODULES[(h, arch)] = mod
    return mod


# ------------------------------------------------------------------ plans

class _Plan:
    """A Program's device-side form on one GPU (cached on the Program)."""

    def __init__(self, prog: Any, cp: Any, arch: str) -> None:
        sizes, f = prog._flat()
        self.sizes = sizes
        n, nin, nout, nwrt, npar, ng = (sizes[k] for k in ("n", "nin", "nout", "nwrt", "npar", "ng"))
        need = _needs(sizes, f)
        self.generated = n <= GENERATED_MAX_NODES
        ops, a, b = f["op"][:n], f["a"][:n], f["b"][:n]
        # the interpreter's instructions (csrc/gpu_interp.cu): op, a, b, dslot
        ins = np.zeros((max(n, 1), 4), dtype=np.int32)
        ins[:n, 0] = ops
        ins[:n, 1] = a.astype(np.int64).astype(np.int32)
        ins[:n, 2] = b.astype(np.int64).astype(np.int32)
        for j, q in enumerate(f["in"][:nin].tolist()):
            if q != _NONE:
                ins[q, 1], ins[q, 2] = j, 0
        for p, q in enumerate(f["par"][:npar].tolist()):
            ins[q, 1], ins[q, 2] = p, 1
        slots = np.cumsum(need) - 1
        ins[:n, 3] = np.where(need, slots, -1)
        self.nd = int(sum(need))
        wrt = f["wrt"][:nwrt].astype(np.int64)
        wslot = np.array([ins[w, 3] if w != _NONE else -1 for w in wrt.tolist()] or [-1],
                         dtype=np.int32)
        self.ins = cp.asarray(ins)
        self.c = cp.asarray(f["c"][:max(n, 1)].astype(np.float64))
        self.out = cp.asarray(f["out"][:max(nout, 1)].astype(np.uint32))
        self.wslot = cp.asarray(wslot)
        self.gab = cp.asarray(f["gab"][:max(2 * ng, 1)].astype(np.uint32))
        self.gc = cp.asarray(f["gc"][:max(ng, 1)].astype(np.float64))
        self.gk = cp.asarray(f["gkind"][:max(ng, 1)].astype(np.uint8))
        self.cp, self.arch = cp, arch
        mod = _module(cp, _generate(sizes, f, need) if self.generated else interpreter_source(),
                      arch)
        self.gen = mod.get_function("ta_gpu_gen") if self.generated else None
        self.sum = mod.get_function("ta_gpu_rowsum")
        self._interp = None if self.generated else mod.get_function("ta_gpu_interp")

    def interp(self) -> Any:
        """The interpreter kernel (compiled when first needed: a generated
        program needs it only to describe a failing row)."""
        if self._interp is None:
            self._interp = _module(self.cp, interpreter_source(), self.arch).get_function(
                "ta_gpu_interp")
        return self._interp


def _plan(prog: Any, cp: Any) -> _Plan:
    dev = cp.cuda.Device()
    arch = str(dev.compute_capability)
    plans = prog.__dict__.setdefault("_gpu_plans", {})
    p = plans.get(dev.id)
    if p is None:
        p = plans[dev.id] = _Plan(prog, cp, arch)
    return p


# ---------------------------------------------------------------- running

def _blocks(rows: int, per: int) -> int:
    return max(1, -(-rows // per))


def _interp(cp: Any, P: _Plan, X: Any, par: Any, seed: Any, seedmode: int, Y: Any, G: Any,
            fail: Any, row0: int, rows: int, detail: Any = None) -> None:
    """Rows [row0, row0 + rows) through the interpreter, in chunks that fit
    the GPU's memory (values and adjoints: (n + nd) doubles a row)."""
    s = P.sizes
    n = s["n"]
    per_row = 8 * (n + (P.nd if seedmode else 0))
    cap = int(cp.cuda.runtime.memGetInfo()[0] * 0.5) // per_row   # half the free memory
    ld = rows if rows <= cap else max(1024, cap // 1024 * 1024)
    V = cp.empty(n * ld, dtype=cp.float64)
    D = cp.empty(max(P.nd * ld, 1) if seedmode else 1, dtype=cp.float64)
    fn = P.interp()
    describe = detail if detail is not None else cp.zeros(8, dtype=cp.float64)
    for r0 in range(row0, row0 + rows, ld):
        m = min(ld, row0 + rows - r0)
        fn((_blocks(m, _THREADS),), (_THREADS,), (
            P.ins, P.c, np.int32(n), X, np.int32(s["nin"]), par,
            P.out, np.int32(s["nout"]), P.wslot, np.int32(s["nwrt"]),
            P.gab, P.gc, P.gk, np.int32(s["ng"]),
            seed, np.int32(seedmode), np.int32(P.nd if seedmode else 0),
            V, D, np.int64(ld), np.int64(r0), np.int64(m),
            Y, G, fail, describe, np.int32(detail is not None)))


def _nofail(cp: Any) -> Any:
    """A fresh failure word: no row has failed."""
    return cp.asarray(np.full(1, _NOFAIL, dtype=np.uint64))


def _rowsum(cp: Any, P: _Plan, A: Any) -> Any:
    """The sums of A's columns, in the fixed order of csrc/gpu.cuh."""
    rows, ncol = A.shape
    if rows == 0 or ncol == 0:
        return cp.zeros(ncol, dtype=cp.float64)
    fn = P.sum
    while rows > 1:
        nb = _blocks(rows, _SUMROWS)
        parts = cp.empty((nb, ncol), dtype=cp.float64)
        fn((nb,), (_SUMTHREADS,), (A, np.int64(rows), np.int32(ncol), parts))
        A, rows = parts, nb
    return A.reshape(ncol)


def _failure(cp: Any, P: _Plan, prog: Any, X: Any, par: Any, seed: Any, seedmode: int,
             code: int, row0: int) -> Exception:
    """The exception for the first failing row (code: *fail): that row rerun
    alone through the interpreter, which writes down what failed there."""
    from ._c.program import _run_error
    from types import SimpleNamespace
    row = code >> 8
    s = P.sizes
    Y = cp.empty((row + 1, max(s["nout"], 1)), dtype=cp.float64)
    G = cp.empty((row + 1, max(s["nwrt"], 1)), dtype=cp.float64)
    fail = _nofail(cp)
    detail = cp.zeros(8, dtype=cp.float64)
    _interp(cp, P, X, par, seed, seedmode, Y, G, fail, row, 1, detail)
    d = detail.get().tolist()
    st = int(d[0]) if int(fail.get()[0]) != _NOFAIL else 0
    if st == 0:    # cannot happen: the same device functions on the same row
        return RuntimeError(f"Program on the GPU: row {row + row0} failed (status {code & 0xFF})")
    f = SimpleNamespace(row=row, op=int(d[1]), x=d[2], y=d[3], guard=int(d[4]),
                        kind=int(d[5]), outcome=int(d[6]))
    return _run_error(st, f, row0)


def run(prog: Any, X: Any, seed: Any, grad: Optional[str], params: Any, device: str,
        parts: bool = False, row0: int = 0) -> Tuple[Any, Any]:
    """Program._run on a GPU: (Y, G), numpy or CuPy as X.  grad: None,
    "sum" or "per_sample"; parts: G as one row of sums (tapead.dask adds
    the chunks' rows); row0: X's first row's number in error messages."""
    from .replay import _check_rows, _check_seed
    index = _device_index(device)
    cp = _cupy()
    with cp.cuda.Device(index if index is not None else cp.cuda.Device().id):
        on_gpu = isinstance(X, cp.ndarray)
        Xd = cp.ascontiguousarray(cp.asarray(X, dtype=cp.float64))
        nin, nout, nwrt = prog.n_inputs, prog.n_outputs, prog.n_wrt
        _check_rows(tuple(Xd.shape), nin)
        B = int(Xd.shape[0])
        pv = prog.params if params is None else params
        from .replay import _vector
        pv = _vector(pv.get() if isinstance(pv, cp.ndarray) else pv, prog._dims[3], "params")
        P = _plan(prog, cp)
        par = cp.asarray(pv if len(pv) else np.zeros(1))
        seedmode, sd = 0, cp.zeros(1, dtype=cp.float64)
        if grad is not None:
            if seed is None:
                sd = cp.ones(max(nout, 1), dtype=cp.float64)
            else:
                sd = cp.ascontiguousarray(cp.asarray(seed, dtype=cp.float64))
                _check_seed(tuple(sd.shape), B, nout)
            seedmode = 1 if sd.ndim == 1 else 2
        Y = cp.empty((B, nout), dtype=cp.float64)
        G = cp.empty((B, nwrt) if grad is not None else (1,), dtype=cp.float64)
        fail = _nofail(cp)
        if B:
            if P.gen is not None:
                P.gen((_blocks(B, _THREADS),), (_THREADS,),
                      (Xd, par, sd, np.int32(seedmode), np.int64(0), np.int64(B), Y, G, fail))
            else:
                _interp(cp, P, Xd, par, sd, seedmode, Y, G, fail, 0, B)
            code = int(fail.get()[0])
            if code != _NOFAIL:
                raise _failure(cp, P, prog, Xd, par, sd, seedmode, code, row0)
        if grad == "sum":
            G = _rowsum(cp, P, G)
            if parts:
                G = G.reshape(1, nwrt)
        elif grad is None:
            G = None
        if on_gpu:
            return Y, G
        return cp.asnumpy(Y), (None if G is None else cp.asnumpy(G))
