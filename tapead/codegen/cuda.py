"""The generated CUDA kernel: the lowered statements printed for one thread
per row (tapead/cuda.py compiles and runs it)."""
from __future__ import annotations

from typing import List

from .code import Code
from .cprint import Locals, Printer, Sweeps, kernel, prelude
from .lower import forward, uniform_forward

__all__ = ["CUDAPrinter"]

_ROWS = """\
#define TA_W 1
#define TA_LANES(...) { const int l = 0; (void)l; __VA_ARGS__; }
"""
# Y and G are [column][row] (ldo rows): a warp's stores are consecutive
_IO = """\
#define TA_IN(j) X[row * TA_NIN + (j)]
#define TA_OUT(j, x) Y[(j) * ldo + row] = (x)
#define TA_SEED(j) (seedmode == 1 ? seed[j] : seed[row * TA_NOUT + (j)])
#define TA_GRAD(j, x) G[(j) * ldo + row] = (x)
#define TA_BITS(u) __longlong_as_double((long long)(u))
#define TA_FAILED { ta_gpu_fail(fail, row, bad); return; }
"""


class CUDAPrinter:
    """Kernel ta_gpu_gen, one thread per row (TA_W 1), its arguments (X, par,
    seed, seedmode, row0, rows, ldo, Y, G, fail); Y and G as [column][row]
    (ldo rows), so a warp's stores are consecutive.  Each thread computes the
    uniform values once, then runs rows i, i + (threads in the grid), ...
    (a grid-stride loop: fewer threads than rows, the uniform code paid once
    a thread); a failing row ends its thread, whose later rows are higher,
    so the lowest failing row is still the one kept.  mode "fwd" (outputs)
    or "ps" (outputs and per-sample gradients: summed gradients are their
    fixed-order sum, csrc/gpu/gpu.cuh).  The uniform values U (the parameters and
    what is computed from them alone), which the CPU computes once per call
    (batch.c: ta_uniform_forward), each thread computes itself, in the same
    order, with the same rules (lower.uniform_forward); a failure there fails
    every row, so row 0 is named, as on the CPU."""

    def __init__(self, mode: str) -> None:
        if mode not in ("fwd", "ps"):
            raise ValueError(f"mode must be 'fwd' or 'ps', not {mode!r}")
        self.mode = mode

    def source(self, code: Code) -> str:
        C = code
        sw = Sweeps(C, self.mode, forward(C), True)
        pr = Printer(C, Locals(C))
        pr.mode = self.mode
        sig = ('extern "C" __global__ void ta_gpu_gen(const double *__restrict__ X, const double *__restrict__ par,\n'
               "    const double *__restrict__ seed, int seedmode, long long row0, long long rows,\n"
               "    long long ldo, double *Y, double *G, ta_u64 *fail)")
        decls = ["const long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
                 "const long long step = (long long)gridDim.x * blockDim.x;",
                 "long long i = i0, row = row0 + i0;",
                 f"double U[{max(C.nu, 1)}];",
                 "int bad = 0;",
                 "(void)seed; (void)seedmode; (void)G; (void)ldo;",
                 "if (i0 >= rows) return;"]
        once = pr.all_lines(uniform_forward(C)) + pr.all_lines(sw.partials)
        body = ["row = row0 + i;"] + pr.all_lines(sw.forward + sw.reverse)
        defs = f"#define TA_NIN {C.nin}\n#define TA_NOUT {C.nout}\n#define TA_NWRT {C.nwrt}\n"
        text = kernel(sig, decls, once, "for (; i < rows; i += step) {", body, [], None)
        return prelude("one thread a row", ["gpu.cuh"], _ROWS, _IO) + defs + text

    def units(self, code: Code, n: int = 1) -> List[str]:
        return [self.source(code)]
