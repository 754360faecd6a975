"""tapead: micrograd's API, recorded on a C tape and differentiated in C.

    >>> from tapead import Value
    >>> x = Value(-4.0); y = (x * x + x).relu()
    >>> y.backward(); (y.data, x.grad)
    (12.0, -7.0)
"""
from ._core import AnomalyError, TapeadError, TapeError, set_limit
from .modes import detect_anomaly, no_grad
from ._core import stats as tape_stats
from .engine import Value, maximum, minimum, collect, FRONT as FRONT
from .custom import precomputed
from .functions import sin, cos, sqrt, abs, exp, log, tanh, relu, sigmoid
from .forward import jvp
from .wengert import wengert, Wengert, set_label, get_label
from .draw import draw_dot, to_dot
from .arrays import values, data, grads, set_data

__all__ = ["Value", "maximum", "minimum", "tape_stats", "collect", "set_limit",
           "no_grad", "detect_anomaly", "TapeadError", "TapeError", "AnomalyError",
           "sin", "cos", "sqrt", "abs", "exp", "log", "tanh", "relu", "sigmoid",
           "jvp", "wengert", "Wengert", "set_label", "get_label",
           "draw_dot", "to_dot", "values", "data", "grads",
           "GuardError", "recompute", "compile", "Program", "clear_guards", "guard_count",
           "set_data", "grad", "hvp", "hessian", "jacobian", "precomputed"]
from .replay import GuardError, recompute, compile, Program, clear_guards, guard_count
from .higher import grad, hvp, hessian, jacobian
from . import nn, optim  # tapead.nn.MLP, tapead.optim.SGD after a bare `import tapead`
__version__ = "0.1.0"
