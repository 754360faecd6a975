"""numpy interop against the Python loops it replaces (medians of interleaved repeats).

    python benchmarks/bench_interop.py [N]
"""
import statistics
import sys
import time

import numpy as np

import tapead
from tapead import Value


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    arr = np.random.default_rng(0).random(n)
    vals = tapead.values(arr)
    cases = [
        ("leaves from an array", lambda: tapead.values(arr), lambda: [Value(float(x)) for x in arr]),
        ("gather .data", lambda: tapead.data(vals), lambda: np.array([v.data for v in vals])),
        ("gather .grad", lambda: tapead.grads(vals), lambda: np.array([v.grad for v in vals])),
        ("scatter .data", lambda: tapead.set_data(vals, arr),
         lambda: [setattr(v, "data", float(x)) for v, x in zip(vals, arr)]),
    ]
    print(f"{n:,} values, medians of 7 interleaved repeats, ns per value")
    print(f"| {'operation':22s} | {'one C call':>10s} | {'Python loop':>11s} | ratio |")
    print(f"| {'-' * 22} | {'-' * 10} | {'-' * 11} | ----- |")
    for name, fast, slow in cases:
        tf, ts = [], []
        for _ in range(7):
            tf.append(timed(fast)[0])
            ts.append(timed(slow)[0])
        f, s = statistics.median(tf) / n * 1e9, statistics.median(ts) / n * 1e9
        print(f"| {name:22s} | {f:10.1f} | {s:11.1f} | {s / f:4.1f}x |")


if __name__ == "__main__":
    main()
