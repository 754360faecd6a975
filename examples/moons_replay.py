"""micrograd's demo (moons, MLP(2,[16,16,1]), SVM loss + L2, 100 SGD steps) three ways:

1. eager: record a fresh graph every step, as micrograd's demo does;
2. recompute: record once, then per step loss.recompute(), zero_grad, backward, SGD;
3. batched replay: record the per-sample loss once, compile it, and run all
   100 samples per step through the compiled Program (numpy in, numpy out).

All three must log the same losses (to 1e-9 relative); the script checks and prints.
Run: python examples/moons_replay.py
"""
import random
import sys

import numpy as np

import tapead
from tapead import Value
from tapead.nn import MLP


def make_moons(n_samples=100, noise=0.1):
    """sklearn.datasets.make_moons(n_samples, noise=noise) with the global np.random state."""
    n_out = n_samples // 2
    n_in = n_samples - n_out
    outer_x = np.cos(np.linspace(0, np.pi, n_out))
    outer_y = np.sin(np.linspace(0, np.pi, n_out))
    inner_x = 1 - np.cos(np.linspace(0, np.pi, n_in))
    inner_y = 1 - np.sin(np.linspace(0, np.pi, n_in)) - 0.5
    X = np.vstack([np.append(outer_x, inner_x), np.append(outer_y, inner_y)]).T
    y = np.hstack([np.zeros(n_out, dtype=np.intp), np.ones(n_in, dtype=np.intp)])
    idx = np.arange(n_samples)
    np.random.shuffle(idx)            # sklearn.utils.shuffle with the global RandomState
    X, y = X[idx], y[idx]
    X += np.random.normal(scale=noise, size=X.shape)
    return X, y


def setup():
    np.random.seed(1337)
    random.seed(1337)
    X, y = make_moons(n_samples=100, noise=0.1)
    y = y * 2 - 1
    return X, y, MLP(2, [16, 16, 1])


def total_loss(model, X, y):
    """The demo's loss, recorded eagerly: mean hinge + 1e-4 * sum(p*p)."""
    inputs = [list(map(Value, xrow)) for xrow in X]
    scores = list(map(model, inputs))
    losses = [(1 + -yi * scorei).relu() for yi, scorei in zip(y, scores)]
    data_loss = sum(losses) * (1.0 / len(losses))
    reg_loss = 1e-4 * sum((p * p for p in model.parameters()))
    acc = sum((yi > 0) == (s.data > 0) for yi, s in zip(y, scores)) / len(y)
    return data_loss + reg_loss, acc


def train_eager(steps=100):
    X, y, model = setup()
    out = []
    for k in range(steps):
        loss, acc = total_loss(model, X, y)
        model.zero_grad()
        loss.backward()
        lr = 1.0 - 0.9 * k / 100
        for p in model.parameters():
            p.data -= lr * p.grad
        out.append(loss.data)
    return out, acc


def train_recompute(steps=100):
    X, y, model = setup()
    loss, _ = total_loss(model, X, y)        # recorded once
    params = model.parameters()
    out = []
    for k in range(steps):
        if k:
            loss.recompute()                  # one C forward sweep at the new parameters
        model.zero_grad()
        loss.backward()
        lr = 1.0 - 0.9 * k / 100
        for p in params:
            p.data -= lr * p.grad
        out.append(loss.data)
    return out


def compile_per_sample(model):
    """The per-sample hinge loss as a Program: inputs (x0, x1, y), output loss_i, wrt params."""
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    score = model([x0, x1])
    li = (1 + (-yi) * score).relu()
    return tapead.compile([li], [x0, x1, yi], wrt=model.parameters())


def train_batched(steps=100):
    X, y, model = setup()
    params = model.parameters()
    prog = compile_per_sample(model)
    Xy = np.column_stack([X, y]).astype(np.float64)
    B = len(y)
    seed = np.full(1, 1.0 / B)
    w = np.array([p.data for p in params])
    out = []
    for k in range(steps):
        losses, g = prog.grad(Xy, seed=seed)      # gradient of mean hinge, summed over rows
        loss = losses.sum() * (1.0 / B) + 1e-4 * np.dot(w, w)
        g += 2e-4 * w
        lr = 1.0 - 0.9 * k / 100
        w -= lr * g
        tapead.set_data(params, w)              # the Program reads params from their Values
        out.append(float(loss))
    return out


def main():
    eager, acc = train_eager()
    rec = train_recompute()
    bat = train_batched()
    print(f"step  0 eager {eager[0]:.16g}  recompute {rec[0]:.16g}  batched {bat[0]:.16g}")
    print(f"step 99 eager {eager[-1]:.16g}  recompute {rec[-1]:.16g}  batched {bat[-1]:.16g}"
          f"  (eager accuracy {acc * 100:.0f}%)")
    worst = {name: max(abs(a - b) / abs(a) for a, b in zip(eager, other))
             for name, other in (("recompute", rec), ("batched", bat))}
    for name, r in worst.items():
        print(f"{name}: max relative difference from eager over 100 steps = {r:.3g}")
    ok = all(r <= 1e-9 for r in worst.values())
    print("OK: same losses to 1e-9 relative" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
