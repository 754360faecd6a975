"""Guards and compiled programs (tapead.replay): the comparisons recorded
as guards, and Programs (csrc/replay/program.c): made, sized, run over arrays,
flattened for pickling and loaded back.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

from . import f64, ffi, lib
from .status import check, error, guard_error, op_error


def guard_clear() -> None:
    check(lib.ta_guard_clear())


def guard_apart() -> None:
    """This thread's guards put aside under a new empty set (guard_rejoin puts them back)."""
    check(lib.ta_guard_apart())


def guard_rejoin() -> None:
    """The set guard_apart made dropped, the guards put aside back as they were."""
    check(lib.ta_guard_rejoin())


def guard_count() -> int:
    return lib.ta_guard_count()


# The CPython front's program boxes and calls (csrc/python/program_call.c), bound
# by bind_cpython; None on the cffi front and PyPy
_box_type: Any = None
_cpython_run: Any = None


def bind_cpython(front: Any) -> None:
    """Make programs in the CPython front's boxes and run them through its run."""
    global _box_type, _cpython_run
    _box_type, _cpython_run = front.program_box(), front.run


def _prog_box() -> Tuple[Any, Any]:
    """(owner, ta_prog **): an empty box a C call puts a new program in,
    owned before the call, which frees the program when it dies (the
    CPython front's box, csrc/python/program_call.c; else csrc/api/cdef.h: ta_prog_drop)."""
    if _box_type is not None:
        b = _box_type()
        return b, ffi.cast("ta_prog **", b.address)
    box = ffi.gc(ffi.new("ta_prog *[1]"), lib.ta_prog_drop)
    return box, box


def _ptr(a: Any, ctype: str = "double[]") -> Any:
    """A C pointer into the contiguous array a (which it keeps alive), NULL for None:
    ~0.3 us, a fifth of ffi.cast(a.ctypes.data)."""
    return ffi.NULL if a is None else ffi.from_buffer(ctype, a)


def prog_new(oid: Any, nout: int, iid: Any, nin: int, wid: Any, nwrt: int) -> Any:
    """A new program's (owner, box) (_prog_box: its program is box[0]); None
    for arguments C refuses (TA_EARG: no outputs, inputs or wrt not leaves,
    inputs repeated)."""
    owner, p = _prog_box()
    st = lib.ta_prog_new(oid, nout, iid, nin, wid, nwrt, p)
    if st == lib.TA_EARG:
        return None
    check(st)
    return owner, p


_PS = {"inputs": lib.TA_PS_INPUTS, "outputs": lib.TA_PS_OUTPUTS, "wrt": lib.TA_PS_WRT,
       "params": lib.TA_PS_PARAMS, "nodes": lib.TA_PS_NODES, "guards": lib.TA_PS_GUARDS,
       "live": lib.TA_PS_LIVE, "block": lib.TA_PS_BLOCK, "kernel": lib.TA_PS_KERNEL,
       "chunk": lib.TA_PS_CHUNK}


def prog_size(p: Any, what: str) -> int:
    """A size of program p: "inputs", "outputs", "wrt", "params", "nodes",
    "guards", "block" (rows per gradient block), "chunk" (rows the
    interpreter runs together for summed gradients), "live" (1 while it reads
    its parameters' Values) or "kernel" (1 while generated code runs it)."""
    return lib.ta_prog_size(p, _PS[what])


def prog_params(p: Any, npar: int) -> List[int]:
    """The node ids of program p's npar parameters."""
    pid = ffi.new("int64_t[]", max(npar, 1))
    lib.ta_prog_params(p, pid)
    return list(pid[0:npar])


def prog_param_values(p: Any, out: Any) -> None:
    check(lib.ta_prog_param_values(p, f64(out), out.size))


def prog_set_params(p: Any, v: Any) -> None:
    check(lib.ta_prog_set_params(p, f64(v), v.size))


def prog_follow(p: Any) -> bool:
    """Read p's parameters from their Values again; False if it has none to follow."""
    return lib.ta_prog_follow(p) == 0


class _Failed:
    """A failure as the CPython front's run returns it, read as a ta_fail_t."""

    def __init__(self, t: Tuple[Any, ...]) -> None:
        self.row, self.op, self.x, self.y, self.guard, self.kind, self.outcome = t[1:]


