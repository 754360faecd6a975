"""Higher-order derivatives: grad (optionally recorded, to any order), hvp, hessian, jacobian.

Every function here is one C call (csrc/diff/higher.c); none of them touches
any Value's .grad: they return their results instead of accumulating.

    >>> from tapead import Value, grad, hessian
    >>> x, y = Value(1.0), Value(2.0)
    >>> f = x * x * y
    >>> grad(f, [x, y])
    [4.0, 1.0]
    >>> hessian(f, [x, y]).tolist()
    [[4.0, 2.0], [2.0, 0.0]]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Literal, SupportsFloat, Union, overload

if TYPE_CHECKING:
    import numpy
    import numpy.typing as npt
    from numpy.typing import ArrayLike
    _F64Array = npt.NDArray[numpy.float64]

from ._c import higher as _ch
from ._c.holds import held_list
from .arrays import floats
from .engine import Value, handles, ids_of, values_of
from .replay import _np


_Weights = Union[SupportsFloat, Iterable[SupportsFloat], None]


# What a type checker sees: floats, or Values with create_graph=True; one
# result for a single Value as inputs, else a list.
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Value, grad_outputs: _Weights = None,
         create_graph: Literal[False] = False) -> float: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Value, grad_outputs: _Weights = None, *,
         create_graph: Literal[True]) -> Value: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Value, grad_outputs: _Weights,
         create_graph: Literal[True]) -> Value: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Iterable[Value], grad_outputs: _Weights = None,
         create_graph: Literal[False] = False) -> List[float]: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Iterable[Value], grad_outputs: _Weights = None, *,
         create_graph: Literal[True]) -> List[Value]: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Iterable[Value], grad_outputs: _Weights,
         create_graph: Literal[True]) -> List[Value]: ...
@overload
def grad(outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
         grad_outputs: _Weights = None,
         create_graph: bool = False) -> Union[float, Value, List[float], List[Value]]: ...


def grad(outputs: Union[Value, Iterable[Value]], inputs: Union[Value, Iterable[Value]],
         grad_outputs: _Weights = None,
         create_graph: bool = False) -> Union[float, Value, List[float], List[Value]]:
    """d(sum_k w_k outputs_k)/d inputs_j, w = grad_outputs (default: all 1).

    Returns a list of floats (one per input), or of Values recorded on the
    tape when create_graph=True, which can be differentiated again.  A single
    Value as `inputs` gives a single result.  Leaves' .grad is not changed.

    >>> from tapead import Value
    >>> x = Value(3.0); y = x ** 3
    >>> (dy,) = grad(y, [x], create_graph=True); dy.data
    27.0
    >>> grad(dy, [x])
    [18.0]
    """
    single = isinstance(inputs, Value)
    outs, ins = values_of(outputs, "outputs"), values_of(inputs, "inputs")
    nout, nin = len(outs), len(ins)
    w = None
    if grad_outputs is not None:
        ws = floats(grad_outputs, "grad(): grad_outputs").ravel().tolist()  # type: ignore[arg-type]
        if len(ws) != nout:
            raise ValueError(f"grad_outputs has {len(ws)} weights for {nout} outputs")
        w = ws
    res: List[Any]
    if create_graph:
        h = held_list(nin)
        _ch.grad(ids_of(outs), w, nout, ids_of(ins), nin, h)
        res = handles(h, nin)
    else:
        res = _ch.grad(ids_of(outs), w, nout, ids_of(ins), nin)
    return res[0] if single else res


def hvp(output: Value, inputs: Iterable[Value], v: ArrayLike) -> _F64Array:
    """The Hessian of output w.r.t. inputs times v, as a numpy array (forward over reverse, in C).

    It is the derivative of the gradient along v: an input v does not move,
    or a node whose tangent is exactly 0 (x ** (a - b) with v_a = v_b),
    contributes nothing, even where its partials are nan or inf.

    >>> from tapead import Value, hvp
    >>> x, y = Value(1.0), Value(2.0)
    >>> hvp(x * x * y, [x, y], [1.0, 0.0])
    array([4., 2.])
    """
    np = _np()
    out = values_of(output, "output")
    if len(out) != 1:
        raise ValueError("hvp needs one scalar output")
    ins = values_of(inputs, "inputs")
    nin = len(ins)
    vv = floats(v, "hvp(): v").reshape(-1)
    if vv.size != nin:
        raise ValueError(f"v has {vv.size} entries for {nin} inputs")
    hv: _F64Array = np.zeros(nin)
    _ch.hvp(out[0]._i, ids_of(ins), nin, vv, hv)
    return hv


def hessian(output: Value, inputs: Iterable[Value]) -> _F64Array:
    """The n x n Hessian of output w.r.t. inputs as a numpy array: the gradient recorded once, then one sweep per row.

    Column k is hvp(output, inputs, e_k), so H @ v is hvp(output, inputs, v)
    wherever the entries it sums are finite; H is exactly symmetric wherever
    both of a pair of entries are.  (An entry is nan where the derivative is
    undefined, e.g. d/dn of (-1) ** n: H @ v is then nan, while hvp along a v
    that keeps n fixed is defined.  The two orders of differentiation may
    then disagree: x * (-1) ** (y - y) has (x, y) entry 0, the tangent of
    y - y being exactly 0, and (y, x) entry nan; each stays its own column's.)

    >>> from tapead import Value, hessian
    >>> x, y = Value(1.0), Value(2.0)
    >>> hessian(x * x * y + y * y, [x, y]).tolist()
    [[4.0, 2.0], [2.0, 2.0]]
    """
    np = _np()
    out = values_of(output, "output")
    if len(out) != 1:
        raise ValueError("hessian needs one scalar output")
    ins = values_of(inputs, "inputs")
    nin = len(ins)
    H: _F64Array = np.zeros((nin, nin))
    _ch.hessian(out[0]._i, ids_of(ins), nin, H)
    return H


def jacobian(outputs: Union[Value, Iterable[Value]], inputs: Iterable[Value]) -> _F64Array:
    """The m x n Jacobian d outputs_i / d inputs_j as a numpy array: one reverse sweep per output.

    >>> from tapead import Value, jacobian
    >>> x, y = Value(2.0), Value(3.0)
    >>> jacobian([x * y, x + y], [x, y])
    array([[3., 2.],
           [1., 1.]])
    """
    np = _np()
    outs, ins = values_of(outputs, "outputs"), values_of(inputs, "inputs")
    nout, nin = len(outs), len(ins)
    J: _F64Array = np.zeros((nout, nin))
    _ch.jacobian(ids_of(outs), nout, ids_of(ins), nin, J)
    return J
