"""Record a graph of N nodes (default 10,000,000), backpropagate, report time and memory.

    python benchmarks/big_graph.py [N]
"""
import resource
import sys
import time

import tapead


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    x = tapead.Value(0.5)
    s = tapead.Value(1.0)
    t0 = time.perf_counter()
    for _ in range(n // 2):          # two nodes per iteration
        s = s * 0.9999999 + x
    t1 = time.perf_counter()
    s.backward()
    t2 = time.perf_counter()
    st = tapead.tape_stats()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # closed form of dx: sum_{k<m} c^k = (1 - c^m) / (1 - c)
    m, c = n // 2, 0.9999999
    want = (1 - c ** m) / (1 - c)
    print(f"nodes recorded      {st['nodes']:,}")
    print(f"record              {t1 - t0:.1f} s ({(t1 - t0) / st['nodes'] * 1e9:.0f} ns/node)")
    print(f"backward            {t2 - t1:.2f} s ({(t2 - t1) / st['nodes'] * 1e9:.1f} ns/node)")
    print(f"tape bytes          {st['bytes'] / 2**20:,.0f} MiB ({st['bytes'] / st['nodes']:.1f} B/node)")
    print(f"peak RSS (process)  {rss / 2**20:,.0f} MiB")
    print(f"dy/dx               {x.grad!r} (closed form {want!r}, rel err {abs(x.grad - want) / want:.1e})")


if __name__ == "__main__":
    main()
