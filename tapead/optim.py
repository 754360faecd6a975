"""Optimizers whose step() and zero_grad() are one C call over all parameters.

>>> from tapead import Value
>>> from tapead.optim import SGD
>>> w = Value(1.0); opt = SGD([w], lr=0.1)
>>> (w * w).backward(); opt.step(); w.data
0.8
"""
from __future__ import annotations

from typing import Iterable, SupportsFloat, Tuple

from . import _core
from .engine import Value, node_ids

_ffi, _lib = _core.ffi, _core.lib


class Optimizer:
    """Holds the parameters (keeping them alive) and their ids as a C array."""

    def __init__(self, params: Iterable[Value], lr: SupportsFloat) -> None:
        self.params, self._ids = node_ids(params, "optimizer parameters")
        self.n = len(self.params)
        self.lr = float(lr)

    def zero_grad(self) -> None:
        """Set every parameter's grad to 0 (one C call)."""
        _core.check(_lib.ta_fill_adj(self._ids, self.n, 0.0))


class SGD(Optimizer):
    """p -= lr * (grad + weight_decay * p), with optional momentum (PyTorch's rule)."""

    def __init__(self, params: Iterable[Value], lr: SupportsFloat, momentum: SupportsFloat = 0.0,
                 weight_decay: SupportsFloat = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self._buf = _ffi.new("double[]", max(self.n, 1))
        self._t = 0

    def step(self) -> None:
        """One update of every parameter from its .grad (one C call)."""
        _core.check(_lib.ta_sgd_step(self._ids, self.n, self.lr, self.momentum,
                                     self.weight_decay, self._buf, self._t == 0))
        self._t += 1


class Adam(Optimizer):
    """Adam with bias correction and L2 weight decay (PyTorch's torch.optim.Adam)."""

    def __init__(self, params: Iterable[Value], lr: SupportsFloat = 1e-3,
                 betas: Tuple[SupportsFloat, SupportsFloat] = (0.9, 0.999), eps: SupportsFloat = 1e-8,
                 weight_decay: SupportsFloat = 0.0) -> None:
        super().__init__(params, lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self._m = _ffi.new("double[]", max(self.n, 1))
        self._v = _ffi.new("double[]", max(self.n, 1))
        self._t = 0

    def step(self) -> None:
        """One update of every parameter from its .grad (one C call)."""
        b1, b2 = self.betas
        _core.check(_lib.ta_adam_step(self._ids, self.n, self.lr, b1, b2, self.eps,
                                      self.weight_decay, self._t + 1, self._m, self._v))
        self._t += 1