def prog_run(owner: Any, p: Any, X: Any, B: int, nin: int, Y: Any, nout: int, seed: Any, G: Any,
             nwrt: int, per_sample: bool, parts: Any, params: Any, npar: int, threads: int,
             row0: int) -> None:
    """Run program p (owner: its box's owner, _prog_box; csrc/api/cdef.h:
    ta_run_t): X (B x nin) and Y (B x nout) contiguous float64 numpy arrays;
    seed None (outputs only), (nout,) or (B, nout); G the gradients,
    per_sample (B x nwrt) or summed (nwrt) with parts their blocks' sums;
    params None (the program's own) or (npar,).  A failure raises, naming
    its row (row0: the first row's number in the message)."""
    if _cpython_run is not None:      # the CPython front: one C call (csrc/python/program_call.c)
        res = _cpython_run(owner, X, B, nin, Y, nout, seed, 0 if seed is None else seed.ndim, G,
                          nwrt, 1 if per_sample else 0, parts, 0 if parts is None else parts.shape[0],
                          params, npar, threads)
        if res is not None:
            raise _run_error(res[0], _Failed(res), row0)
        return
    # (the struct filled from a list in one call: a setattr a field took 40% longer)
    r: Any = ffi.new("ta_run_t *", _run_struct(X, B, nin, Y, nout, seed, G, nwrt, per_sample, parts,
                                               params, npar, threads))
    f: Any = ffi.new("ta_fail_t *")
    st = lib.ta_prog_run(p, r, f)
    if st:
        raise _run_error(st, f, row0)


if TYPE_CHECKING:
    # prog_run's arguments before threads: (owner, p, X, B, nin, Y, nout, seed, G, nwrt,
    # per_sample, parts, params, npar)
    RunArgs = Tuple[Any, Any, Any, int, int, Any, int, Any, Any, int, bool, Any, Any, int]


def _run_struct(X: Any, B: int, nin: int, Y: Any, nout: int, seed: Any, G: Any, nwrt: int,
                per_sample: bool, parts: Any, params: Any, npar: int, threads: int) -> List[Any]:
    """A ta_run_t's fields in order (None: a NULL pointer), the arrays' pointers keeping them alive."""
    fb = ffi.from_buffer
    return [fb("double[]", X), B, nin, fb("double[]", Y), nout,
            ffi.NULL if seed is None else fb("double[]", seed), 0 if seed is None else seed.ndim,
            ffi.NULL if G is None else fb("double[]", G), nwrt, 1 if per_sample else 0,
            ffi.NULL if parts is None else fb("double[]", parts), 0 if parts is None else parts.shape[0],
            ffi.NULL if params is None else fb("double[]", params), npar, threads]


def prog_run_many(runs: List[Tuple[RunArgs, int]], threads: int) -> List[Optional[Exception]]:
    """Several programs' runs at once over at most `threads` threads, each
    run as prog_run with one thread would run it (the same bits), taken in
    the order given: runs holds (prog_run's arguments before threads, row0);
    returns each run's failure (an exception naming its row) or None."""
    n = len(runs)
    keep = [_run_struct(*a[2:], 1) for a, _ in runs]
    P: Any = ffi.new("ta_prog *[]", [a[1] for a, _ in runs])
    R: Any = ffi.new("ta_run_t[]", keep)
    F: Any = ffi.new("ta_fail_t[]", n)
    st: Any = ffi.new("int[]", n)
    check(lib.ta_prog_run_many(P, R, F, st, n, threads))
    return [None if st[i] == 0 else _run_error(st[i], F[i], runs[i][1]) for i in range(n)]


def _run_error(st: int, f: Any, row0: Any) -> Exception:
    if row0 == row0 and row0 is not None:
        where = f" at row {f.row + int(row0)}"
    else:           # (tapead.dask: a chunk of an array whose chunk sizes are unknown)
        where = (f" at row {f.row} of its chunk (where the chunk starts is unknown: the "
                 f"array's chunk sizes are unknown)")
    if st == lib.TA_EGUARD:
        return guard_error(f.kind, f.outcome, f.x, f.y, where)
    if st in (lib.TA_EZERODIV, lib.TA_EDOMAIN, lib.TA_ERANGE, lib.TA_EINDEX):
        e = op_error(st, f.op, f.x, f.y)
    elif st == lib.TA_EARG:
        return ValueError("Program: an argument does not match the program's sizes")
    else:
        return error(st)
    e.args = (f"{e.args[0]} ({where.strip()})",)
    return e


