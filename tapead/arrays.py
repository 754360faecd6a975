"""numpy interop: many leaves from an array, and data or grads back out, in one C call each.

>>> import numpy as np, tapead
>>> xs = tapead.values(np.array([1.0, 2.0, 3.0]))
>>> s = sum(x * x for x in xs); s.backward()
>>> tapead.grads(xs)
array([2., 4., 6.])
"""
import numpy as np

from . import _core
from .engine import Value, handles

_ffi, _lib = _core.ffi, _core.lib


def values(arr):
    """A list of new leaf Values holding the entries of `arr` (flattened, as float64)."""
    a = np.ascontiguousarray(arr, dtype=np.float64).ravel()
    ids = np.empty(a.size, dtype=np.int64)
    n = _lib.ta_leaves(_ffi.from_buffer("double[]", a), a.size, _ffi.from_buffer("int64_t[]", ids))
    if n < 0:
        raise _core.error(n)
    return handles(ids.tolist())


def _gather(vals, what):
    vals = list(vals)
    for v in vals:
        if not isinstance(v, Value):
            raise TypeError(f"expected Values, not {type(v).__name__}")
    ids = np.fromiter((v._i for v in vals), dtype=np.int64, count=len(vals))
    out = np.empty(len(vals), dtype=np.float64)
    _core.check(_lib.ta_gather(_ffi.from_buffer("int64_t[]", ids), len(vals), what,
                               _ffi.from_buffer("double[]", out)))
    return out


def data(vals):
    """The .data of each Value as a float64 array (one C call)."""
    return _gather(vals, 0)


def grads(vals):
    """The .grad of each Value as a float64 array (one C call)."""
    return _gather(vals, 1)
