"""tapead: micrograd's API, recorded on a C tape and differentiated in C.

    >>> from tapead import Value
    >>> x = Value(-4.0); y = (x * x + x).relu()
    >>> y.backward(); (y.data, x.grad)
    (12.0, -7.0)

`import tapead` loads only the core (the compiled module and Value); every
other public name, and the submodules nn and optim, load on first use
(module __getattr__), so a small script pays about what `import micrograd`
costs.
"""
from __future__ import annotations

from types import ModuleType

TYPE_CHECKING = False   # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any, List
    # What the type checker sees of the lazily imported names (_LAZY below),
    # so that each has its real type and a misspelt one is an error
    # (tests/test_typing.py checks every name of __all__).
    from . import cuda as cuda, nn as nn, optim as optim
    from .dots import dot as dot, linear as linear
    from .custom import precomputed as precomputed
    from .draw import draw_dot as draw_dot, to_dot as to_dot
    from .forward import jvp as jvp
    from .functions import (abs as abs, cos as cos, detach as detach, exp as exp, log as log,
                            log1p as log1p, relu as relu, sigmoid as sigmoid, sin as sin, sqrt as sqrt,
                            tanh as tanh)
    from .higher import grad as grad, hessian as hessian, hvp as hvp, jacobian as jacobian
    from .modes import detect_anomaly as detect_anomaly, no_grad as no_grad
    from .nodedata import get_label as get_label, set_label as set_label
    from .replay import (Program as Program, clear_guards as clear_guards, compile as compile,
                         guard_count as guard_count, recompute as recompute)
    from .arrays import data as data, grads as grads, set_data as set_data, values as values
    from .wengert import Wengert as Wengert, wengert as wengert
    from .tracing import jit as jit
    from .indexing import take as take
    __version__: str

from ._c.holds import set_limit
from ._opsurface import UNARY as _UNARY
from .errors import AnomalyError, GuardError, TapeadError, TapeError
from ._c.holds import stats as tape_stats
from .engine import Value, maximum, minimum, collect, FRONT as FRONT

__all__ = ["Value", "maximum", "minimum", "tape_stats", "collect", "set_limit",
           "no_grad", "detect_anomaly", "TapeadError", "TapeError", "AnomalyError",
           *(name for name, _ in _UNARY),   # the unary ops' functions (csrc/api/ops.def)
           "jvp", "wengert", "Wengert", "set_label", "get_label",
           "draw_dot", "to_dot", "values", "data", "grads",
           "GuardError", "recompute", "compile", "Program", "clear_guards", "guard_count",
           "set_data", "grad", "hvp", "hessian", "jacobian", "precomputed", "dot", "linear", "jit", "take"]

# public name -> the submodule that defines it, imported on first use
_LAZY = {**dict.fromkeys(("no_grad", "detect_anomaly"), "modes"),
         **dict.fromkeys((name for name, _ in _UNARY), "functions"),
         "jvp": "forward", "precomputed": "custom", "wengert": "wengert", "Wengert": "wengert",
         "set_label": "nodedata", "get_label": "nodedata", "draw_dot": "draw", "to_dot": "draw",
         **dict.fromkeys(("values", "data", "grads", "set_data"), "arrays"),
         **dict.fromkeys(("recompute", "compile", "Program", "clear_guards",
                          "guard_count"), "replay"),
         **dict.fromkeys(("grad", "hvp", "hessian", "jacobian"), "higher"),
         **dict.fromkeys(("dot", "linear"), "dots"),
         "jit": "tracing", "take": "indexing"}
_SUBMODULES = ("nn", "optim",   # tapead.nn.MLP after a bare `import tapead`, as before
               "cuda")          # device="cuda" (replay.py reaches it here: it is a layer above)


if not TYPE_CHECKING:   # seen by the type checker, it would make every misspelt name Any
    def __getattr__(name: str) -> Any:
        from importlib import import_module
        if name == "__version__":   # pyproject.toml's, through the installed metadata (read on first use)
            from importlib.metadata import PackageNotFoundError, version
            try:
                v = version(__name__)
            except PackageNotFoundError:   # run from a source tree that was never installed
                v = "0+unknown"
            globals()[name] = v
            return v
        if name in _SUBMODULES:
            return import_module(f"{__name__}.{name}")
        mod = _LAZY.get(name)
        if mod is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(f"{__name__}.{mod}"), name)
        globals()[name] = value
        return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


class _Package(ModuleType):
    """The package's module type: `tapead.wengert` stays the function.

    Importing the submodule tapead.wengert (directly, or through draw)
    binds the package attribute of that name to the module; with lazy
    imports that can happen after the function was bound, so the name is a
    property that always gives the function."""

    @property
    def wengert(self) -> Any:
        from .wengert import wengert
        return wengert

    @wengert.setter
    def wengert(self, _module: Any) -> None:
        pass


__import__("sys").modules[__name__].__class__ = _Package
del ModuleType, TYPE_CHECKING, annotations   # names this module used, not its API
