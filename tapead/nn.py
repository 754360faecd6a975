"""micrograd.nn, on tapead Values: same constructors, same random.uniform
call order (the same seed gives the same weights), same parameters() order,
same reprs.

One thing differs under the hood: a Layer records each neuron's weighted
sum with one C call (ta_layer) instead of one Python operator call per
node.  It records the very nodes micrograd's Python loop records, in the
same order and with the same arithmetic, so values and gradients are bit
for bit those of the op-by-op path; inputs it cannot take (odd lengths,
non-numbers, no_grad or detect_anomaly mode) go through that path itself.
The weight ids are cached per Layer, with the neurons, weights, biases and
flags they came from: each call checks those against the Layer's current
ones (identity, in C's list comparison), so no way of changing them -- an
attribute, a list method, layer.__dict__.update(...), vars(neuron)["w"] =
..., list.__setitem__ -- can leave the cache stale; and the cache holds
the weights' nodes and follows a weight that w.__init__(x) moves to a new
node (tapead/_c/holds.py: HeldIds), so it never reads another Value's.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import random

from ._c import bulk as _bulk, doubles, int64s
from ._c.holds import HeldIds, held_list
from .custom import join_all
from .engine import Operand, Value, handles

fuse_layers = True  # False: every Layer records op by op, exactly micrograd's Python loop


class _Uncached:
    """Keeps the fused-path cache out of pickles and copies (it holds C
    arrays of this process's node ids)."""

    def __getstate__(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fused"}


class Module:
    """micrograd's base class: parameters() lists a model's Values, and
    zero_grad() sets their grads to 0 in one C call."""

    def zero_grad(self) -> None:
        params = self.parameters()
        _bulk.fill_adj(int64s([p._i for p in params]), len(params))

    def parameters(self) -> List[Value]:
        return []


class Neuron(_Uncached, Module):
    """One neuron, as micrograd's: nin weights drawn from random.uniform(-1, 1)
    and a bias of 0; calling it on nin inputs gives relu(w . x + b), or
    w . x + b where nonlin is False.

    >>> import random; random.seed(0)
    >>> n = Neuron(2, nonlin=False)
    >>> y = n([1.0, 2.0]); y.backward(); [w.grad for w in n.w]
    [1.0, 2.0]
    """

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


class Layer(_Uncached, Module):
    """nout Neurons of nin inputs each (keyword arguments go to Neuron);
    calling it gives the list of their outputs, or the one Value if nout is
    1.  Each neuron's weighted sum is recorded in one C call (the same nodes
    micrograd's loop records, bit for bit) unless fuse_layers is False.

    >>> import random; random.seed(0)
    >>> out = Layer(3, 2)([1.0, 2.0, 3.0]); len(out), len(Layer(3, 2).parameters())
    (2, 8)
    """

    def __init__(self, nin: int, nout: int, **kwargs: Any) -> None:
        self.neurons = [Neuron(nin, **kwargs) for _ in range(nout)]

    def __call__(self, x: Iterable[Operand]) -> Union[Value, List[Value]]:
        out = None
        if fuse_layers:
            fused = self.__dict__.get("_fused")
            if fused is None or not fused.current(self):
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
    """A multi-layer perceptron, as micrograd's: MLP(nin, [n1, n2, ..., 1])
    chains Layers of those sizes, relu on every layer but the last (the same
    seed gives micrograd's weights, in the same parameters() order).

    >>> import random; random.seed(0)
    >>> model = MLP(2, [4, 1]); y = model([1.0, -1.0]); y.backward()
    >>> len(model.parameters()), model
    (17, MLP of [Layer of [ReLUNeuron(2), ReLUNeuron(2), ReLUNeuron(2), ReLUNeuron(2)], Layer of [LinearNeuron(4)]])
    """

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


_STATE = attrgetter("w", "b", "nonlin")


class _FusedLayer:
    """A Layer's weight and bias ids as a C array, for ta_layer, with the
    objects they came from (HeldIds: held, and taken again when one of
    those Values moves to a new node)."""

    def __init__(self, layer: Layer) -> None:
        neurons: Any = layer.__dict__.get("neurons")
        self.neurons = neurons
        self.ok = type(neurons) in (list, tuple) and bool(neurons) and all(
            type(n) is Neuron and type(n.__dict__.get("w")) in (list, tuple) for n in neurons)
        if not self.ok:
            return
        self.members = neurons[:]   # copies (a tuple is its own): compared item by item
        self.state: List[Tuple[Any, ...]] = [(n.w[:], n.b, n.nonlin) for n in neurons]
        self.nout = len(neurons)
        self.nin = len(neurons[0].w)
        self.ok = all(len(n.w) == self.nin and bool(n.nonlin) == bool(neurons[0].nonlin)
                      and all(type(p) is Value for p in n.w) and type(n.b) is Value
                      for n in neurons)
        if not self.ok:
            return
        self.relu = int(bool(neurons[0].nonlin))
        self.nodes = HeldIds([p for n in neurons for p in n.w] + [n.b for n in neurons])
        self.w = self.b = None                # (the weights' and biases' ids, from nodes)
        self.xid = int64s(self.nin)
        self.xc = doubles(self.nin)
        self.out = held_list(self.nout)   # filled and emptied by each fused call

    def current(self, layer: Layer) -> bool:
        """Whether this cache is usable and the layer still has the neurons,
        weights, biases and flags it was made from (same objects, same order)."""
        try:
            return (self.ok and layer.__dict__.get("neurons") is self.neurons
                    and self.neurons == self.members
                    and list(map(_STATE, self.neurons)) == self.state)
        except AttributeError:   # a neuron lost an attribute: rebuild, then fall back
            return False

    def __call__(self, x: Any) -> Optional[List[Value]]:
        if not self.ok or Neuron.__call__ is not _NEURON_CALL:  # a patched Neuron: its own code
            return None
        try:
            if len(x) != self.nin:
                return None
        except TypeError:  # no len(): an iterator, which the op-by-op path must consume
            return None
        ids = [v._i for v in x if type(v) is Value]
        if len(ids) == self.nin:
            self.xid[0:self.nin] = ids
            xc = None
        else:
            xc = self.xc
            for i, v in enumerate(x):  # plain numbers among the inputs
                if isinstance(v, Value) and v._i >= 0:
                    self.xid[i] = v._i
                elif isinstance(v, (int, float)):
                    self.xid[i], xc[i] = -1, v
                else:  # anything else (duck-typed `_i` included): micrograd's loop decides
                    return None
        w = self.nodes.current()
        if w is not self.w:
            self.w, self.b = w, w + self.nout * self.nin
        if not _bulk.layer(w, self.b, self.nout, self.nin, self.xid, xc, self.relu, self.out):
            return None
        return handles(self.out, self.nout, join_all(x))


_NEURON_CALL = Neuron.__call__
