"""A function of numbers, recorded once per shape of its arguments and replayed in C.

``jit(fn, wrt)`` is tapead's ``jax.jit``: ``fn`` takes numbers, or lists
(nested) of numbers, and returns a Value or a list of Values.  The first
call with arguments of a new shape (the lengths of their lists) runs fn
once on Value leaves that stand for its numbers, recording its graph, and
compiles it (tapead.compile: the leaves are the Program's inputs, wrt its
gradients); every call, that one included, then runs the Program in C: its
outputs come back as floats, and d(sum of outputs)/d wrt is added to wrt's
``.grad``, as ``backward()`` would add it (so a training loop keeps
``opt.step(); opt.zero_grad()``).  ``batch`` runs many calls at once, over
every core.

What fn may do with its arguments is what a Program can replay: arithmetic
on them, and indexing by them through tapead.take (not Python's ``[]``,
which would freeze the index recorded).  A comparison of Values is a
guard: where it goes the other way on new arguments, the shape is
recorded again with them.  jit records with the thread's guards put aside
(a comparison made earlier cannot bind its Programs) and puts them back
after, as they were (fn's own comparisons bind its Programs only).  fn must
not read ``.data`` into its arithmetic where the value depends on the arguments
(recorded as a constant, it would not follow them): tapead.detach is the
value without its gradient.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Tuple

from ._c import bulk as _bulk
from ._c import program as _prog
from ._c.holds import HeldIds
from .engine import Value, _real, values_of
from .errors import GuardError

__all__ = ["jit", "Jit"]

Shape = Any        # a number: None; a list: a tuple of its items' shapes


_NUMBERS = frozenset((int, float))


def _plain(arg: Any) -> bool:
    """arg is a list or tuple of ints and floats only (the common case, taken without _real)."""
    return _NUMBERS.issuperset(map(type, arg))


def _shape(arg: Any, where: str) -> Shape:
    """The shape of one argument: None for a number, a tuple for a list."""
    if isinstance(arg, (list, tuple)):
        if _plain(arg):
            return (None,) * len(arg)
        return tuple(_shape(a, f"{where}[{i}]") for i, a in enumerate(arg))
    if isinstance(arg, Value):
        raise TypeError(f"tapead.jit: {where} is a Value: a jitted function takes numbers (its "
                        f"Programs' inputs); Values it reads (parameters) it reaches itself")
    try:
        _real(arg)
    except TypeError:
        raise TypeError(f"tapead.jit: {where} is {type(arg).__name__}: a jitted function takes numbers "
                        f"and lists of numbers") from None
    return None


def _flatten(arg: Any, out: List[float]) -> None:
    if isinstance(arg, (list, tuple)):
        if _plain(arg):
            out.extend(map(float, arg))
            return
        for a in arg:
            _flatten(a, out)
    else:
        out.append(_real(arg))


# what a run of many rows costs against a run of one (its interpreter's lanes
# take as long for 2 rows as for 4: about 2.2 one-row runs on the GPT example);
# the order batch starts runs in, costliest first, reads it
_MANY = 2.2


def _key(args: Tuple[Any, ...]) -> Tuple[Shape, List[float]]:
    """(the shape of args, their numbers in order as floats), in one pass for
    the common call, one list of ints and floats."""
    if len(args) == 1 and type(args[0]) in (list, tuple) and _plain(args[0]):
        return ((None,) * len(args[0]),), list(map(float, args[0]))
    shape = tuple(_shape(a, f"argument {i}") for i, a in enumerate(args))
    row: List[float] = []
    for a in args:
        _flatten(a, row)
    return shape, row


def _leaves(arg: Any, out: List[Value]) -> Any:
    """arg with each number a new leaf (appended to out)."""
    if isinstance(arg, (list, tuple)):
        return [_leaves(a, out) for a in arg]
    out.append(Value(_real(arg)))
    return out[-1]


class Jit:
    """fn recorded once per shape of its arguments and replayed (see tapead.jit)."""

    def __init__(self, fn: Callable[..., Any], wrt: Iterable[Value], native: Any = None) -> None:
        if not callable(fn):
            raise TypeError(f"tapead.jit: fn must be callable, not {type(fn).__name__}")
        self.fn = fn
        self.wrt = tuple(values_of(wrt, "wrt"))
        self.native = native
        self.programs: Dict[Shape, Any] = {}
        self.recordings = 0                 # how many times fn was recorded (shapes, and flipped guards)
        self._ids = HeldIds(self.wrt)
        self._outs: Dict[Shape, int] = {}   # shape -> how many outputs fn gave (1 and not a list: a float)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"tapead.jit({name}, wrt={len(self.wrt)} Values, {len(self.programs)} shapes recorded)"

    # -- recording
    def _record(self, shape: Shape, args: Tuple[Any, ...]) -> Any:
        from . import replay
        _prog.guard_apart()              # fn's comparisons, and only those, bind its Program
        try:
            leaves: List[Value] = []
            vals = [_leaves(a, leaves) for a in args]
            out = self.fn(*vals)
            single = isinstance(out, Value)
            outs = [out] if single else list(out) if isinstance(out, (list, tuple)) else []
            if not outs or not all(isinstance(v, Value) for v in outs):
                raise TypeError(f"tapead.jit: {getattr(self.fn, '__qualname__', 'fn')} must return a Value "
                                f"or a non-empty list of Values, not {type(out).__name__}")
            prog = replay.compile(outs, leaves, wrt=self.wrt, native=self.native)
        finally:
            _prog.guard_rejoin()         # the thread's guards as they were
        self.programs[shape] = prog
        self._outs[shape] = 0 if single else len(outs)
        self.recordings += 1
        return prog

    def _program(self, args: Tuple[Any, ...]) -> Tuple[Shape, Any, List[float]]:
        """(shape, its Program, recorded now if new, the row of args)"""
        shape, row = _key(args)
        prog = self.programs.get(shape)
        return shape, prog if prog is not None else self._record(shape, args), row

    # -- running
    def _add_grads(self, G: Any) -> None:
        """G added to wrt's .grad, in one C call."""
        if len(self.wrt):
            _bulk.add_grads(self._ids.current(), len(self.wrt), G)

    def _one(self, shape: Shape, args: Tuple[Any, ...], X: Any) -> Any:
        """(outputs, gradients) of one call, its row X: its shape's Program,
        recorded again with args where a comparison goes the other way."""
        try:
            return self.programs[shape].grad(X, threads=1)
        except GuardError:
            return self._record(shape, args).grad(X, threads=1)

    def _results(self, shape: Shape, Y: Any) -> List[Any]:
        """Each row of Y as a call returns it: a float (fn gave one Value) or a list."""
        rows: List[Any] = Y[:, 0].tolist() if self._outs[shape] == 0 else Y.tolist()
        return rows

    def __call__(self, *args: Any) -> Any:
        """fn(*args)'s outputs, as floats, its Program run in C; d(sum of
        outputs)/d wrt added to wrt's .grad."""
        import numpy as np
        shape, _, row = self._program(args)
        Y, G = self._one(shape, args, np.array([row], dtype=np.float64).reshape(1, len(row)))
        self._add_grads(G)
        return self._results(shape, Y)[0]

    def batch(self, calls: Iterable[Any], threads: Any = None) -> List[Any]:
        """The outputs of each call (a tuple of arguments, or one argument
        that is not a tuple), as __call__ gives them, run at once: the calls
        of one shape are the rows of its Program, run in runs of as many
        rows as its interpreter runs together (rows left over, if no more
        than half such a run, one row a run: its one-row path costs less
        than half a run of many), and the runs of every shape
        run side by side over `threads` threads (None: every core).  Their
        gradients, summed (each run's in a fixed order, tapead.Program; the
        runs of a shape in row order, the shapes in the order they first
        come: the same bits whatever the threads), are added to wrt's .grad."""
        import numpy as np
        from . import replay
        n = replay.cores() if threads is None else replay.threads_arg(threads)
        todo: List[Tuple[Any, ...]] = [tuple(c) if isinstance(c, tuple) else (c,) for c in calls]
        groups: Dict[Shape, Tuple[List[int], List[List[float]]]] = {}
        for i, args in enumerate(todo):
            shape, _, row = self._program(args)
            idx, rows = groups.setdefault(shape, ([], []))
            idx.append(i)
            rows.append(row)
        work: List[Tuple[Shape, List[int], Any]] = [
            (shape, idx, np.array(rows, dtype=np.float64).reshape(len(rows), -1))
            for shape, (idx, rows) in groups.items()]
        # each shape's rows in runs of its Program's chunk, all run side by side
        # in C, the costliest first; a shape's gradients are its runs' in order
        progs = [self.programs[shape] for shape, _, _ in work]
        runs: List[Tuple[Any, Any, int, float]] = []  # (Program, its rows of X, first row, -cost)
        first: List[int] = []                         # work[k]'s runs start at runs[first[k]]
        for prog, (_, idx, X) in zip(progs, work):
            c, nodes, m = prog._chunk, prog.nodes, len(idx)
            whole = m - m % c if m % c <= c // 2 else m
            first.append(len(runs))
            runs += [(prog, X[r:r + c], r, -_MANY * nodes) for r in range(0, whole, c)]
            runs += [(prog, X[r:r + 1], r, -nodes) for r in range(whole, m)]
        first.append(len(runs))
        order = sorted(range(len(runs)), key=lambda i: runs[i][3])
        ran: List[Any] = [None] * len(runs)
        for i, res in zip(order, replay.grad_many([(runs[i][0], runs[i][1], None, runs[i][2]) for i in order], n)):
            ran[i] = res
        done: List[Any] = []
        failed = None
        for k in range(len(work)):
            mine = ran[first[k]:first[k + 1]]
            bad = [res for res in mine if isinstance(res, Exception)]
            if bad:
                done.append(None)            # one at a time (a comparison differs), or raised below
                if failed is None and not any(isinstance(res, GuardError) for res in bad):
                    failed = bad[0]
                continue
            G = mine[0][1]
            for res in mine[1:]:
                G = G + res[1]
            done.append((mine[0][0] if len(mine) == 1 else np.concatenate([res[0] for res in mine]), G))
        if failed is not None:               # a call that fails, its shape's calls agreeing with the recording
            raise failed
        out: List[Any] = [None] * len(todo)
        total: Any = None                    # the summed gradients, an array once a group is done
        for (shape, idx, X), got in zip(work, done):
            if got is None:                  # some call's comparisons differ: one at a time
                Y = np.empty((len(idx), max(1, self._outs[shape])))
                G = np.zeros(len(self.wrt))
                for r, i in enumerate(idx):
                    y, g = self._one(shape, todo[i], X[r:r + 1])
                    Y[r], G = y[0], G + g
            else:
                Y, G = got
            for i, y in zip(idx, self._results(shape, Y)):
                out[i] = y
            total = G if total is None else total + G
        if total is not None:
            self._add_grads(total)
        return out



def jit(fn: Callable[..., Any], wrt: Iterable[Value], native: Any = None) -> Jit:
    """fn recorded once per shape of its arguments and replayed in C, its
    gradients w.r.t. wrt added to their .grad (tapead.tracing says how);
    native: as for tapead.compile.

    >>> import tapead
    >>> w = [tapead.Value(0.5), tapead.Value(-1.0), tapead.Value(2.0)]
    >>> def loss(xs):                      # xs: a list of numbers (Values while it records)
    ...     return sum((wi * x for wi, x in zip(w, xs)), 0.0) ** 2
    >>> step = tapead.jit(loss, wrt=w)
    >>> step([1.0, 2.0]), step([3.0, 1.0]), [round(v.grad, 6) for v in w]   # one recording, two replays
    (2.25, 0.25, [0.0, -5.0, 0.0])
    >>> len(step.programs)                 # one Program per shape: a list of length 2
    1
    """
    return Jit(fn, wrt, native)
