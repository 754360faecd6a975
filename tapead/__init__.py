"""tapead: micrograd's API, recorded on a C tape and differentiated in C.

    >>> from tapead import Value
    >>> x = Value(-4.0); y = (x * x + x).relu()
    >>> y.backward(); (y.data, x.grad)
    (12.0, -7.0)
"""
from ._core import TapeadError, TapeError, set_limit
from ._core import stats as tape_stats
from .engine import Value, maximum, minimum, collect
from .higher import grad, hvp, hessian, jacobian

__all__ = ["Value", "maximum", "minimum", "tape_stats", "collect", "set_limit",
           "TapeadError", "TapeError", "grad", "hvp", "hessian", "jacobian"]
__version__ = "0.1.0"
