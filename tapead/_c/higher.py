"""Forward mode and higher order over a node's graph (csrc/diff/tangent.c,
csrc/diff/higher.c): a directional derivative, gradients (recorded or not),
Hessian-vector products, Hessians and Jacobians.
"""
from __future__ import annotations

TYPE_CHECKING = False                  # typing is not imported at run time: `import tapead` stays cheap
if TYPE_CHECKING:
    from typing import Any, List, Optional

from . import f64, ffi, lib
from .holds import within_limit
from .status import check


def jvp(out: int, n: int, ids: Any, ts: List[float]) -> float:
    """d node out along tangents ts of the n nodes ids."""
    r = ffi.new("double *")
    check(lib.ta_jvp(out, n, ids, ffi.new("double[]", ts or [0.0]), r))
    return r[0]  # type: ignore[no-any-return]  # (a cdata double: a float)


def grad(outs: Any, w: Optional[List[float]], nout: int, ins: Any, nin: int,
         h: Any = None) -> List[float]:
    """The gradients of sum_k w_k outs_k at the nin nodes ins (w None: all 1);
    with a held list h, recorded: their nodes' holds go into h (and [] is returned)."""
    wp = ffi.NULL if w is None else ffi.new("double[]", w or [0.0])
    if h is not None:
        check(within_limit(lib.ta_grad_graph, outs, wp, nout, ins, nin, h))
        return []
    g = ffi.new("double[]", max(nin, 1))
    check(lib.ta_grad(outs, wp, nout, ins, nin, g))
    return list(g[0:nin])


def hvp(out: int, ins: Any, nin: int, v: Any, hv: Any) -> None:
    """hv = the Hessian of node out at the nin nodes ins, times v (float64 arrays)."""
    check(lib.ta_hvp(out, ins, nin, f64(v), f64(hv)))


def hessian(out: int, ins: Any, nin: int, H: Any) -> None:
    check(lib.ta_hessian(out, ins, nin, f64(H)))


def jacobian(outs: Any, nout: int, ins: Any, nin: int, J: Any) -> None:
    check(lib.ta_jacobian(outs, nout, ins, nin, f64(J)))
