"""Programs on Dask: a batch of rows chunked across threads, processes or a cluster.

A compiled Program is a pure function of (program, parameters, rows), so
each chunk of rows runs wherever Dask schedules it; the Program travels by
pickle (its flat program, guards and parameter values).  Parameters are
read once, in the calling thread, when the graph is built (``prog.params``,
or ``params=``), so every chunk uses the same values.  Each chunk runs on
one native thread (Dask supplies the parallelism).

Gradients summed over rows: each chunk returns the sums of its blocks of
1024 rows, and one final task adds all blocks in order, as a local
``prog.grad`` does.  When every chunk but the last is a multiple of 1024
rows the blocks are the local ones and the result is the same bits;
otherwise it agrees to rounding (about 1e-15 relative).

An error (a domain error, a flipped guard) names its row of X; with
several failing chunks, the one Dask meets first.

``device="cuda"`` runs each chunk on the worker's GPU (docs/gpu.md): the
chunk's summed gradients are then one row of sums, added in chunk order.

Needs Dask: ``pip install "dask[array,distributed]"`` (in a clone of
tapead, the extra ``pip install -e ".[dask]"``); without it, ``import
tapead.dask`` raises an ImportError saying so.  ``import tapead`` does not
import Dask.

    >>> import numpy as np, dask.array as da, tapead, tapead.dask
    >>> w = tapead.Value(2.0); x = tapead.Value(0.0)
    >>> prog = tapead.compile(w * x + 1, [x], wrt=[w])
    >>> X = da.from_array(np.arange(4.0).reshape(4, 1), chunks=(2, 1))
    >>> Y, G = tapead.dask.grad(prog, X)
    >>> Y.compute().ravel().tolist(), G.compute().tolist()
    ([1.0, 3.0, 5.0, 7.0], [6.0])
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

try:
    import dask
    import dask.array as da
except ImportError as _e:
    from ._install import needs
    raise needs("dask", "tapead.dask") from _e
import numpy as np

from .replay import Program, _vector

__all__ = ["grad", "evaluate"]


def _check(prog: Any, X: Any, params: Any) -> Tuple[Any, Any]:
    """(X with whole rows per chunk, the parameter values every chunk uses)."""
    if not isinstance(prog, Program):
        raise TypeError(f"prog must be a tapead Program, not {type(prog).__name__}")
    if not isinstance(X, da.Array):
        X = da.asarray(X)
    if X.ndim != 2 or X.shape[1] != prog.n_inputs:
        raise ValueError(f"X must be a 2-d Dask array of shape (B, {prog.n_inputs}), not {X.shape}")
    X = X.astype(np.float64).rechunk({1: -1})
    pv = prog.params if params is None else _vector(params, len(prog.params), "params")
    return X, pv


def _outputs(X: Any, prog: Program, params: Any, device: Optional[str] = None,
             block_info: Any = None) -> Any:
    row0 = block_info[0]["array-location"][0][0] if isinstance(block_info, dict) else 0
    return prog._run(X, None, None, 1, params, row0=row0, device=device)[0]


def evaluate(prog: Program, X: Any, params: Optional[Any] = None,
             device: Optional[str] = None) -> Any:
    """prog(X) chunk by chunk: a Dask array (B, n_outputs) chunked by X's rows.
    device: None (a CPU thread per chunk) or "cuda" (the worker's GPU)."""
    X, pv = _check(prog, X, params)
    p = dask.delayed(prog, pure=True)
    return X.map_blocks(_outputs, p, pv, device, chunks=(X.chunks[0], (prog.n_outputs,)),
                        dtype=np.float64)


def _chunk(X: Any, prog: Program, seed: Any, per_sample: bool, params: Any,
           row0: int, device: Optional[str] = None) -> Tuple[Any, Any]:
    """(outputs, per-sample gradients or block sums) of one chunk, on one
    thread (or the worker's GPU)."""
    return prog._run(X, seed, "per_sample" if per_sample else "sum", 1, params,
                     parts=not per_sample, row0=row0, device=device)


def _add_blocks(parts: List[Any], nwrt: int) -> Any:
    """Block sums added in block order, as Program.grad adds them in C."""
    g = np.zeros(nwrt)
    for p in parts:
        for row in p:
            g += row
    return g


def grad(prog: Program, X: Any, seed: Optional[Any] = None, per_sample: bool = False,
         params: Optional[Any] = None, device: Optional[str] = None) -> Tuple[Any, Any]:
    """(outputs, gradients) of prog over the rows of the Dask array X, as Dask arrays.

    Outputs are (B, n_outputs), chunked as X's rows.  Gradients of
    sum(seed * outputs) w.r.t. wrt: per sample (B, n_wrt), or summed over
    all rows (n_wrt,).  seed: None (ones), (n_outputs,), or (B, n_outputs)
    (numpy or Dask).  params: values for the Program's parameters (default:
    prog.params, read now).  device: None (CPU) or "cuda" (each worker's GPU)."""
    X, pv = _check(prog, X, params)
    nout, nwrt = prog.n_outputs, prog.n_wrt
    rows = X.chunks[0]
    seeds: List[Any]
    if seed is None:
        seeds = [np.ones(nout)] * len(rows)
    elif np.ndim(seed) == 1:
        seeds = [_vector(seed, nout, "seed")] * len(rows)
    else:
        S = seed if isinstance(seed, da.Array) else da.asarray(np.asarray(seed, dtype=np.float64))
        if S.shape != (X.shape[0], nout):
            raise ValueError(f"seed must have shape ({nout},) or ({X.shape[0]}, {nout}), "
                             f"not {S.shape}")
        seeds = list(S.astype(np.float64).rechunk((rows, (nout,))).to_delayed().ravel())
    p = dask.delayed(prog, pure=True)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).tolist()
    parts = [dask.delayed(_chunk, nout=2, pure=True)(x, p, s, per_sample, pv, r0, device)
             for x, s, r0 in zip(X.to_delayed().ravel(), seeds, starts)]
    Y = da.concatenate([da.from_delayed(d[0], shape=(n, nout), dtype=np.float64)
                        for d, n in zip(parts, rows)])
    if per_sample:
        G = da.concatenate([da.from_delayed(d[1], shape=(n, nwrt), dtype=np.float64)
                            for d, n in zip(parts, rows)])
    else:
        total = dask.delayed(_add_blocks, pure=True)([d[1] for d in parts], nwrt)
        G = da.from_delayed(total, shape=(nwrt,), dtype=np.float64)
    return Y, G
