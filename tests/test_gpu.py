"""Programs on a GPU (tapead/cuda.py, csrc/gpu/gpu.cuh, csrc/gpu/gpu_interp.cu).

Without a GPU: the clear errors (no CuPy, no GPU, a bad device name), and
the kernels compiled for sm_90: the generated CUDA of programs using every
op (with guards and parameters) and the interpreter kernel, by nvcc to PTX
where nvcc is found and by NVRTC (the compiler the GPU path uses) where
CuPy's NVRTC binding loads (it needs no GPU).  With a GPU: both kernels
against the CPU Program (the reference), row by row, summed, per sample,
with seeds, params=, CuPy arrays in and out, failures named as the CPU
names them, and the summed gradients' bits the same at every launch."""
import ctypes
import os
import shlex
import shutil
import subprocess
import sys
import time
import threading
import types

import numpy as np
import pytest

import tapead
from tapead import Value, GuardError
from tapead._c import OP_KINDS
from tapead.codegen import include_dirs
from tapead._opsurface import IDENTS
from opcases import FORMS

# the folders of the headers the kernels include by bare name (codegen.include_dirs)
INC = [a for d in include_dirs() for a in ("-I", d)]
GPU_CUH = next(p for p in (os.path.join(d, "gpu.cuh") for d in include_dirs())
               if os.path.isfile(p))
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)),
                                    None)


def _gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        return True
    except Exception:
        return False


GPU = _gpu()
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA GPU (or no CuPy) here")



# ------------------------------------------------------------ programs
# Every math op of the op table once, on operands where it is defined for
# the inputs the tests draw (x in [0.2, 2], y in [-2, -0.1]); op: its form
# in the op cases, and its operands.
def _every_op(x, y, w):
    q = 1.0 + x * x                       # >= 1
    uses = [("add", x, y, 0), ("sub", x, w, 0), ("mul", x, w, 0), ("div", x, q, 0),
            ("pow", q, y, 0), ("addc", x, 0, 2.0), ("rsubc", x, 0, 3.0), ("mulc", y, 0, 1.7),
            ("rdivc", q, 0, 2.0), ("powc", q, 0, 1.5), ("rpowc", x, 0, 1.3), ("relu", y, 0, 0),
            ("tanh", y, 0, 0), ("exp", x, 0, 0), ("log", q, 0, 0), ("log1p", q, 0, 0),
            ("sigmoid", y, 0, 0), ("sin", x, 0, 0), ("cos", y, 0, 0), ("sqrt", q, 0, 0),
            ("abs", y, 0, 0), ("max", x, y, 0), ("min", x, w, 0), ("detach", x, 0, 0),
            ("divc", x, 0, 1e308)]
    return [FORMS[f].ta(a, b, c) for f, a, b, c in uses]


def every_op_program(guards=True):
    """Two outputs over inputs x, y, a parameter w, wrt x and w; guards x > y
    and x > 0.1 when asked."""
    tapead.clear_guards()      # (guards of earlier programs would bind this one too)
    x, y, w = Value(0.5), Value(-0.3), Value(1.5)
    if guards:
        assert x > y and x > 0.1
    t = _every_op(x, y, w)
    s = t[0]
    for v in t[1:-1]:
        s = s + v
    out2 = t[-1] * 1e300 + w * y      # divc's tiny result brought back
    return tapead.compile([s, out2], [x, y], wrt=[x, w])


def european():
    tapead.clear_guards()
    s0, sigma, r, z = Value(100.0), Value(0.2), Value(0.03), Value(0.0)
    st = s0 * ((r - 0.5 * sigma * sigma) + sigma * z).exp()
    return tapead.compile((st - 100.0).relu() * (-r).exp(), [z], wrt=[s0, sigma, r])


def arithmetic_program():
    """+, -, *, / and sqrt only: correctly rounded on both sides, so the
    GPU must give the CPU's bits."""
    tapead.clear_guards()
    a, b, w = Value(1.0), Value(2.0), Value(0.7)
    h = a
    for _ in range(6):
        h = (h * w + b) / (1.0 + h * h).sqrt() - 0.25 * b
    return tapead.compile([h, h * a], [a, b], wrt=[a, b, w])


def test_every_op_program_has_every_op():
    f = every_op_program()._flat_form()
    have = {IDENTS[o] for o in f["op"].tolist()}
    # (TAKE runs on the CPU only: test_a_program_with_take_is_refused_on_the_gpu)
    want = {IDENTS[o] for o in range(len(OP_KINDS))} - {"LEAF", "DEAD", "CUSTOM", "TAKE"}
    assert want <= have, want - have
    assert f["ng"] == 2 and f["npar"] == 1


