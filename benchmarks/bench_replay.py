"""Replay benchmarks, each against its peer measured in the same run (medians of repeats, each pair timed
in alternation so the load of a shared machine hits both alike).

1. demo training step: micrograd eager (record + zero_grad + backward + SGD) vs
   tapead record-once + recompute + zero_grad + backward + the same Python SGD loop.
2. batched replay step (per-sample loss compiled once, 100 rows per step, numpy SGD)
   vs the same model/loss/SGD in PyTorch float64 CPU, torch.set_num_threads(1)
   (skipped if torch is not installed).
3. forward-replay sweep cost per node: loss.recompute() on the 65.8k-node demo graph
   vs a plain C loop doing the same arithmetic over flat arrays (ta_prog_ref).

Run: python benchmarks/bench_replay.py [--quick]
"""
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import moons_replay as demo  # noqa: E402

import tapead  # noqa: E402
from tapead._core import lib  # noqa: E402

QUICK = "--quick" in sys.argv


def once(fn, inner=1):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def median_time(fn, repeats, inner=1):
    return statistics.median(once(fn, inner) for _ in range(repeats))


def paired(fa, ia, fb, ib, repeats):
    """Medians of a and b timed in alternation, so shared-machine load hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(once(fa, ia))
        tb.append(once(fb, ib))
    return statistics.median(ta), statistics.median(tb)


def bench_micrograd_step():
    from micrograd.engine import Value
    from micrograd.nn import MLP
    np.random.seed(1337); random.seed(1337)
    X, y = demo.make_moons(100, 0.1)
    y = y * 2 - 1
    model = MLP(2, [16, 16, 1])
    k = [0]

    def step():
        inputs = [list(map(Value, xrow)) for xrow in X]
        scores = list(map(model, inputs))
        losses = [(1 + -yi * s).relu() for yi, s in zip(y, scores)]
        loss = sum(losses) * (1.0 / len(losses)) + 1e-4 * sum((p * p for p in model.parameters()))
        model.zero_grad()
        loss.backward()
        lr = 1.0 - 0.9 * k[0] / 100
        for p in model.parameters():
            p.data -= lr * p.grad
        k[0] += 1
    return step


def bench_recompute_step():
    X, y, model = demo.setup()
    loss, _ = demo.total_loss(model, X, y)
    params = model.parameters()
    k = [0]

    def step():
        loss.recompute()
        model.zero_grad()
        loss.backward()
        lr = 1.0 - 0.9 * (k[0] % 100) / 100
        for p in params:
            p.data -= lr * p.grad
        k[0] += 1
    return step, loss


def bench_batched_step():
    X, y, model = demo.setup()
    params = model.parameters()
    prog = demo.compile_per_sample(model)
    Xy = np.column_stack([X, y]).astype(np.float64)
    seed = np.full(1, 1.0 / len(y))
    w = np.array([p.data for p in params])
    k = [0]

    def step():
        losses, g = prog.grad(Xy, seed=seed)
        loss = losses.sum() * (1.0 / len(y)) + 1e-4 * np.dot(w, w)
        g += 2e-4 * w
        w[:] -= (1.0 - 0.9 * (k[0] % 100) / 100) * g
        tapead.set_data(params, w)
        k[0] += 1
        return loss
    return step, prog


def bench_torch_step():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    X, y, _ = demo.setup()
    Xt = torch.tensor(X, dtype=torch.float64)
    yt = torch.tensor(y, dtype=torch.float64).reshape(-1, 1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                              torch.nn.ReLU(), torch.nn.Linear(16, 1)).double()
    params = list(net.parameters())
    k = [0]

    def step():
        scores = net(Xt)
        loss = torch.relu(1 - yt * scores).mean() + 1e-4 * sum((p * p).sum() for p in params)
        for p in params:
            p.grad = None
        loss.backward()
        lr = 1.0 - 0.9 * (k[0] % 100) / 100
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        k[0] += 1
    return step, torch.__version__


def bench_sweep(loss):
    prog = tapead.compile(loss, [])
    nodes = prog.nodes
    reps = 20
    t_ref, t_rec = paired(lambda: lib.ta_prog_ref(prog._p, reps), 1, loss.recompute, reps, 15)
    t_ref /= reps
    return nodes, t_rec, t_ref


def main():
    print(f"tapead replay benchmarks ({'quick' if QUICK else 'full'}); medians; "
          f"{os.cpu_count()} cores, shared")
    rec_step, loss = bench_recompute_step()
    t_mg, t_rec = paired(bench_micrograd_step(), 1, rec_step, 20, 3 if QUICK else 7)
    print(f"\n1. demo step  micrograd eager {t_mg * 1e3:9.1f} ms   tapead recompute step "
          f"{t_rec * 1e3:7.3f} ms   speedup {t_mg / t_rec:7.0f}x  (target >= 500x)")

    bat_step, prog = bench_batched_step()
    tt = bench_torch_step()
    if tt is None:
        t_bat = median_time(bat_step, 9, 30 if QUICK else 100)
    else:
        torch_step, ver = tt
        t_torch, t_bat = paired(torch_step, 30, bat_step, 30, 9 if QUICK else 21)
    line = f"\n2. batched    tapead Program step {t_bat * 1e6:8.1f} us ({prog})"
    if tt is None:
        line += "\n   torch not installed: comparison skipped"
    else:
        line += (f"\n   torch {ver} float64 1 thread step {t_torch * 1e6:8.1f} us   "
                 f"tapead faster by {t_torch / t_bat:5.2f}x  (target > 1x)")
    print(line)

    n, t_sweep, t_ref = bench_sweep(loss)
    print(f"\n3. forward sweep over {n} nodes: recompute {t_sweep / n * 1e9:6.2f} ns/node   "
          f"plain C loop {t_ref / n * 1e9:6.2f} ns/node   ratio {t_sweep / t_ref:5.2f}x "
          f"(target <= 3x)")


if __name__ == "__main__":
    main()
