"""Replay: the recorded tape as a program (see csrc/replay/).

- ``v.recompute()`` re-evaluates, in one C sweep, every node v depends on
  from the current ``.data`` of its leaves, in place; ``backward()`` then
  gives gradients at the new point.  Record once, then per step: recompute,
  zero_grad, backward, update.
- Comparisons of Values (``<``, ``<=``, ``>``, ``>=``) return a bool and are
  recorded as guards; a recompute (or a Program run) whose guards flip raises
  GuardError and leaves every value as it was.  A recompute from root (and
  compile) checks every live guard whose operands read a leaf it varies,
  made before root or after it: any of them could have steered root's
  recording or chosen root among existing Values (``max(a, b)``).  That is
  conservative: a bookkeeping comparison over the same leaves that flips
  raises too (``clear_guards()`` forgets them all; docs/api.md says which
  guards bind).  A guard whose Values were freed is lost, not gone: a
  replay it would bind raises GuardError (call ``clear_guards()`` before
  recording the graph you replay).
  Branching on ``.data`` (a plain float) cannot be seen, so it cannot be
  guarded: compare the Values themselves.  ``==`` stays identity (Values
  hash by identity).
- ``compile(outputs, inputs, wrt)`` copies the graph into a self-contained
  Program evaluated for a batch of input rows (numpy float64) in C.

    >>> from tapead import Value
    >>> x = Value(2.0); y = x * x + 1
    >>> x.data = 3.0; y.recompute(); y.data
    10.0
"""
from __future__ import annotations

import operator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, Union

if TYPE_CHECKING:
    from .native import NativeState
    import numpy
    import numpy.typing as npt
    from numpy.typing import ArrayLike
    _F64Array = npt.NDArray[numpy.float64]

from ._c import OP
from ._c import program as _prog
from .errors import GuardError
from .engine import Value, ids_of, values_of

__all__ = ["GuardError", "recompute", "compile", "Program", "clear_guards", "guard_count"]

# ------------------------------------------------------ recompute, guards
def recompute(v: Value) -> None:
    """Re-evaluate v and everything it depends on from the leaves' current .data, in C.

    >>> import tapead
    >>> x = tapead.Value(2.0); y = x * x
    >>> x.data = 3.0; tapead.recompute(y); y.data
    9.0
    """
    v.recompute()


def clear_guards() -> None:
    """Forget every recorded comparison of this thread's tape, those lost with freed Values too.

    >>> import tapead
    >>> x = tapead.Value(1.0); x > 0
    True
    >>> tapead.clear_guards(); tapead.guard_count()
    0
    """
    _prog.guard_clear()


def guard_count() -> int:
    """Number of guards this thread's tape holds (not counting those lost with freed Values).

    >>> import tapead
    >>> x = tapead.Value(1.0); n = tapead.guard_count()
    >>> x < 2.0, tapead.guard_count() - n
    (True, 1)
    """
    return _prog.guard_count()


# -------------------------------------------------------------- programs
_numpy: Optional[ModuleType] = None


def _np() -> ModuleType:
    """numpy, imported on first use: only Programs need it, the rest of tapead
    does not.  (Kept here once imported: an import statement a call was some
    0.15 us, and a Program's call made five.)"""
    global _numpy
    if _numpy is None:
        import numpy
        _numpy = numpy
    return _numpy


def _c_array(a: Any, dtype: Any) -> Any:
    """a as a C-contiguous, aligned array of dtype, copied only if it is not one.
    (Aligned too: arrays rebuilt from pickle or Dask's messages may start at any
    byte, and C must not read a double from an odd address.)"""
    np = _np()
    if type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous and a.flags.aligned:
        return a                    # what require returns too, at a third of its cost per call
    return np.require(a, dtype=dtype, requirements=["C", "A"])


def _rows(X: Any, n: int) -> Any:
    """X as a C-contiguous float64 (B, n) array (copied only if it is not one)."""
    np = _np()
    X = _c_array(X, np.float64)
    _check_rows(X.shape, n)
    return X


def _check_rows(shape: Tuple[int, ...], n: int) -> None:
    if len(shape) != 2 or shape[1] != n:
        raise ValueError(f"X must be a 2-d array of shape (B, {n}), not {shape}")


def _check_seed(shape: Tuple[int, ...], B: int, nout: int) -> None:
    if shape not in ((nout,), (B, nout)):
        raise ValueError(f"seed must have shape ({nout},) or ({B}, {nout}), not {shape}")


