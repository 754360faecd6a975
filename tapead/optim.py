"""Optimizers whose step() and zero_grad() are one C call over all parameters.

>>> from tapead import Value
>>> from tapead.optim import SGD
>>> w = Value(1.0); opt = SGD([w], lr=0.1)
>>> (w * w).backward(); opt.step(); w.data
0.8

The parameters are fixed when the optimizer is made: C gets their ids and
one state slot each (momentum, Adam's moments) in arrays of that size, so
`params` is a tuple and its size `n` is read-only.  Hyperparameters are
checked where they are set (`opt.lr` may change between steps).  An
optimizer pickles and copies with its state (a checkpoint), its
parameters as detached leaves, shared with the model's when both are
pickled or copied together.

The optimizer steps the Value objects it was given, as torch.optim steps
the tensors it was given whatever their .data becomes: a parameter that
p.__init__(x) moves to a new node (re-initialising a model's weights, say)
is stepped and zeroed there from the next call on, with its state
(momentum, moments) kept, because that Value is what the model reads and
what the user handed over.  (Stepping the old node would leave the Value
untrained without a word, and an error would make a supported way of
resetting a Value unusable while an optimizer exists.)  C holds the nodes
it steps, so a step never writes another Value, and the ids are taken
again only when some watched Value has moved (one C call per step
compares a count: tapead/_c/holds.py, HeldIds).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, NoReturn, Optional, SupportsFloat, Tuple

from ._c import bulk as _bulk, doubles
from ._c.holds import HeldIds
from .engine import Value, _real, node_ids



class Params(Tuple[Value, ...]):
    """An optimizer's parameters: a tuple, since C holds their ids and per-parameter state."""
    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("an optimizer's parameters are fixed when it is made (C holds their ids "
                        "and per-parameter state): make a new optimizer for other parameters")

    append = extend = insert = remove = pop = clear = __iadd__ = __imul__ = _refuse


class _Hyper:
    """A float hyperparameter, checked whenever it is set: finite, in [lo, hi)."""

    def __init__(self, lo: float = 0.0, hi: float = math.inf) -> None:
        self.lo, self.hi = lo, hi

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        return self if obj is None else getattr(obj, self.slot)

    def __set__(self, obj: Any, value: SupportsFloat) -> None:
        setattr(obj, self.slot, _check_hyper(self.name, value, self.lo, self.hi))


def _check_hyper(name: str, value: SupportsFloat, lo: float, hi: float) -> float:
    try:
        x = _real(value)
    except TypeError:
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}") from None
    if not (lo <= x < hi):
        rng = f"in [{lo:g}, {hi:g})" if hi != math.inf else f">= {lo:g} and finite"
        raise ValueError(f"{name} must be {rng}, not {x!r}")
    return x


class Optimizer:
    """Holds the parameters (keeping them alive) and their nodes' ids as a C array (HeldIds)."""
    lr = _Hyper()
    _state: Tuple[str, ...] = ()   # names of per-parameter C arrays (double[n]) to checkpoint

    def __init__(self, params: Iterable[Value], lr: SupportsFloat) -> None:
        vals = node_ids(params, "optimizer parameters")[0]
        seen: Dict[int, int] = {}
        for k, p in enumerate(vals):
            if seen.setdefault(id(p), k) != k:
                raise ValueError(f"optimizer parameters must be distinct: parameter {k} is "
                                 f"parameter {seen[id(p)]} again (it would be stepped twice)")
        self._params = Params(vals)
        self._nodes = HeldIds(self._params)
        self.lr = lr

    @property
    def params(self) -> Params:
        """The parameters, in the order given (fixed: see Params)."""
        return self._params

    @property
    def n(self) -> int:
        """How many parameters there are (the size of every C array; read-only)."""
        return len(self._params)

    def _buffer(self) -> Any:
        return doubles(self.n)

    def zero_grad(self) -> None:
        """Set every parameter's grad to 0 (one C call)."""
        _bulk.fill_adj(self._nodes.current(), self.n)

    # ------------------------------------------------ pickle, copy (checkpoints)
    def __getstate__(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "_nodes" and k not in self._state}
        for k in self._state:
            state[k] = list(getattr(self, k)[0:self.n])
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update({k: v for k, v in state.items() if k not in self._state})
        self._nodes = HeldIds(self._params)
        for k in self._state:
            buf = self._buffer()
            buf[0:self.n] = state[k]
            setattr(self, k, buf)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n} parameters, lr={self.lr!r})"


