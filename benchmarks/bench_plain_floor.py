"""The plain-Values demo step against its own Python skeleton.

python benchmarks/bench_plain_floor.py

The demo model written with plain Values (tapead.bench.plain_stepper) spends
most of its time in the user's own Python: generator expressions, zip, sum
and list building.  This times that skeleton with plain floats (no graph, no
objects: the least any scalar library could cost per step) in the same
rounds as tapead's whole step (forward, backward, SGD) and micrograd's.
"""
import random
import statistics
import time

import tapead
from tapead import bench, demo


def skeleton_step():
    """The step's Python structure on floats: forward and loss, no gradients."""
    _, X, y = demo.setup(tapead.nn)
    rows = [[float(a) for a in x] for x in X]
    labels = [float(t) for t in y]
    random.seed(1337)
    init = [[([random.uniform(-1, 1) for _ in range(nin)], 0.0) for _ in range(nout)]
            for nin, nout in ((2, 16), (16, 16), (16, 1))]
    params = [w for layer in init for ws, b in layer for w in ws + [b]]

    def relu(v):
        return v if v > 0.0 else 0.0

    def run():
        t0 = time.perf_counter()
        for x in rows:
            act = x
            for i, layer in enumerate(init):
                act = [sum((wi * xi for wi, xi in zip(ws, act)), b) for ws, b in layer]
                if i < 2:
                    act = [relu(a) for a in act]
        sum(relu(1 + -yi * 0.5) for yi in labels)
        sum(p * p for p in params)
        return time.perf_counter() - t0
    return run


def main(rounds=7):
    runs = {"skeleton (floats)": skeleton_step(), "tapead": bench.plain_stepper("tapead"),
            "xad-py": bench.plain_stepper("xad"), "micrograd": bench.plain_stepper("micrograd")}
    runs = {k: v for k, v in runs.items() if v is not None}
    ts = {k: [] for k in runs}
    for r in range(rounds):
        for k, run in runs.items():
            if k != "micrograd" or r < 3:
                ts[k].append(run())
    med = {k: statistics.median(v) for k, v in ts.items()}
    for k, v in med.items():
        print(f"{k:>18}: {v * 1e3:8.2f} ms per step" +
              (f"  ({med['micrograd'] / v:.0f}x faster than micrograd)" if "micrograd" in med else ""))
    print(f"tapead FRONT={tapead.FRONT}; tapead's whole step is {med['tapead'] / med['skeleton (floats)']:.2f}x "
          "the skeleton's forward on floats")


if __name__ == "__main__":
    main()
