"""micrograd.nn, on tapead Values: same constructors, same random.uniform
call order (the same seed gives the same weights), same parameters() order,
same reprs.

One thing differs under the hood: a Layer records each neuron's weighted
sum with one C call (ta_layer) instead of one Python operator call per
node.  It records the very nodes micrograd's Python loop records, in the
same order and with the same arithmetic, so values and gradients are bit
for bit those of the op-by-op path; inputs it cannot take (odd lengths,
non-numbers, no_grad or detect_anomaly mode) go through that path itself.
The weight ids are cached per Layer and the cache is dropped whenever any
Neuron or Layer attribute, or any of their parameter lists, changes.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Union

import random

from . import _core
from .engine import Operand, Value, handles

_ffi, _lib = _core.ffi, _core.lib
fuse_layers = True  # False: every Layer records op by op, exactly micrograd's Python loop
_version = [0]  # bumped by every change to a Neuron's or Layer's attributes or lists


def _mutator(name: str) -> Any:
    base = getattr(list, name)

    def method(self: "_Tracked", *args: Any, **kwargs: Any) -> Any:
        _version[0] += 1
        return base(self, *args, **kwargs)
    method.__name__ = name
    return method


class _Tracked(list):  # type: ignore[type-arg]
    """A list that records that it changed (so cached weight ids stay right)."""
    __slots__ = ()


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
              "insert", "pop", "remove", "clear", "sort", "reverse"):
    setattr(_Tracked, _name, _mutator(_name))


class _Watched:
    """Every attribute assignment invalidates the Layer caches; lists become _Tracked."""

    def __getstate__(self) -> Dict[str, Any]:
        # the cache holds C arrays of this process's node ids: never pickled or copied
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_fused")}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_fused"):
            _version[0] += 1
            if type(value) is list:
                value = _Tracked(value)
        object.__setattr__(self, name, value)


class Module:

    def zero_grad(self) -> None:
        params = self.parameters()
        ids = _core.ffi.new("int64_t[]", [p._i for p in params])
        _core.check(_core.lib.ta_fill_adj(ids, len(params), 0.0))

    def parameters(self) -> List[Value]:
        return []


class Neuron(_Watched, Module):

    def __init__(self, nin: int, nonlin: bool = True) -> None:
        self.w = [Value(random.uniform(-1, 1)) for _ in range(nin)]
        self.b = Value(0)
        self.nonlin = nonlin

    def __call__(self, x: Iterable[Operand]) -> Value:
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
        return act.relu() if self.nonlin else act

    def parameters(self) -> List[Value]:
        return self.w + [self.b]

    def __repr__(self) -> str:
        return f"{'ReLU' if self.nonlin else 'Linear'}Neuron({len(self.w)})"


class Layer(_Watched, Module):

    def __init__(self, nin: int, nout: int, **kwargs: Any) -> None:
        self.neurons = [Neuron(nin, **kwargs) for _ in range(nout)]

    def __call__(self, x: Iterable[Operand]) -> Union[Value, List[Value]]:
        out = None
        if fuse_layers:
            fused = self.__dict__.get("_fused")
            if fused is None or fused.version != _version[0]:
                fused = self._fused = _FusedLayer(self)
            out = fused(x)
        if out is None:  # not for the fused path: micrograd's loop, op by op
            out = [n(x) for n in self.neurons]
        return out[0] if len(out) == 1 else out

    def parameters(self) -> List[Value]:
        return [p for n in self.neurons for p in n.parameters()]

    def __repr__(self) -> str:
        return f"Layer of [{', '.join(str(n) for n in self.neurons)}]"


class MLP(Module):

    def __init__(self, nin: int, nouts: List[int]) -> None:
        sz = [nin] + nouts
        self.layers = [Layer(sz[i], sz[i + 1], nonlin=i != len(nouts) - 1) for i in range(len(nouts))]

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self) -> List[Value]:
        return [p for layer in self.layers for p in layer.parameters()]

    def __repr__(self) -> str:
        return f"MLP of [{', '.join(str(layer) for layer in self.layers)}]"


class _FusedLayer:
    """A Layer's weight and bias ids as C arrays, for ta_layer."""

    def __init__(self, layer: Layer) -> None:
        self.version = _version[0]
        neurons = layer.neurons
        self.nout = len(neurons)
        self.nin = len(neurons[0].w) if neurons else 0
        self.ok = bool(neurons) and all(
            type(n) is Neuron and len(n.w) == self.nin and n.nonlin == neurons[0].nonlin
            and all(type(p) is Value for p in n.w) and type(n.b) is Value for n in neurons)
        if not self.ok:
            return
        self.relu = int(bool(neurons[0].nonlin))
        self.w = _ffi.new("int64_t[]", [p._i for n in neurons for p in n.w] or [0])
        self.b = _ffi.new("int64_t[]", [n.b._i for n in neurons])
        self.xid = _ffi.new("int64_t[]", max(self.nin, 1))
        self.xc = _ffi.new("double[]", max(self.nin, 1))
        self.out = _ffi.new("int64_t[]", self.nout)

    def __call__(self, x: Any) -> Optional[List[Value]]:
        if not self.ok or Neuron.__call__ is not _NEURON_CALL:  # a patched Neuron: its own code
            return None
        try:
            if len(x) != self.nin:
                return None
        except TypeError:  # no len(): an iterator, which the op-by-op path must consume
            return None
        try:
            self.xid[0:self.nin] = [v._i for v in x]
            xc = _ffi.NULL
        except AttributeError:
            xc = self.xc
            for i, v in enumerate(x):  # plain numbers among the inputs
                if isinstance(v, Value):
                    self.xid[i] = v._i
                elif isinstance(v, (int, float)):
                    self.xid[i], xc[i] = -1, v
                else:
                    return None
        st = _lib.ta_layer(self.w, self.b, self.nout, self.nin, self.xid, xc, self.relu, self.out)
        if st:
            if st in (_lib.TA_EBADOP, _lib.TA_ENOGRAD):
                return None
            raise _core.error(st)
        return handles(self.out[0:self.nout])


_NEURON_CALL = Neuron.__call__
