"""Forward mode cost: tapead.jvp (one C tangent sweep) against backward()
(one C reverse sweep) on the same graph, and the Wengert export per row.

Graph: micrograd's demo loss shape (MLP(2, [16, 16, 1]) over 100 points,
~65k nodes).  Prints medians of repeats in ns/node and the jvp/backward ratio.
Run: python benchmarks/bench_forward.py
"""
import random
import statistics
import time

import tapead
from tapead import Value
from tapead.nn import MLP


def build():
    random.seed(1337)
    model = MLP(2, [16, 16, 1])
    xs = [[random.uniform(-2, 2), random.uniform(-1, 1)] for _ in range(100)]
    ys = [random.choice((-1, 1)) for _ in xs]
    losses = [(1 + -yi * model([Value(a), Value(b)])).relu() for (a, b), yi in zip(xs, ys)]
    loss = sum(losses) * (1.0 / len(losses))
    return model, loss


def median_time(f, repeats=9):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    model, loss = build()
    params = model.parameters()
    tangents = [random.uniform(-1, 1) for _ in params]
    n = len(tapead.wengert(loss, adjoints=False))
    t_bwd = median_time(loss.backward)
    t_jvp = median_time(lambda: tapead.jvp(loss, params, tangents))
    t_one = median_time(lambda: tapead.jvp(loss, params[:1], [1.0]))
    t_tab = median_time(lambda: tapead.wengert(loss), repeats=3)
    print(f"graph: {n} nodes behind the loss, {len(params)} parameters")
    print(f"backward()                 {t_bwd * 1e9 / n:7.2f} ns/node (median of 9)")
    print(f"jvp, all {len(params)} params seeded  {t_jvp * 1e9 / n:7.2f} ns/node  "
          f"ratio to backward {t_jvp / t_bwd:.2f}x")
    print(f"jvp, one param seeded      {t_one * 1e9 / n:7.2f} ns/node  ratio {t_one / t_bwd:.2f}x")
    print(f"wengert(loss) table        {t_tab * 1e9 / n:7.0f} ns/row (C export + Python rows)")


if __name__ == "__main__":
    main()
