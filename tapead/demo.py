"""micrograd's demo notebook as functions, shared by the example, the
benchmark and the tests, so tapead and micrograd run literally the same code.

The data is scikit-learn's make_moons algorithm (shuffle, then Gaussian
noise, both from numpy's global random state), so no scikit-learn needed.
"""
from __future__ import annotations

from typing import Any, Callable, Tuple

import random

import numpy as np
import numpy.typing as npt


def make_moons(n_samples: int = 100, noise: float = 0.1) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """sklearn.datasets.make_moons(n_samples, noise=noise) with random_state=None."""
    n_out = n_samples // 2
    n_in = n_samples - n_out
    outer = np.linspace(0, np.pi, n_out)
    inner = np.linspace(0, np.pi, n_in)
    X = np.vstack([np.append(np.cos(outer), 1 - np.cos(inner)),
                   np.append(np.sin(outer), 1 - np.sin(inner) - 0.5)]).T
    y = np.hstack([np.zeros(n_out, dtype=np.intp), np.ones(n_in, dtype=np.intp)])
    idx = np.arange(n_samples)
    np.random.shuffle(idx)
    X, y = X[idx], y[idx]
    X = X + np.random.normal(scale=noise, size=X.shape)
    return X, y


def setup(nn: Any, seed: int = 1337) -> Tuple[Any, npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """Seed both generators as the notebook does; returns (model, X, y) with y in {-1, 1}."""
    np.random.seed(seed)
    random.seed(seed)
    X, y = make_moons(n_samples=100, noise=0.1)
    y = y * 2 - 1
    model = nn.MLP(2, [16, 16, 1])
    return model, X, y


def loss(model: Any, X: npt.NDArray[np.float64], y: npt.NDArray[np.intp], Value: Any) -> Tuple[Any, float]:
    """The notebook's loss: SVM max-margin loss + 1e-4 L2, and accuracy."""
    inputs = [list(map(Value, xrow)) for xrow in X]
    scores = list(map(model, inputs))
    losses = [(1 + -yi * scorei).relu() for yi, scorei in zip(y, scores)]
    data_loss = sum(losses) * (1.0 / len(losses))
    alpha = 1e-4
    reg_loss = alpha * sum((p * p for p in model.parameters()))
    total_loss = data_loss + reg_loss
    accuracy = [(yi > 0) == (scorei.data > 0) for yi, scorei in zip(y, scores)]
    return total_loss, sum(accuracy) / len(accuracy)


def step(model: Any, X: npt.NDArray[np.float64], y: npt.NDArray[np.intp], Value: Any,
         k: int) -> Tuple[float, float]:
    """One eager training step exactly as in the notebook; returns (loss, accuracy)."""
    total_loss, acc = loss(model, X, y, Value)
    model.zero_grad()
    total_loss.backward()
    learning_rate = 1.0 - 0.9 * k / 100
    for p in model.parameters():
        p.data -= learning_rate * p.grad
    return total_loss.data, acc


def recompute_trainer(model: Any, X: Any, y: Any, Value: Any) -> Callable[[int], float]:
    """The demo trained by replay: record the loss once, then per step one C
    forward sweep (recompute), zero_grad, backward and SGD, all in C.

    Returns step(k) -> loss at the current parameters before the update."""
    from .optim import SGD
    total_loss, _ = loss(model, X, y, Value)
    opt = SGD(model.parameters(), lr=1.0)
    state = {"fresh": True}

    def step(k: int) -> float:
        if not state["fresh"]:
            total_loss.recompute()
        state["fresh"] = False
        opt.zero_grad()
        total_loss.backward()
        opt.lr = 1.0 - 0.9 * k / 100
        opt.step()
        return float(total_loss.data)

    return step


def batched_trainer(model: Any, X: Any, y: Any, Value: Any) -> Callable[[int], float]:
    """The demo trained by batched replay: the per-sample hinge loss recorded
    once and compiled; every step runs all samples through the Program in C
    (numpy in, numpy out) and updates the parameters with numpy SGD.

    The parameters live in a numpy array handed to the Program each step
    (params=); the model's Values keep the values they were recorded with
    (set_data(model.parameters(), step.params) writes the trained ones).

    Returns step(k) -> loss at the current parameters before the update."""
    from .arrays import data
    from .replay import compile
    params = model.parameters()
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    prog = compile([hinge], [x0, x1, yi], wrt=params)
    Xy = np.column_stack([X, y]).astype(np.float64)
    seed = np.full(1, 1.0 / len(y))
    w = data(params)

    def step(k: int) -> float:
        losses, g = prog.grad(Xy, seed=seed, params=w)   # d mean(hinge) / d params, summed over rows
        total = losses.sum() * (1.0 / len(y)) + 1e-4 * np.dot(w, w)
        g += 2e-4 * w
        w[:] -= (1.0 - 0.9 * k / 100) * g
        return float(total)

    step.params = w  # type: ignore[attr-defined]  # (the trained parameters, for the caller)
    return step