def _vector(a: Any, n: int, what: str) -> Any:
    """a as a C-contiguous float64 array of shape (n,)."""
    np = _np()
    a = _c_array(a, np.float64)
    if a.shape != (n,):
        raise ValueError(f"{what} must have shape ({n},), not {a.shape}")
    return a


def threads_arg(threads: Any) -> int:
    """A threads= argument that is not None, as an int; a ValueError naming it otherwise."""
    try:
        n = operator.index(threads)
    except TypeError:
        n = 0
    if isinstance(threads, bool) or not 1 <= n < 1 << 31:
        raise ValueError(f"threads must be a positive int (below 2**31) or None, not {threads!r}")
    return n


def cores() -> int:
    """The cores this process may run on (its CPU affinity), what threads=None uses.

    >>> import tapead; tapead.replay.cores() >= 1
    True
    """
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# Per thread, at least this many node-rows: below it a thread costs more to
# start (~30-60 us) than it saves.  Only threads=None applies it.
_WORK_PER_THREAD = 1 << 18

# The flat form's arrays (ta_flat_t), as pickled: (name, type, length from the
# sizes).  Pickled little-endian ("<" + type), whatever the machine.
_FLAT = (("op", "u1", "n"), ("a", "u4", "n"), ("b", "u4", "n"), ("c", "f8", "n"),
         ("in", "u4", "nin"), ("out", "u4", "nout"), ("wrt", "u4", "nwrt"),
         ("par", "u4", "npar"), ("gab", "u4", "2ng"), ("gc", "f8", "ng"),
         ("gkind", "u1", "ng"), ("lst", "u4", "nlst"))
_SIZES = ("n", "nin", "nout", "nwrt", "npar", "ng", "nlst")
_OPTIONAL = {"nlst": 0, "lst": b""}    # (a state without take nodes may lack them)
_FORMAT = 1          # (a state may also carry "native": the mode it was compiled with)


def _flat_len(size: str, sizes: Dict[str, int]) -> int:
    return 2 * sizes["ng"] if size == "2ng" else sizes[size]


def _load(state: Dict[str, Any]) -> "Program":
    """A Program from its pickled state (Program.__reduce__); every field is
    checked in C, so bytes from anywhere make a Program or a ValueError."""
    np = _np()
    bad = ValueError("not the state of a tapead Program (or one from an incompatible version)")
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise bad
    ops = state.get("ops")
    if not isinstance(ops, tuple) or ops != tuple(tuple(OP)[:len(ops)]):
        raise ValueError("this Program was pickled by a tapead with other op codes")
    try:
        state = {**_OPTIONAL, **state}
        sizes = {k: int(state[k]) for k in _SIZES}
        if min(sizes.values()) < 0 or max(sizes.values()) >= 2 ** 32 - 1:
            raise bad
        arrs = {}
        for name, t, size in _FLAT:
            a = np.frombuffer(state[name], dtype="<" + t)
            if a.shape != (_flat_len(size, sizes),):
                raise bad
            arrs[name] = _c_array(a, t)
        pv = _c_array(np.frombuffer(state["params"], dtype="<f8"), np.float64)
        if pv.shape != (sizes["npar"],):
            raise bad
    except (KeyError, TypeError, ValueError) as e:
        raise bad from e
    native = state.get("native")
    if not _native_ok(native):
        raise bad
    p = _prog.prog_load(sizes, arrs, pv)
    if p is None:
        raise bad
    prog = Program.__new__(Program)
    prog._own(p)
    from .native import NativeState     # (not at import: it imports subprocess, hashlib ...)
    prog._native = NativeState(prog, native, landed=True)
    return prog