# ---------------------------------------------------- errors, no GPU needed
def test_without_cupy_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)      # import cupy raises ImportError
    prog = european()
    with pytest.raises(ImportError, match=r'needs CuPy: pip install cupy-cuda13x'):
        prog(np.zeros((3, 1)), device="cuda")
    with pytest.raises(ImportError, match="needs CuPy"):
        prog.grad(np.zeros((3, 1)), per_sample=True, device="cuda")


def test_without_a_gpu_a_clear_error(monkeypatch):
    from tapead import cuda

    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=no_device)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with pytest.raises(cuda.CUDAUnavailable, match="no usable CUDA GPU"):
        european()(np.zeros((3, 1)), device="cuda")


@pytest.mark.skipif(GPU, reason="a GPU is here")
def test_real_cupy_without_a_gpu_a_clear_error():
    pytest.importorskip("cupy")
    from tapead import cuda
    with pytest.raises(cuda.CUDAUnavailable, match="no usable CUDA GPU"):
        european().grad(np.zeros((3, 1)), device="cuda")


def test_bad_device_names_are_refused():
    prog = european()
    for bad in ("gpu", "cuda:x", "cuda:-1", 3):
        with pytest.raises(ValueError, match="device must be"):
            prog(np.zeros((2, 1)), device=bad)


def test_the_cpu_is_the_default_and_cpu_is_accepted():
    prog = european()
    X = np.linspace(-2, 2, 7).reshape(7, 1)
    assert np.array_equal(prog(X), prog(X, device="cpu"))


def test_cupy_is_not_imported_by_tapead():
    code = "import sys, tapead, tapead.replay; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------- the kernels, compiled
def _sources():
    from tapead import cuda
    return {"every_op": cuda.cuda_source(every_op_program()),
            "arithmetic": cuda.cuda_source(arithmetic_program()),
            "european": cuda.cuda_source(european()),
            "interp": cuda.interpreter_source()}


def test_generated_source_reads_as_the_program():
    from tapead import cuda
    src = cuda.cuda_source(european())
    assert european().guards == 0
    assert src.count("fwd_EXP") == 2 and "d_RELU" in src and "par[2]" in src and "TA_IN(0)" in src
    assert "TA_GRAD(2," in src and "d_EXP" in cuda.cuda_source(european(), "ps")
    assert " d_" not in cuda.cuda_source(european(), "fwd").split("ta_gpu_gen")[1]
    src = cuda.cuda_source(every_op_program())
    assert src.count("ta_compare(") == 2
    assert "(0x1.b333333333333p+0)" in src      # 1.7, as an exact hex literal


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("name", ["every_op", "arithmetic", "interp"])
def test_kernels_compile_with_nvcc(name, tmp_path, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)   # (CI's sanitizer run preloads ASan: nvcc crashes under it)
    src = tmp_path / f"{name}.cu"
    src.write_text(_sources()[name])
    out = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "--fmad=false", "-std=c++17", *INC,
                          "-x", "cu", str(src), "-o", str(tmp_path / f"{name}.ptx")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    ptx = (tmp_path / f"{name}.ptx").read_text()
    entry = "ta_gpu_interp" if name == "interp" else "ta_gpu_gen"
    assert f".entry {entry}" in ptx and ".entry ta_gpu_rowsum" in ptx
    if name == "arithmetic":     # --fmad=false: a * b + c stays two roundings
        assert "mul.rn.f64" in ptx and "fma.rn.f64" not in ptx



@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_constants_are_opaque_to_the_cuda_compiler(tmp_path, monkeypatch):
    """The generated kernel computes with a constant as the interpreter
    kernel does, which reads it as data at run time: the compiler sees no
    constant (codegen.literal: ops.h's ta_opaque), so it cannot rewrite
    pow(x, 2.0), pow(x, -1.0) or log(c) into other bits.  x ** c and c ** x
    with the constants compilers rewrite compile to as many PTX instructions
    as with other constants: the code does not depend on their values."""
    monkeypatch.delenv("LD_PRELOAD", raising=False)   # (as above: nvcc crashes under a preloaded ASan)
    from tapead import cuda

    def instructions(powc, rpowc):
        tapead.clear_guards()
        x = Value(0.5)
        prog = tapead.compile([x ** c for c in powc] + [c ** x for c in rpowc], [x], wrt=[x])
        src = tmp_path / "k.cu"
        src.write_text(cuda.cuda_source(prog, "ps"))
        out = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "--fmad=false", "-std=c++17", *INC,
                              "-x", "cu", str(src), "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        body = (tmp_path / "k.ptx").read_text().split(".entry ta_gpu_gen")[1].split(".entry")[0]
        return sum(line.strip().endswith(";") for line in body.splitlines())

    rewritten = instructions([2.0, -1.0, 0.5, 1.0, 0.0, 3.0, 1e-300], [2.0, 10.0, 2.2013245328273205, 1.0])
    assert rewritten == instructions([k + 0.375 for k in range(2, 9)], [k + 0.625 for k in range(2, 6)])

