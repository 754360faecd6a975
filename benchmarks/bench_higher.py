"""Cost of tapead's higher-order derivatives relative to one gradient, same run.

    python benchmarks/bench_higher.py

1. Hessian-vector product vs gradient on an MLP loss (parameters as inputs):
   (a) C only, on an already recorded graph: tapead.hvp vs tapead.grad;
   (b) recorded and swept: record the loss in Python + hvp vs record + grad.
2. Dense n x n Hessian vs one gradient for growing n: the ratio divided by
   n should stay flat (O(n) gradient-equivalents).
Medians of several repeats; the machine is shared, so only ratios count.
"""
import random
import statistics
import time

import numpy as np

import tapead
from tapead import Value, grad, hvp, hessian
from tapead.nn import MLP


def median_time(fn, repeats=7, inner=1):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter() - t0) / inner)
    return statistics.median(ts)


def paired(fa, fb, repeats=9, inner_a=1, inner_b=1):
    """Medians of fa and fb timed alternately (so drift on a shared machine hits both),
    and the median of the per-pair ratios b/a."""
    ta, tb, r = [], [], []
    for _ in range(repeats):
        a = median_time(fa, repeats=1, inner=inner_a)
        b = median_time(fb, repeats=1, inner=inner_b)
        ta.append(a); tb.append(b); r.append(b / a)
    return statistics.median(ta), statistics.median(tb), statistics.median(r)


def mlp_loss(model, data):
    loss = 0
    for x, y in data:
        out = model(x)
        loss = loss + (out - y) ** 2
    return loss


def bench_hvp():
    random.seed(0)
    model = MLP(4, [16, 16, 1])
    params = model.parameters()
    data = [([random.uniform(-1, 1) for _ in range(4)], random.uniform(-1, 1)) for _ in range(20)]
    loss = mlp_loss(model, data)
    v = np.random.default_rng(0).normal(size=len(params))
    nodes = tapead.tape_stats()["nodes"]
    t_g, t_h, r = paired(lambda: grad(loss, params), lambda: hvp(loss, params, v), 15, 10, 10)
    t_rg, t_rh, rr = paired(lambda: grad(mlp_loss(model, data), params),
                            lambda: hvp(mlp_loss(model, data), params, v), 9)
    print(f"MLP(4,[16,16,1]) squared loss over 20 points: {len(params)} inputs, ~{nodes} nodes")
    print(f"  (a) C only       grad {t_g * 1e3:8.3f} ms   hvp {t_h * 1e3:8.3f} ms   hvp/grad = {r:.2f}x")
    print(f"  (b) record+sweep grad {t_rg * 1e3:8.3f} ms   hvp {t_rh * 1e3:8.3f} ms   hvp/grad = {rr:.2f}x")


def f_n(xs):
    n = len(xs)
    s = 0
    for i in range(n):
        s = s + (xs[i] * xs[(i + 1) % n]).tanh() + xs[i].exp() * xs[(i + 3) % n] + (xs[i] ** 2 + 1).log()
    return s


def bench_hessian():
    print("dense Hessian vs one gradient (C only, graph recorded once), f with ~9n nodes")
    print(f"  {'n':>4} {'grad ms':>9} {'hess ms':>9} {'hess/grad':>10} {'/n':>6}")
    for n in (10, 20, 40, 80, 160):
        xs = [Value(random.uniform(-1, 1)) for _ in range(n)]
        f = f_n(xs)
        t_g, t_h, r = paired(lambda: grad(f, xs), lambda: hessian(f, xs), 9, 20, 3)
        print(f"  {n:4d} {t_g * 1e3:9.4f} {t_h * 1e3:9.3f} {r:10.1f} {r / n:6.2f}")


if __name__ == "__main__":
    bench_hvp()
    bench_hessian()