class Program:
    """A recorded graph copied out of the tape, run for a batch of rows in C.

    Made by tapead.compile.  Leaves listed as inputs take their values from
    the columns of X; every other leaf is a parameter.  A Program compiled
    here reads its parameters from their nodes' current .data at each call,
    so training updates are seen, until ``prog.params`` is assigned; then it
    holds those values (``prog.params = None`` follows the nodes again).
    It holds those nodes: a Value that ``v.__init__(x)`` moves to a new
    node is a new leaf, which the Program never read (compile again), while
    the node it had stays what the Program reads.
    ``params=`` on a call overrides them for that call; its order is wrt's
    (then any parameter leaves not in wrt, in the order they were created).  A Program pickles
    (its flat program, guards and parameter values at that moment) and runs
    in another process with no tape at all.

    Rows are split over ``threads`` native threads (None, the default: the
    cores this process may use, fewer for small batches, since a thread
    costs tens of microseconds to start); gradients summed over rows are
    added in a fixed order, so every thread count gives the same bits.

    >>> import numpy as np, tapead
    >>> w = tapead.Value(2.0); x = tapead.Value(0.0); y = w * x + 1
    >>> p = tapead.compile(y, [x], wrt=[w]); isinstance(p, tapead.Program)
    True
    >>> p(np.array([[1.0], [3.0]]))
    array([[3.],
           [7.]])
    >>> w.data = 0.5; p(np.array([[4.0]]))
    array([[3.]])
    >>> p.params, p(np.array([[4.0]]), params=[10.0])
    (array([0.5]), array([[41.]]))
    """
    _p: Any
    _params: List[Value]
    _dims: Tuple[int, ...]
    _native: "NativeState"

    def __init__(self, outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
                 wrt: Union[Value, Iterable[Value]] = (), native: Union[None, bool, str] = None) -> None:
        if not _native_ok(native):
            from .codegen import SHAPES
            raise ValueError(f"native must be None, True, False or a kernel shape "
                             f"({', '.join(map(repr, SHAPES))}), not {native!r}")
        outs = values_of(outputs, "outputs")
        ins = values_of(inputs, "inputs")
        wrts = values_of(wrt, "wrt")
        p = _prog.prog_new(ids_of(outs), len(outs), ids_of(ins), len(ins), ids_of(wrts), len(wrts))
        if p is None:
            raise ValueError("compile: " + _refused(outs, ins, wrts))
        self._own(p)
        from .engine import held
        self._params = held(_prog.prog_params(self._p, self._dims[3]))  # keeps their segments alive
        from .native import NativeState
        self._native = NativeState(self, native)

    def _own(self, box: Any) -> None:
        """Take the C program in box, an (owner, ta_prog **) pair
        (_prog.prog_new, prog_load); its sizes are read once (they never change)."""
        self._box = box[0]
        self._p = box[1][0]       # valid while self._box (the owner) lives
        self._params = []
        self._dims = tuple(_prog.prog_size(self._p, w) for w in (
            "inputs", "outputs", "wrt", "params", "nodes", "block"))

    @property
    def n_inputs(self) -> int:
        """Columns of X (read-only: the size is the C program's)."""
        return self._dims[0]

    @property
    def n_outputs(self) -> int:
        """Columns of the outputs (read-only)."""
        return self._dims[1]

    @property
    def n_wrt(self) -> int:
        """Columns of the gradients (read-only)."""
        return self._dims[2]

    @property
    def nodes(self) -> int:
        return self._dims[4]

    @property
    def _chunk(self) -> int:
        """Rows the interpreter runs together in a call for summed gradients
        (a call of fewer rows costs about as much: tapead.jit's batch runs
        no more than this in one call)."""
        return _prog.prog_size(self._p, "chunk")

    @property
    def guards(self) -> int:
        return _prog.prog_size(self._p, "guards")

    @property
    def params(self) -> _F64Array:
        """The parameter values a call uses: a float64 array (a copy), in the
        order ``params=`` takes them: the parameters in wrt first, in wrt's
        order, then any other parameter leaves in the order they were created.

        Assign an array of the same shape to hold those values from now on,
        or None to read the parameters' Values again.  (Assigning while a call
        runs in another thread races with it: pass params= to calls instead.)"""
        np = _np()
        out: _F64Array = np.empty(self._dims[3])
        _prog.prog_param_values(self._p, out)
        return out

    @params.setter
    def params(self, values: Optional[ArrayLike]) -> None:
        if values is None:
            if not _prog.prog_follow(self._p):
                raise ValueError("this Program has no parameter Values to follow "
                                 "(it was unpickled): assign values instead")
            return
        _prog.prog_set_params(self._p, self._param_values(values))

    def _param_values(self, values: Any) -> Any:
        """values as the parameters' array; a wrong length says their order."""
        try:
            return _vector(values, self._dims[3], "params")
        except ValueError as e:
            flat = self._flat_form()
            pars = set(flat["par"].tolist())
            inwrt = len({k for k in flat["wrt"].tolist() if k in pars})
            raise ValueError(f"{e}: the {inwrt} wrt leaves that are parameters, in wrt's order, "
                             f"then {len(pars) - inwrt} other parameter leaves (neither inputs nor "
                             f"in wrt), in the order they were created") from None

    @property
    def follows_values(self) -> bool:
        """True while parameters are read from the tape (their nodes' .data) at each call."""
        return _prog.prog_size(self._p, "live") == 1

    def _threads(self, threads: Optional[int], B: int) -> int:
        if threads is None:
            return max(1, min(cores(), B * max(self._dims[4], 1) // _WORK_PER_THREAD))
        return threads_arg(threads)

    def _run(self, X: Any, seed: Optional[ArrayLike], grad: Optional[str],
             threads: Optional[int], params: Optional[ArrayLike],
             parts: bool = False, row0: int = 0,
             device: Optional[str] = None) -> Tuple[_F64Array, Optional[_F64Array]]:
        """The one call into C.  parts: return the block sums (Program.grad's
        summed gradients are their sum in order); row0: X's first row's
        number in error messages (a chunk of a larger X); device: "cuda"
        runs on a GPU instead (tapead/cuda.py)."""
        if device is not None and device != "cpu":
            # tapead.cuda, a layer above this one, through the package's lazy
            # submodules (CuPy is imported only when a GPU is asked for)
            import tapead
            Y, G = tapead.cuda.run(self, X, seed, grad, params, device, parts=parts, row0=row0)
            return Y, G
        a = self._run_args(X, seed, grad, params)
        _prog.prog_run(*a, self._threads(threads, a[3]), row0)
        Y, G, P = a[5], a[8], a[11]
        return Y, (P if parts else G)

    def _run_args(self, X: Any, seed: Optional[ArrayLike], grad: Optional[str],
                  params: Optional[ArrayLike]) -> "_prog.RunArgs":
        """A run's arguments for _prog.prog_run (less threads and row0), its
        results' arrays among them: Y, G (summed or per sample) and the block sums."""
        # (a call's Python is most of a small batch's time: each step here was measured)
        np = _np()
        nin, nout, nwrt, npar, _, block = self._dims
        X = _rows(X, nin)
        B = X.shape[0]
        Y = np.empty((B, nout))
        pv = None if params is None else self._param_values(params)
        G = P = sp = None
        if grad is not None:
            if seed is None:
                sp = np.ones(nout)
            else:
                sp = _c_array(seed, np.float64)
                _check_seed(sp.shape, B, nout)
            if grad == "per_sample":
                G = np.empty((B, nwrt))     # (C writes every entry: 0.0 where wrt is not reached)
            else:
                G = np.zeros(nwrt)
                P = np.empty((-(-B // block), nwrt))
        return (self._box, self._p, X, B, nin, Y, nout, sp, G, nwrt, grad == "per_sample", P, pv, npar)

    def __call__(self, X: ArrayLike, threads: Optional[int] = None,
                 params: Optional[ArrayLike] = None, device: Optional[str] = None) -> _F64Array:
        """Outputs for each row of X: (B, n_inputs) -> (B, n_outputs).

        device="cuda" (or "cuda:N") runs one GPU thread per row (docs/gpu.md;
        needs CuPy); X may then be a CuPy array, and the results stay on the
        GPU as CuPy arrays."""
        return self._run(X, None, None, threads, params, device=device)[0]

    def grad(self, X: ArrayLike, seed: Optional[ArrayLike] = None, per_sample: bool = False,
             threads: Optional[int] = None, params: Optional[ArrayLike] = None,
             device: Optional[str] = None) -> Tuple[_F64Array, _F64Array]:
        """(outputs, gradients of sum(seed * outputs) w.r.t. wrt).

        seed: None (all ones), shape (n_outputs,) or (B, n_outputs).
        Gradients are summed over rows, shape (n_wrt,), or per row, (B, n_wrt).
        device: as for a call ("cuda": on a GPU).
        """
        return self._run(X, seed, "per_sample" if per_sample else "sum", threads,  # type: ignore[return-value]  # (G is set when grad is)
                         params, device=device)

    def _flat_form(self) -> Dict[str, Any]:
        """The flat form (csrc/api/cdef.h: ta_flat_t): its sizes as ints, its
        arrays as numpy arrays of their lengths (pickling, tapead.codegen)."""
        np = _np()
        sizes = _prog.prog_flat_sizes(self._p, _SIZES)
        arrs = {name: np.zeros(max(_flat_len(size, sizes), 1), dtype=t) for name, t, size in _FLAT}
        _prog.prog_flat(self._p, sizes, arrs)
        out: Dict[str, Any] = dict(sizes)
        out.update((name, arrs[name][:_flat_len(size, sizes)]) for name, _, size in _FLAT)
        return out

    def __reduce__(self) -> Tuple[Any, Tuple[Dict[str, Any]]]:
        flat = self._flat_form()
        state: Dict[str, Any] = {"format": _FORMAT, "ops": tuple(OP)}
        for name, t, _ in _FLAT:
            state[name] = flat[name].astype("<" + t).tobytes()
        state.update((k, flat[k]) for k in _SIZES)
        state["params"] = self.params.astype("<f8").tobytes()
        mode = self._native.mode
        if mode is not None:       # (a shape by its name: its variant's tuning is this process's)
            state["native"] = getattr(mode, "name", mode)
        return (_load, (state,))

    @property
    def native(self) -> bool:
        """True while generated native code runs this Program (tapead.native);
        False while the interpreter does (``repr`` says why)."""
        return _prog.prog_size(self._p, "kernel") == 1

    def __repr__(self) -> str:
        return (f"Program(nodes={self.nodes}, inputs={self.n_inputs}, outputs={self.n_outputs}, "
                f"wrt={self.n_wrt}, params={self._dims[3]}, guards={self.guards}, "
                f"runs={self._native.describe(self.native)})")


def grad_many(work: List[Tuple[Program, Any, Optional[ArrayLike], int]],
              threads: int) -> List[Union[Tuple[_F64Array, _F64Array], Exception]]:
    """Program.grad(X, params=params) for each (program, X, params, row0) of
    work, run at once over at most `threads` threads in C (the GIL
    released), each run on one thread: each result is the bits that call
    gives alone.  A run that fails gives its exception in its place, naming
    its row as row0 + the row of X."""
    args = [(prog._run_args(X, None, "sum", params), row0) for prog, X, params, row0 in work]
    failed = _prog.prog_run_many(args, threads_arg(threads))
    return [e if e is not None else (a[5], a[8]) for (a, _), e in zip(args, failed)]


def _refused(outs: List[Value], ins: List[Value], wrts: List[Value]) -> str:
    """Which of compile's rules its arguments break (C refused them: TA_EARG),
    the first as C checks them."""
    from .engine import _node
    if not outs:
        return "outputs is empty: a Program needs at least one output Value"
    for name, vs in (("inputs", ins), ("wrt", wrts)):
        for j, v in enumerate(vs):
            if _node(v)[0] != OP["LEAF"]:
                return (f"{name}[{j}] is not a leaf Value: it was made by an operation ({v._op!r}); "
                        f"{name} must be leaves, made by Value(x)")
    first: Dict[int, int] = {}
    for j, v in enumerate(ins):
        if v._i in first:
            return (f"inputs[{first[v._i]}] and inputs[{j}] are the same Value: each input is a "
                    f"column of X, so inputs must be distinct")
        first[v._i] = j
    return ("outputs must be non-empty; inputs and wrt must be leaf Values (made by Value(x), "
            "not by an operation), inputs distinct")


def _native_ok(native: Any) -> bool:
    """native is a valid native= argument."""
    if native is None or native is True or native is False:
        return True
    from .codegen import SHAPES, Shape
    return isinstance(native, Shape) or isinstance(native, str) and native in SHAPES


def compile(outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
            wrt: Union[Value, Iterable[Value]] = (), native: Union[None, bool, str] = None) -> Program:
    """Copy the graph reaching outputs into a Program fed by the input leaves.

    native: True runs it with generated C code (tapead.native), built now
    with the C compiler, or found in the kernel cache (CompilerError, a
    RuntimeError, if it cannot be built), in the kernel shape chosen for its
    size (or, where none is faster, by the interpreter, as repr says), or in
    the one named ("lanes2", "rows", "split": tapead.codegen); False and
    None (the default) with the interpreter, never slower, first call
    included (generated code pays for small programs over many rows,
    networks and programs of parameters: docs/native.md).
    The results are the same bits either way; ``repr(prog)`` says which runs.

    >>> import numpy as np; from tapead import Value, compile
    >>> w = Value(2.0); x = Value(0.0); y = w * x + 1
    >>> p = compile([y], [x], wrt=[w]); p.grad(np.array([[1.0], [3.0]]))[1]
    array([4.])
    """
    return Program(outputs, inputs, wrt, native)