@pytest.mark.skipif(not _nvrtc(), reason="CuPy's NVRTC binding is not here")
@pytest.mark.parametrize("name", ["every_op", "european", "interp"])
def test_kernels_compile_with_nvrtc(name):
    from tapead import cuda
    ptx = cuda.nvrtc_compile(_sources()[name], "90", name + ".cu", ptx=True).decode()
    assert ".entry ta_gpu_rowsum" in ptx


@pytest.mark.skipif(not _nvrtc(), reason="CuPy's NVRTC binding is not here")
def test_a_compile_error_shows_nvrtc_log():
    from tapead import cuda
    with pytest.raises(RuntimeError, match="NVRTC could not compile bad.cu"):
        cuda.nvrtc_compile('#include "gpu.cuh"\nint f() { return undefined_name; }\n', "90", "bad.cu")


# ------------------------------------------------------- on the GPU
def _rows(rng, B):
    return np.column_stack([rng.uniform(0.2, 2.0, B), rng.uniform(-2.0, -0.1, B)])


@pytest.fixture(params=["generated", "interpreter"])
def kernel(request, monkeypatch):
    from tapead import cuda
    if request.param == "interpreter":
        monkeypatch.setattr(cuda, "GENERATED_MAX_NODES", 0)
    return request.param


def _close(gpu, cpu, rtol=1e-12, scale=None):
    """GPU against CPU to rtol, relative to each column's scale (exp, log,
    pow... are CUDA's, not the C library's: docs/gpu.md); a sum's scale: the
    sum of its terms' magnitudes, when given."""
    if scale is None:
        scale = np.abs(cpu).max(axis=0, keepdims=True) if cpu.ndim > 1 else np.abs(cpu)
    scale = np.maximum(scale, 1e-300)
    assert np.all(np.abs(gpu - cpu) <= rtol * scale), np.max(np.abs(gpu - cpu) / scale)


@needs_gpu
def test_every_op_matches_the_cpu(kernel):
    prog = every_op_program()
    rng = np.random.default_rng(0)
    X = _rows(rng, 5000)
    Y, G = prog.grad(X, per_sample=True, device="cuda")
    Yc, Gc = prog.grad(X, per_sample=True)
    _close(Y, Yc)
    _close(G, Gc)
    Ys, Gs = prog.grad(X, device="cuda")
    _close(Ys, Yc)
    _close(Gs, prog.grad(X)[1], scale=np.abs(Gc).sum(axis=0))
    _close(prog(X, device="cuda"), Yc)


@needs_gpu
def test_arithmetic_gives_the_cpus_bits(kernel):
    prog = arithmetic_program()
    X = np.random.default_rng(1).uniform(-3, 3, (3000, 2))
    Y, G = prog.grad(X, per_sample=True, device="cuda")
    Yc, Gc = prog.grad(X, per_sample=True)
    assert np.array_equal(Y, Yc) and np.array_equal(G, Gc)


@needs_gpu
def test_seeds_and_params(kernel):
    prog = every_op_program()
    rng = np.random.default_rng(2)
    X = _rows(rng, 2000)
    S = rng.standard_normal((2000, 2))
    for seed in (np.array([0.5, -2.0]), S):
        for params in (None, [0.25]):
            Y, G = prog.grad(X, seed, per_sample=True, params=params, device="cuda")
            Yc, Gc = prog.grad(X, seed, per_sample=True, params=params)
            _close(Y, Yc)
            _close(G, Gc)
    with pytest.raises(ValueError, match="seed must have shape"):
        prog.grad(X, np.ones(3), device="cuda")
    with pytest.raises(ValueError, match="X must be a 2-d array"):
        prog(np.ones((4, 3)), device="cuda")