class SGD(Optimizer):
    """p -= lr * (grad + weight_decay * p), with optional momentum (PyTorch's rule)."""
    momentum = _Hyper()
    weight_decay = _Hyper()
    _state = ("_buf",)

    def __init__(self, params: Iterable[Value], lr: SupportsFloat, momentum: SupportsFloat = 0.0,
                 weight_decay: SupportsFloat = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = momentum
        self.weight_decay = weight_decay
        self._buf = self._buffer()
        self._t = 0

    def step(self) -> None:
        """One update of every parameter from its .grad (one C call)."""
        _bulk.sgd_step(self._nodes.current(), self.n, self.lr, self.momentum, self.weight_decay, self._buf,
                       self._t == 0)
        self._t += 1


class Adam(Optimizer):
    """Adam with bias correction and L2 weight decay (torch.optim.Adam's rule).

    Its arithmetic is microgpt's Adam loop, operation for operation, so a
    microgpt port that keeps betas, eps and its learning-rate schedule gets
    the same parameters to the bit::

        m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g**2
        p -= lr * (m / (1 - b1**t)) / ((v / (1 - b2**t))**0.5 + eps)

    (g**2 as this interpreter's float ** computes it: libm's pow on
    CPython, g*g on PyPy.  PyTorch's spelling of the same rule rounds
    differently in the last bits.)  Unlike microgpt's loop, step() leaves the gradients alone: call
    opt.zero_grad() where microgpt sets p.grad = 0.  A schedule sets opt.lr
    before each step:

    >>> from tapead import Value
    >>> w = Value(1.0); opt = Adam([w], lr=0.1, betas=(0.85, 0.99))
    >>> for step in range(2):
    ...     opt.zero_grad(); (w * w).backward()
    ...     opt.lr = 0.1 * (1 - step / 2); opt.step()
    >>> round(w.data, 4)
    0.8503
    """
    eps = _Hyper()
    weight_decay = _Hyper()
    _state = ("_m", "_v")

    def __init__(self, params: Iterable[Value], lr: SupportsFloat = 1e-3,
                 betas: Tuple[SupportsFloat, SupportsFloat] = (0.9, 0.999), eps: SupportsFloat = 1e-8,
                 weight_decay: SupportsFloat = 0.0) -> None:
        super().__init__(params, lr)
        self.betas = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self._m = self._buffer()
        self._v = self._buffer()
        self._t = 0

    @property
    def betas(self) -> Tuple[float, float]:
        """(beta1, beta2), each in [0, 1): beta1 = 1 would divide by 1 - beta1**t = 0."""
        return self._betas

    @betas.setter
    def betas(self, betas: Tuple[SupportsFloat, SupportsFloat]) -> None:
        try:
            b = list(betas)
        except TypeError:
            raise TypeError(f"betas must be a pair of numbers, not {type(betas).__name__}") from None
        if len(b) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), not {len(b)} numbers")
        self._betas = (_check_hyper("betas[0]", b[0], 0.0, 1.0),
                       _check_hyper("betas[1]", b[1], 0.0, 1.0))

    def step(self) -> None:
        """One update of every parameter from its .grad (one C call)."""
        b1, b2 = self.betas
        _bulk.adam_step(self._nodes.current(), self.n, self.lr, b1, b2, self.eps, self.weight_decay,
                        self._t + 1, self._m, self._v)
        self._t += 1

