"""Per-op recording cost in the fast-path thread and in other threads, and four threads at once.

Each thread records on its own tape.  The first thread to record owns the
fast path (its current segment token sits in a module global); others find
their token through a threading.local, one extra Python call per op.

    python benchmarks/bench_threads.py
"""
import statistics
import threading
import time

from tapead import Value

N = 200_000


def chain(n):
    s, x = Value(1.0), Value(0.5)
    t0 = time.perf_counter()
    for _ in range(n):
        s = s * 0.9999 + x
    dt = time.perf_counter() - t0
    s.backward()
    return dt / (2 * n) * 1e9, x.grad


def in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def main():
    main_ns, other_ns = [], []
    for _ in range(5):  # interleaved
        main_ns.append(chain(N)[0])
        other_ns.append(in_thread(lambda: chain(N))[0])
    m, o = statistics.median(main_ns), statistics.median(other_ns)
    print(f"forward ns/op: fast-path thread {m:.0f}, other thread {o:.0f} ({o / m:.2f}x)")
    results = [None] * 4
    def work(k):
        results[k] = chain(N // 4)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    seq = chain(N // 4)[1]
    same = all(r[1] == seq for r in results)
    print(f"four threads recording at once: {wall * 1e3:.0f} ms wall for {4 * N // 4 * 2:,} ops; "
          f"gradients equal to a sequential run: {same}")


if __name__ == "__main__":
    main()
