"""micrograd's demo, trained with tapead: same data, same model, same numbers.

    python examples/moons.py              # train 100 steps, check the published losses
    python examples/moons.py --micrograd  # also run micrograd alongside, check every step
    python examples/moons.py --png FILE   # where to write the decision boundary (needs matplotlib)
"""
import argparse
import math
import os
import sys
import time

import tapead
import tapead.nn
from tapead import demo
from tapead.optim import SGD

# micrograd's notebook logs these (seed 1337)
PUBLISHED = {0: 0.8958441028683222, 99: 0.010978370135492717}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--micrograd", action="store_true", help="run micrograd too and compare every step")
    ap.add_argument("--png", default="moons_boundary.png")
    args = ap.parse_args()

    model, X, y = demo.setup(tapead.nn)
    opt = SGD(model.parameters(), lr=1.0)
    if args.micrograd:
        import micrograd.engine
        import micrograd.nn
        mg_model, _, _ = demo.setup(micrograd.nn)

    worst = 0.0
    for k in range(args.steps):
        t = time.perf_counter()
        total_loss, acc = demo.loss(model, X, y, tapead.Value)
        opt.zero_grad()
        total_loss.backward()
        opt.lr = 1.0 - 0.9 * k / 100
        opt.step()
        dt = time.perf_counter() - t
        line = f"step {k:3d}  loss {total_loss.data:.16f}  accuracy {acc * 100:5.1f}%  {dt * 1e3:6.1f} ms/step"
        if args.micrograd:
            t = time.perf_counter()
            mg_loss, _ = demo.step(mg_model, X, y, micrograd.engine.Value, k)
            rel = abs(total_loss.data - mg_loss) / abs(mg_loss)
            worst = max(worst, rel)
            line += f"  | micrograd {mg_loss:.16f} ({(time.perf_counter() - t) * 1e3:.0f} ms)  rel diff {rel:.1e}"
        if k in PUBLISHED:
            ok = math.isclose(total_loss.data, PUBLISHED[k], rel_tol=1e-9)
            line += f"  [published {PUBLISHED[k]!r}: {'match' if ok else 'MISMATCH'}]"
            if not ok:
                print(line)
                sys.exit(f"step {k}: loss differs from micrograd's published figure")
        print(line, flush=True)

    if args.micrograd:
        print(f"largest relative difference from micrograd over {args.steps} steps: {worst:.2e}")
        if worst > 1e-9:
            sys.exit("differs from micrograd by more than 1e-9")
    final_acc = acc
    print(f"final training accuracy {final_acc * 100:.0f}%")
    write_png(model, X, y, args.png)


def write_png(model, X, y, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("matplotlib is not installed: no decision-boundary picture (pip install matplotlib)")
        return
    h = 0.25
    x_min, x_max = X[:, 0].min() - 1, X[:, 0].max() + 1
    y_min, y_max = X[:, 1].min() - 1, X[:, 1].max() + 1
    xx, yy = np.meshgrid(np.arange(x_min, x_max, h), np.arange(y_min, y_max, h))
    with tapead.no_grad():  # evaluation: nothing recorded
        scores = [model([tapead.Value(a), tapead.Value(b)]).data for a, b in np.c_[xx.ravel(), yy.ravel()]]
    Z = (np.array(scores) > 0).reshape(xx.shape)
    plt.figure()
    plt.contourf(xx, yy, Z, cmap=plt.cm.Spectral, alpha=0.8)
    plt.scatter(X[:, 0], X[:, 1], c=y, s=40, cmap=plt.cm.Spectral)
    plt.xlim(xx.min(), xx.max())
    plt.ylim(yy.min(), yy.max())
    plt.savefig(path)
    print(f"decision boundary written to {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