_CTYPE = {1: "uint8_t[]", 4: "uint32_t[]", 8: "double[]"}   # the flat form's arrays, by item size


def _flat(sizes: Optional[Dict[str, int]], arrs: Optional[Dict[str, Any]]) -> Tuple[Any, List[Any]]:
    """A ta_flat_t with the given sizes, its arrays pointing into arrs (the
    pointers returned keep them alive)."""
    f: Any = ffi.new("ta_flat_t *")
    for k, n in (sizes or {}).items():
        setattr(f, k, n)
    keep = []
    for k, a in (arrs or {}).items():
        ptr = _ptr(a, _CTYPE[a.dtype.itemsize])
        setattr(f, k, ptr)
        keep.append(ptr)
    return f, keep


def prog_flat_sizes(p: Any, names: Tuple[str, ...]) -> Dict[str, int]:
    """The sizes of program p's flat form (csrc/api/cdef.h: ta_flat_t)."""
    f, _ = _flat(None, None)
    check(lib.ta_prog_flat(p, f))
    return {k: getattr(f, k) for k in names}


def prog_flat(p: Any, sizes: Dict[str, int], arrs: Dict[str, Any]) -> None:
    """Fill arrs (numpy arrays, one per array of ta_flat_t, each as long as
    sizes make it) with program p's flat form."""
    f, keep = _flat(sizes, arrs)
    check(lib.ta_prog_flat(p, f))
    del keep


def prog_load(sizes: Dict[str, int], arrs: Dict[str, Any], params: Any) -> Any:
    """A program's (owner, box) (as prog_new's) from its flat form
    (prog_flat) and parameter values, every field checked in C; None for a
    form C refuses (TA_EARG)."""
    f, keep = _flat(sizes, arrs)
    owner, p = _prog_box()
    st = lib.ta_prog_load(f, f64(params), p)
    del keep
    if st == lib.TA_EARG:
        return None
    check(st)
    return owner, p


# The execution code's arrays (ta_codeview_t): name, numpy type, size field.
_CODE = (("uni", "u1", "n"), ("need", "u1", "n"), ("loc", "u4", "n"), ("dloc", "u4", "n"),
         ("uops", "u4", "nuops"), ("ik", "u4", "nins"), ("ix", "u4", "nins"),
         ("iy", "u4", "nins"), ("it0", "u4", "nins"), ("int_", "u4", "nins"),
         ("iop", "u1", "nins"), ("tp", "u4", "nterms"), ("tq", "u4", "nterms"),
         ("tf", "u1", "nterms"))
_CODE_SIZES = ("n", "nins", "nterms", "nuops", "nu", "ndu", "ch")


def prog_code(p: Any) -> Dict[str, Any]:
    """Program p's execution code (csrc/api/cdef.h: ta_codeview_t): its sizes
    as ints and its arrays as numpy arrays, by field name."""
    import numpy as np
    v: Any = ffi.new("ta_codeview_t *")
    check(lib.ta_prog_code(p, v))
    out: Dict[str, Any] = {k: getattr(v, k) for k in _CODE_SIZES}
    keep = []
    for name, t, size in _CODE:
        a = np.zeros(max(out[size], 1), dtype=t)
        ptr = _ptr(a, _CTYPE[a.dtype.itemsize])
        setattr(v, name, ptr)
        keep.append(ptr)
        out[name] = a
    check(lib.ta_prog_code(p, v))
    del keep
    for name, _, size in _CODE:
        out[name] = out[name][:out[size]]
    return out


KERNEL_ABI: int = lib.TA_KERNEL_ABI     # what a generated kernel is compiled against (cdef.h)


def prog_set_kernel(p: Any, address: int, uniform: int, nscratch: int) -> None:
    """Run program p's blocks with the generated kernel at address (cdef.h:
    ta_kernel_fn; 0: the interpreter again), which needs nscratch doubles,
    and its uniform values with the function at uniform (ta_uniform_fn; 0:
    the interpreter's)."""
    check(lib.ta_prog_set_kernel(p, ffi.cast("void *", address), ffi.cast("void *", uniform), nscratch,
                                 lib.TA_KERNEL_ABI))