@needs_gpu
def test_summed_gradients_same_bits_every_launch(kernel):
    import cupy as cp
    prog = european()
    Z = np.random.default_rng(3).standard_normal((1 << 17) + 77)[:, None]
    runs = [prog.grad(Z, device="cuda")[1] for _ in range(3)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
    _close(runs[0], prog.grad(Z)[1])
    Zd = cp.asarray(Z)
    Y, G = prog.grad(Zd, device="cuda")
    assert isinstance(Y, cp.ndarray) and isinstance(G, cp.ndarray)
    assert np.array_equal(cp.asnumpy(G), runs[0])


@needs_gpu
def test_cupy_in_cupy_out_and_empty_batches(kernel):
    import cupy as cp
    prog = european()
    Z = cp.asarray(np.random.default_rng(4).standard_normal((1000, 1)))
    Y, G = prog.grad(Z, per_sample=True, device="cuda")
    assert isinstance(Y, cp.ndarray) and Y.shape == (1000, 1) and G.shape == (1000, 3)
    _close(cp.asnumpy(G), prog.grad(cp.asnumpy(Z), per_sample=True)[1])
    Y0, G0 = prog.grad(np.zeros((0, 1)), device="cuda")
    assert Y0.shape == (0, 1) and np.array_equal(G0, np.zeros(3))


@needs_gpu
def test_failures_are_named_as_on_the_cpu(kernel):
    prog = every_op_program()
    X = _rows(np.random.default_rng(5), 3000)
    X[1234] = [0.5, 0.9]        # x > y flips
    X[2000] = [0.05, -0.5]      # x > 0.1 flips
    with pytest.raises(GuardError) as gpu:
        prog(X, device="cuda")
    with pytest.raises(GuardError) as cpu:
        prog(X)
    assert str(gpu.value) == str(cpu.value) and "at row 1234" in str(gpu.value)
    tapead.clear_guards()
    a, b = Value(1.0), Value(0.5)
    p = tapead.compile((a - b).log(), [a, b])
    Xl = np.tile([2.0, 1.0], (500, 1))
    Xl[321] = [0.5, 1.0]        # log(-0.5)
    with pytest.raises(ValueError) as gpu:
        p(Xl, device="cuda")
    with pytest.raises(ValueError) as cpu:
        p(Xl)
    assert str(gpu.value) == str(cpu.value) and "row 321" in str(gpu.value)


@needs_gpu
def test_pickled_program_runs_on_the_gpu():
    import pickle
    prog = pickle.loads(pickle.dumps(european()))
    Z = np.random.default_rng(6).standard_normal((4096, 1))
    _close(prog.grad(Z, per_sample=True, device="cuda")[1], prog.grad(Z, per_sample=True)[1])


# ------------------------------------- the host side, and the kernels emulated
# Without a GPU, a stand-in CuPy (numpy arrays) runs tapead/cuda.py's host
# code.  Each launch is checked against the kernel's C parameter list (the
# count, and each argument's type: a pointer an array of the pointee's
# dtype, int numpy.int32, long long numpy.int64), then run: the kernel's
# own source compiled for the CPU by the C++ compiler (tests/cuda_emu.h
# stands in for CUDA's thread indices and atomics) is called once per
# thread, and the fixed-order sums are done in numpy in their order.  On
# the CPU the kernels use the C library's exp, log..., so they must give
# the CPU Program's bits.
_CTYPES = {"double": np.float64, "unsigned": np.uint32, "int": np.int32, "int4": np.int32, "int2": np.int32,
           "unsigned char": np.uint8, "ta_u64": np.uint64}
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")   # $CXX: as kernels take $CC
_EMU = {}
_EMU_LOCK = __import__("threading").Lock()


def _signature(source, name):
    import re
    with open(GPU_CUH) as f:
        source += f.read()       # (what the kernels include)
    m = re.search(r'extern "C" __global__ void ' + name + r"\((.*?)\)\s*\{", source, re.S)
    params = []
    for p in m.group(1).split(","):
        p = " ".join(p.replace("__restrict__", "").replace("const", "").split())
        if "*" in p:
            params.append(("ptr", _CTYPES[p.split("*")[0].strip()]))
        else:
            params.append(("int64" if p.startswith("long long") else "int32", None))
    return params


def _emulated(source, tmpdir):
    """source compiled for the CPU (a ctypes library), or None without a C++ compiler."""
    import hashlib
    if CXX is None:
        return None
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    if key not in _EMU:
        src, so = os.path.join(tmpdir, key + ".cu"), os.path.join(tmpdir, key + ".so")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([*shlex.split(CXX), "-O0", "-ffp-contract=off", "-shared", "-fPIC", "-w", "-include",
                            os.path.join(os.path.dirname(__file__), "cuda_emu.h"), *INC,
                            "-x", "c++", src, "-o", so], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        _EMU[key] = ctypes.CDLL(so)
    return _EMU[key]


class _Dim3(ctypes.Structure):      # tests/cuda_emu.h: ta_dim3
    _fields_ = [(n, ctypes.c_uint) for n in ("x", "y", "z")]


def _rowsum_emulated(A, rows, ncol, parts, rs=None, cs=1):
    """csrc/gpu/gpu.cuh's ta_gpu_rowsum, in its order (padding rows with +0.0
    changes no bit: a sum starting at +0.0 is never -0.0); element (r, j)
    of A at A.flat[r * rs + j * cs] (rs None: A is (rows, ncol))."""
    nb = parts.shape[0]
    P = np.zeros((nb * 1024, ncol))
    if rs is None:
        P[:rows] = np.asarray(A)[:rows]
    else:
        flat = np.asarray(A).reshape(-1)
        P[:rows] = flat[np.arange(rows)[:, None] * rs + np.arange(ncol)[None, :] * cs]
    q = P.reshape(nb, 4, 256, ncol)
    s = np.zeros((nb, 256, ncol))
    for k in range(4):
        s = s + q[:, k]
    w = 128
    while w:
        s[:, :w] = s[:, :w] + s[:, w:2 * w]
        w //= 2
    parts[...] = s[:, 0]


class _Kernel:
    def __init__(self, source, name, calls, lib):
        self.params, self.name, self.calls, self.lib = _signature(source, name), name, calls, lib

    def __call__(self, grid, block, args):
        assert len(args) == len(self.params), (self.name, len(args), len(self.params))
        cargs = []
        for a, (kind, dt) in zip(args, self.params):
            if kind == "ptr":
                assert isinstance(a, _FakeArray) and a.dtype == dt and a.flags.c_contiguous, \
                    (self.name, kind, dt, type(a), getattr(a, "dtype", None))
                cargs.append(ctypes.c_void_p(a.ctypes.data))
            else:
                assert type(a) is (np.int64 if kind == "int64" else np.int32), (self.name, kind, type(a))
                cargs.append((ctypes.c_longlong if kind == "int64" else ctypes.c_int)(int(a)))
        assert all(isinstance(g, int) and g >= 1 for g in grid + block)
        self.calls.append(self.name)
        if self.name == "ta_gpu_rowsum":
            _rowsum_emulated(args[0], int(args[1]), int(args[2]), args[5], int(args[3]), int(args[4]))
            return
        if self.lib is None:
            return
        with _EMU_LOCK:      # (the library's thread indices are its globals: one launch at a time)
            self._run(grid, block, cargs)

    def _run(self, grid, block, cargs):
        fn = getattr(self.lib, self.name)
        fn.restype = None
        bi, ti, bd, gd = (_Dim3.in_dll(self.lib, n) for n in ("blockIdx", "threadIdx", "blockDim", "gridDim"))
        bd.x, gd.x = block[0], grid[0]
        for b in range(grid[0]):
            bi.x = b
            for t in range(block[0]):
                ti.x = t
                fn(*cargs)


class _FakeArray(np.ndarray):
    def get(self):
        return np.asarray(self)

    @property
    def data(self):             # (CuPy's MemoryPointer: its address)
        return types.SimpleNamespace(ptr=self.ctypes.data)


class _FakeRuntime:
    """CuPy's runtime calls that tapead.cuda makes per call, on host memory
    (a copy or memset happens at once; a stream is always done), counted."""
    cudaDevAttrMultiProcessorCount, memcpyDeviceToHost = 16, 2

    def __init__(self):
        self.counts = {"memsetAsync": 0, "memcpyAsync": 0, "streamSynchronize": 0}
        self.interrupt_wait = 0      # that many waits raise KeyboardInterrupt

    def memGetInfo(self):
        return (1 << 30, 1 << 31)

    def getDeviceCount(self):
        return 1

    def getDevice(self):
        return 0

    def deviceGetAttribute(self, a, d):
        return 1

    def memsetAsync(self, ptr, value, size, stream):
        self.counts["memsetAsync"] += 1
        ctypes.memset(ptr, value, size)

    def memcpyAsync(self, dst, src, size, kind, stream):
        assert kind == self.memcpyDeviceToHost and size == 8
        self.counts["memcpyAsync"] += 1
        ctypes.memmove(dst, src, size)

    def streamSynchronize(self, stream):
        self.counts["streamSynchronize"] += 1
        time.sleep(0.001)            # (other threads run meanwhile, as while a GPU works)
        if self.interrupt_wait:
            self.interrupt_wait -= 1
            raise KeyboardInterrupt


def _fake_cupy():
    def wrap(a):
        return np.ascontiguousarray(a).view(_FakeArray)

    class Device:
        id, compute_capability = 0, "90"

        def __init__(self, i=None):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    return types.SimpleNamespace(
        ndarray=_FakeArray, float64=np.float64, uint64=np.uint64,
        asarray=lambda a, dtype=None: wrap(np.asarray(a, dtype=dtype)),
        ascontiguousarray=wrap, asnumpy=lambda a: np.array(a),
        empty=lambda s, dtype=np.float64: wrap(np.full(s, np.nan, dtype=dtype)),   # poisoned
        zeros=lambda s, dtype=np.float64: wrap(np.zeros(s, dtype=dtype)),
        ones=lambda s, dtype=np.float64: wrap(np.ones(s, dtype=dtype)),
        cuda=types.SimpleNamespace(Device=Device, runtime=_FakeRuntime(),
                                   get_current_stream=lambda: types.SimpleNamespace(ptr=0),
                                   alloc_pinned_memory=bytearray))


@pytest.fixture
def emulated(monkeypatch, tmp_path):
    """tapead.cuda on the stand-in CuPy; yields the list of launches."""
    from tapead import cuda
    calls = []
    fake = _fake_cupy()
    monkeypatch.setattr(cuda, "_cupy", lambda: fake)
    # this thread's failure words of the real CuPy (a GPU test before this
    # one in the process) hold device pointers the stand-in cannot touch
    monkeypatch.setattr(cuda, "_TLS", threading.local())
    # one multiprocessor, 4 blocks: the generated kernel's threads run several rows each
    monkeypatch.setattr(cuda, "_BLOCKS_PER_SM", 4)

    class Module:
        def __init__(self, cp, source, arch):
            self.source, self.lib = source, _emulated(source, str(tmp_path))

        def get_function(self, name):
            return _Kernel(self.source, name, calls, self.lib)
    monkeypatch.setattr(cuda, "_module", Module)
    return calls


@pytest.mark.parametrize("generated", [True, False])
def test_host_side_launches_match_the_kernels(generated, emulated, monkeypatch):
    from tapead import cuda
    if not generated:
        monkeypatch.setattr(cuda, "GENERATED_MAX_NODES", 0)
    prog = every_op_program()
    X = _rows(np.random.default_rng(7), 3000)
    Y = prog(X, device="cuda")
    assert Y.shape == (3000, 2) and type(Y) is np.ndarray
    Y, G = prog.grad(X, per_sample=True, device="cuda")
    assert G.shape == (3000, 2)
    Y, G = prog.grad(X, np.ones((3000, 2)), params=[2.0], device="cuda")
    assert G.shape == (2,)
    Y, G = prog._run(X, None, "sum", None, None, parts=True, device="cuda")
    assert G.shape == (1, 2)
    main = "ta_gpu_gen" if generated else "ta_gpu_interp"
    assert emulated.count(main) == 4 and emulated.count("ta_gpu_rowsum") == 2 * 2  # 3000 -> 3 -> 1
    assert set(emulated) == {main, "ta_gpu_rowsum"}


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
@pytest.mark.parametrize("generated", [True, False])
def test_emulated_kernels_give_the_cpu_programs_numbers(generated, emulated, monkeypatch):
    from tapead import cuda
    if not generated:
        monkeypatch.setattr(cuda, "GENERATED_MAX_NODES", 0)
    rng = np.random.default_rng(8)
    prog = every_op_program()
    X = _rows(rng, 1500)
    S = rng.standard_normal((1500, 2))
    for seed, params in ((None, None), (S, [0.25]), (np.array([0.5, -2.0]), None)):
        Y, G = prog.grad(X, seed, per_sample=True, params=params, device="cuda")
        Yc, Gc = prog.grad(X, seed, per_sample=True, params=params)
        assert np.array_equal(Y, Yc)
        if generated:        # the CPU's order of additions, the C library's math: its bits
            assert np.array_equal(G, Gc)
        _close(G, Gc, 1e-14)
        Ys, Gs = prog.grad(X, seed, params=params, device="cuda")
        assert np.array_equal(Ys, Yc)
        _close(Gs, prog.grad(X, seed, params=params)[1], 1e-13)
        # the summed gradients are the fixed-order sum of the per-sample ones
        expect = np.zeros((2, 2))
        _rowsum_emulated(G, 1500, 2, expect)
        top = np.zeros((1, 2))
        _rowsum_emulated(expect, 2, 2, top)
        assert np.array_equal(Gs, top[0])
    assert np.array_equal(prog(X, device="cuda"), prog(X))
    p = arithmetic_program()
    Xa = rng.uniform(-3, 3, (700, 2))
    assert all(np.array_equal(a, b) for a, b in zip(p.grad(Xa, per_sample=True, device="cuda"),
                                                     p.grad(Xa, per_sample=True)))


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
@pytest.mark.parametrize("generated", [True, False])
def test_emulated_failures_are_named_as_on_the_cpu(generated, emulated, monkeypatch):
    from tapead import cuda
    if not generated:
        monkeypatch.setattr(cuda, "GENERATED_MAX_NODES", 0)
    prog = every_op_program()
    X = _rows(np.random.default_rng(5), 1000)
    X[734] = [0.5, 0.9]         # x > y flips
    X[900] = [0.05, -0.5]       # x > 0.1 flips
    for call in (lambda p, X, **k: p(X, **k), lambda p, X, **k: p.grad(X, per_sample=True, **k)):
        with pytest.raises(GuardError) as gpu:
            call(prog, X, device="cuda")
        with pytest.raises(GuardError) as cpu:
            call(prog, X)
        assert str(gpu.value) == str(cpu.value) and "at row 734" in str(gpu.value)
    tapead.clear_guards()
    a, b = Value(1.0), Value(0.5)
    p = tapead.compile([(a - b).log(), a * b], [a, b], wrt=[a])
    Xl = np.tile([2.0, 1.0], (300, 1))
    Xl[221] = [0.5, 1.0]        # log(-0.5)
    with pytest.raises(ValueError) as gpu:
        p.grad(Xl, device="cuda")
    with pytest.raises(ValueError) as cpu:
        p.grad(Xl)
    assert str(gpu.value) == str(cpu.value) and "row 221" in str(gpu.value)


def test_a_program_with_take_is_refused_on_the_gpu(emulated):
    xs = [Value(1.0), Value(2.0), Value(3.0)]
    i = Value(1.0)
    prog = tapead.compile(tapead.take(xs, i) * i, [i])
    with pytest.raises(tapead.TapeadError, match="take nodes \\(1\\), which run on the CPU only"):
        prog([[2.0]], device="cuda")
    assert prog([[2.0]]).tolist() == [[6.0]] and emulated == []


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_dask_runs_chunks_on_the_gpu(emulated):
    da = pytest.importorskip("dask.array")
    import dask
    import tapead.dask
    prog = european()
    Z = np.random.default_rng(9).standard_normal((2500, 1))
    X = da.from_array(Z, chunks=(1024, 1))
    with dask.config.set(scheduler="synchronous"):
        Y, G = tapead.dask.grad(prog, X, per_sample=True, device="cuda")
        Yc, Gc = prog.grad(Z, per_sample=True)
        assert np.array_equal(Y.compute(), Yc) and np.array_equal(G.compute(), Gc)
        _close(tapead.dask.grad(prog, X, device="cuda")[1].compute(), prog.grad(Z)[1], 1e-13)
        assert np.array_equal(tapead.dask.evaluate(prog, X, device="cuda").compute(), prog(Z))
    assert emulated.count("ta_gpu_gen") == 4 * 3   # three chunks, four computes (Y and G apart)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_nvcc_compiles_where_nvrtc_cannot(monkeypatch, tmp_path):
    from tapead import cuda

    def no_nvrtc(*a, **k):
        raise ImportError("no NVRTC here")
    monkeypatch.delenv("LD_PRELOAD", raising=False)   # (as above: nvcc crashes under a preloaded ASan)
    monkeypatch.setattr(cuda, "nvrtc_compile", no_nvrtc)
    monkeypatch.setenv("TAPEAD_CACHE", str(tmp_path))
    monkeypatch.setattr(cuda, "_MODULES", {})    # (other tests may have compiled it in this process)
    loaded = []

    class Module:                                # CuPy's cupy.cuda.function.Module
        def load(self, cubin):
            loaded.append(cubin)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(function=types.SimpleNamespace(Module=Module),
                                                            runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    with pytest.warns(UserWarning, match="NVRTC failed, compiling with nvcc instead .no NVRTC here"):
        mod = cuda._module(fake, cuda.cuda_source(european()), "90")
    assert len(loaded) == 1 and loaded[0][:4] == b"\x7fELF"
    (name,) = os.listdir(tmp_path)
    assert name.endswith(".sm_90.cubin") and os.path.getsize(tmp_path / name) > len(loaded[0])
    assert cuda._module(fake, cuda.cuda_source(european()), "90") is mod and len(loaded) == 1  # kept in memory


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
@pytest.mark.parametrize("generated", [True, False])
def test_one_failure_word_a_thread_read_once_a_call(generated, emulated, monkeypatch):
    """A call zeroes nothing and reads 8 bytes back once, waiting once (the
    summed gradients' launches queued before the wait); the word is zeroed
    again only after a failure, or after a wait that did not finish."""
    from tapead import cuda
    if not generated:
        monkeypatch.setattr(cuda, "GENERATED_MAX_NODES", 0)
    monkeypatch.setattr(cuda, "_TLS", __import__("threading").local())
    rt = cuda._cupy().cuda.runtime
    prog = every_op_program()
    X = _rows(np.random.default_rng(10), 600)
    bad = X.copy()
    bad[321] = [0.5, 0.9]        # x > y flips
    Yc, Gc = prog.grad(X, per_sample=True)
    Gs = prog.grad(X)[1]

    def good():
        Y, G = prog.grad(X, per_sample=True, device="cuda")
        assert np.array_equal(Y, Yc) and np.allclose(G, Gc, rtol=1e-14, atol=0)
        _close(prog.grad(X, device="cuda")[1], Gs, 1e-13)
        assert np.array_equal(prog(X, device="cuda"), Yc)
    good()
    assert rt.counts == {"memsetAsync": 0, "memcpyAsync": 3, "streamSynchronize": 3}
    for _ in range(2):
        with pytest.raises(GuardError, match="at row 321"):
            prog(bad, device="cuda")
        good()       # (no failure carried over from the call before)
    assert rt.counts["memsetAsync"] == 2
    # a wait interrupted (Ctrl-C) after a row failed: the next call starts clean
    rt.interrupt_wait = 1
    with pytest.raises(KeyboardInterrupt):
        prog(bad, device="cuda")
    word = cuda._failword(cuda._cupy(), 0)
    assert word.dirty and int(word.dev[0]) != 0
    good()
    assert rt.counts["memsetAsync"] == 3 and not word.dirty and int(word.dev[0]) == 0


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_threads_have_their_own_failure_words(emulated):
    """Calls in several threads at once on one Program (the emulated kernels
    run outside the GIL): each gets its own rows' results or its own row's
    failure."""
    import threading
    prog = every_op_program()
    prog.params = prog.params     # (held: parameter Values are read in their own thread only)
    rng = np.random.default_rng(11)
    jobs = []
    for t in range(6):
        X = _rows(rng, 300)
        if t % 2:
            X[17 * t] = [0.5, 0.9]       # x > y flips at row 17 t
        jobs.append(X)
    expect = []
    for X in jobs:
        try:
            expect.append(prog.grad(X, per_sample=True))
        except GuardError as e:
            expect.append(str(e))
    prog.grad(jobs[0], per_sample=True, device="cuda")    # (compiled: the emulation compiles unlocked)
    got = [None] * len(jobs)
    go = threading.Barrier(len(jobs))

    def work(k):
        go.wait()
        for _ in range(3):
            try:
                r = prog.grad(jobs[k], per_sample=True, device="cuda")
            except GuardError as e:
                r = str(e)
            except BaseException as e:      # (reported below)
                r = e
            if got[k] is None or isinstance(r, BaseException):
                got[k] = r
            elif isinstance(r, str) != isinstance(got[k], str):
                got[k] = AssertionError("a failure one time, results another")
    ts = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not [g for g in got if isinstance(g, BaseException)], got
    for k, (g, e) in enumerate(zip(got, expect)):
        if k % 2:
            assert g == e and f"at row {17 * k}" in g
        else:
            assert np.array_equal(g[0], e[0]) and np.array_equal(g[1], e[1])


def test_result_layouts(emulated):
    """numpy in: C-contiguous numpy results, as the CPU Program's; CuPy in:
    (rows, columns) views of the kernels' [column][row] arrays."""
    from tapead import cuda
    cp = cuda._cupy()
    prog = every_op_program()
    X = _rows(np.random.default_rng(12), 200)
    for Y in (prog(X, device="cuda"), *prog.grad(X, per_sample=True, device="cuda")):
        assert type(Y) is np.ndarray and Y.flags.c_contiguous and Y.shape == (200, 2)
    for Y in (prog(cp.asarray(X), device="cuda"), *prog.grad(cp.asarray(X), per_sample=True, device="cuda")):
        assert isinstance(Y, cp.ndarray) and Y.flags.f_contiguous and Y.shape == (200, 2)
    for Xe in (np.zeros((0, 2)), cp.asarray(np.zeros((0, 2)))):
        Y, G = prog.grad(Xe, per_sample=True, device="cuda")
        assert Y.shape == (0, 2) and G.shape == (0, 2)
        Y, G = prog.grad(Xe, device="cuda")
        assert Y.shape == (0, 2) and np.array_equal(G, np.zeros(2))
