"""Replay: the recorded tape as a program (see csrc/replay.c).

- ``v.recompute()`` re-evaluates, in one C sweep, every node v depends on
  from the current ``.data`` of its leaves, in place; ``backward()`` then
  gives gradients at the new point.  Record once, then per step: recompute,
  zero_grad, backward, update.
- Comparisons of Values (``<``, ``<=``, ``>``, ``>=``) return a bool and are
  recorded as guards; a recompute (or a Program run) whose guards flip raises
  GuardError and leaves every value as it was.  A recompute from root (and
  compile) checks every live guard on nodes created no later than root: the
  comparisons that could have steered root's recording.  That is
  conservative: an unrelated earlier comparison that also flips raises too
  (``clear_guards()`` forgets them all).  Guards die with their nodes.
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

from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Optional, Tuple, Union

if TYPE_CHECKING:
    import numpy
    import numpy.typing as npt
    from numpy.typing import ArrayLike
    _F64Array = npt.NDArray[numpy.float64]

from . import _core
from ._core import GuardError, error, ffi, guard_error, lib
from .engine import Value, node_ids

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
    """Forget every recorded comparison of this thread's tape.

    >>> import tapead
    >>> x = tapead.Value(1.0); x > 0
    True
    >>> tapead.clear_guards(); tapead.guard_count()
    0
    """
    _core.check(lib.ta_guard_clear())


def guard_count() -> int:
    """Number of guards this thread's tape holds (they die with their nodes).

    >>> import tapead
    >>> x = tapead.Value(1.0); n = tapead.guard_count()
    >>> x < 2.0, tapead.guard_count() - n
    (True, 1)
    """
    return lib.ta_guard_count()


# -------------------------------------------------------------- programs
def _np() -> ModuleType:
    import numpy  # only Programs need numpy; the rest of tapead does not
    return numpy


def _rows(X: Any, n: int) -> Any:
    """X as a C-contiguous float64 (B, n) array (copied only if it is not one)."""
    np = _np()
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != n:
        raise ValueError(f"X must be a 2-d array of shape (B, {n}), not {X.shape}")
    return X


def _ptr(a: _F64Array) -> Any:
    return ffi.cast("double *", a.ctypes.data)


class Program:
    """A recorded graph copied out of the tape, run for a batch of rows in C.

    Made by tapead.compile.  Leaves listed as inputs take their values from
    the columns of X; every other leaf (the parameters) is read from its
    Value's current .data at each call, so training updates are seen.

    >>> import numpy as np, tapead
    >>> w = tapead.Value(2.0); x = tapead.Value(0.0); y = w * x + 1
    >>> p = tapead.compile(y, [x], wrt=[w]); isinstance(p, tapead.Program)
    True
    >>> p(np.array([[1.0], [3.0]]))
    array([[3.],
           [7.]])
    >>> w.data = 0.5; p(np.array([[4.0]]))
    array([[3.]])
    """

    def __init__(self, outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
                 wrt: Union[Value, Iterable[Value]] = ()) -> None:
        outs, oid = node_ids(outputs, "outputs")
        ins, iid = node_ids(inputs, "inputs")
        wrts, wid = node_ids(wrt, "wrt")
        p = ffi.new("ta_prog **")
        st = lib.ta_prog_new(oid, len(outs), iid, len(ins), wid, len(wrts), p)
        if st == lib.TA_EARG:
            raise ValueError("compile: outputs must be non-empty; inputs and wrt must be leaf "
                             "Values (made by Value(x), not by an operation), inputs distinct")
        if st:
            raise error(st)
        self._p = ffi.gc(p[0], lib.ta_prog_free)
        self.n_inputs, self.n_outputs, self.n_wrt = len(ins), len(outs), len(wrts)
        npar = lib.ta_prog_size(self._p, 1)
        pid = ffi.new("int64_t[]", max(npar, 1))
        lib.ta_prog_params(self._p, pid)
        from .engine import held
        self._params = held([pid[k] for k in range(npar)])  # keeps their segments alive

    @property
    def nodes(self) -> int:
        return lib.ta_prog_size(self._p, 0)

    @property
    def guards(self) -> int:
        return lib.ta_prog_size(self._p, 2)

    def _run(self, X: Any, seed: Optional[ArrayLike],
             grad: Optional[str]) -> Tuple[_F64Array, Optional[_F64Array]]:
        np = _np()
        X = _rows(X, self.n_inputs)
        B = X.shape[0]
        Y = np.empty((B, self.n_outputs))
        seedmode, G, sp = 0, None, None
        if grad is not None:
            if grad not in ("sum", "per_sample"):
                raise ValueError("grad must be 'sum' or 'per_sample'")
            if seed is None:
                sp = np.ones(self.n_outputs)
            else:
                sp = np.asarray(seed, dtype=np.float64)
                if sp.shape not in ((self.n_outputs,), (B, self.n_outputs)):
                    raise ValueError(f"seed must have shape ({self.n_outputs},) or "
                                     f"({B}, {self.n_outputs}), not {sp.shape}")
                sp = np.ascontiguousarray(sp)
            seedmode = 1 if sp.ndim == 1 else 2
            G = np.zeros((B, self.n_wrt) if grad == "per_sample" else (self.n_wrt,))
        row = ffi.new("uint64_t *")
        st = lib.ta_prog_run(self._p, _ptr(X), B, _ptr(Y), _ptr(sp) if sp is not None else ffi.NULL,
                             seedmode, _ptr(G) if G is not None else ffi.NULL,
                             grad == "per_sample", row)
        if st == lib.TA_EGUARD:
            k, o = ffi.new("int *"), ffi.new("int *")
            x, y = ffi.new("double *"), ffi.new("double *")
            lib.ta_prog_failed_guard(self._p, k, o, x, y)
            raise guard_error(k[0], o[0], x[0], y[0], f" at row {row[0]}")
        if st:
            e = error(st)
            e.args = (f"{e.args[0]} (at row {row[0]})",) if e.args else e.args
            raise e
        return Y, G

    def __call__(self, X: ArrayLike) -> _F64Array:
        """Outputs for each row of X: (B, n_inputs) -> (B, n_outputs)."""
        return self._run(X, None, None)[0]

    def grad(self, X: ArrayLike, seed: Optional[ArrayLike] = None,
             per_sample: bool = False) -> Tuple[_F64Array, _F64Array]:
        """(outputs, gradients of sum(seed * outputs) w.r.t. wrt).

        seed: None (all ones), shape (n_outputs,) or (B, n_outputs).
        Gradients are summed over rows, shape (n_wrt,), or per row, (B, n_wrt).
        """
        return self._run(X, seed, "per_sample" if per_sample else "sum")  # type: ignore[return-value]  # (G is set when grad is)

    def __repr__(self) -> str:
        return (f"Program(nodes={self.nodes}, inputs={self.n_inputs}, outputs={self.n_outputs}, "
                f"wrt={self.n_wrt}, params={len(self._params)}, guards={self.guards})")


def compile(outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
            wrt: Union[Value, Iterable[Value]] = ()) -> Program:
    """Copy the graph reaching outputs into a Program fed by the input leaves.

    >>> import numpy as np; from tapead import Value, compile
    >>> w = Value(2.0); x = Value(0.0); y = w * x + 1
    >>> p = compile([y], [x], wrt=[w]); p.grad(np.array([[1.0], [3.0]]))[1]
    array([4.])
    """
    return Program(outputs, inputs, wrt)
