"""numpy interop: many leaves from an array, and data or grads back out, in one C call each.

>>> import numpy as np, tapead
>>> xs = tapead.values(np.array([1.0, 2.0, 3.0]))
>>> s = sum(x * x for x in xs); s.backward()
>>> tapead.grads(xs)
array([2., 4., 6.])
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List

from ._c import bulk as _bulk
from ._c.holds import held_list
from .engine import Value, handles, ids_of, node_ids, values_of

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from numpy.typing import ArrayLike


# numpy is imported on first use, not with tapead: `from tapead import Value`
# stays as quick to import as micrograd (numpy's import is ~170 ms and, with
# OpenBLAS, starts worker threads that spin on a core for a while).


def floats(arr: ArrayLike, who: str) -> npt.NDArray[np.float64]:
    """arr as a contiguous float64 array; TypeError for anything but real numbers
    (numpy would turn None into nan, a string of digits into a number)."""
    import numpy as np
    a = np.asarray(arr)
    if a.dtype.kind not in "biuf":
        what = type(arr).__name__ if a.dtype.kind == "O" and a.ndim == 0 else f"an array of {a.dtype}"
        raise TypeError(f"{who} needs real numbers (an array, list or scalar of them), not {what}")
    return np.ascontiguousarray(a, dtype=np.float64)


def values(arr: ArrayLike) -> List[Value]:
    """A list of new leaf Values holding the entries of `arr` (flattened, as float64).

    >>> import numpy as np, tapead
    >>> xs = tapead.values(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> len(xs), xs[3]
    (4, Value(data=4.0, grad=0.0))
    """
    import numpy as np
    a = floats(arr, "values()").ravel()
    h = held_list(a.size)
    _bulk.leaves(a, h)
    return handles(h, a.size)


def _gather(vals: Iterable[Value], what: int) -> npt.NDArray[np.float64]:
    import numpy as np
    vals, ids = node_ids(vals)
    out = np.empty(len(vals), dtype=np.float64)
    _bulk.gather(ids, len(vals), what, out)
    return out


def data(vals: Iterable[Value]) -> npt.NDArray[np.float64]:
    """The .data of each Value as a float64 array (one C call).

    >>> import tapead
    >>> tapead.data([tapead.Value(1.5), tapead.Value(2.0) * 2])
    array([1.5, 4. ])
    """
    return _gather(vals, 0)


def grads(vals: Iterable[Value]) -> npt.NDArray[np.float64]:
    """The .grad of each Value as a float64 array (one C call).

    >>> import tapead
    >>> x, y = tapead.Value(2.0), tapead.Value(3.0)
    >>> (x * y).backward(); tapead.grads([x, y])
    array([3., 2.])
    """
    return _gather(vals, 1)


def set_data(vals: Iterable[Value], arr: ArrayLike) -> None:
    """Set the .data of each Value from arr (same length), in one C call: all or nothing.

    >>> import tapead
    >>> xs = tapead.values([1.0, 2.0]); y = xs[0] * xs[1]
    >>> tapead.set_data(xs, [3.0, 4.0]); y.recompute(); (tapead.data(xs), y.data)
    (array([3., 4.]), 12.0)
    """
    vals = values_of(vals)
    a = floats(arr, "set_data()")
    if a.shape != (len(vals),):
        raise ValueError(f"set_data: need an array of shape ({len(vals)},), not {a.shape}")
    _bulk.scatter(ids_of(vals), len(vals), a)    # (the ids last: floats may run Python)
