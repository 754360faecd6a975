"""Where one backward() of micrograd's README expression spends its time.

The README expression is 24 ops, so "backward per node" there is mostly the
cost of getting into C at all.  This splits one tapead backward() into
layers, each timed over the same roots in the same interleaved rounds as
micrograd's backward, and prints how much of a call comes before the sweep:

  Python loop + method call   `for r in roots: r.m()` with an empty method
  + cffi call                 `lib.ta_adj(id)`: a C call that only looks the
                              node up (cffi releases and retakes the GIL and
                              saves errno around every call, unconditionally)
  + the sweep                 `lib.ta_backward(id)`
  Value.backward()            what users call

    python benchmarks/bench_backward_call.py
"""
import statistics
import sys
import time

import tapead
from tapead import _c, bench

try:
    import micrograd.engine as mg
except ImportError:  # pragma: no cover
    sys.exit("needs micrograd: pip install micrograd==0.1.0 (or pip install -e \".[bench]\" in the clone)")

ROOTS = 100_000 // 24     # as python -m tapead.bench: 100,000 ops of README expressions
MG_ROOTS = 20_000 // 24
ROUNDS = 15


class Empty:
    def m(self) -> None:
        return None


def main() -> None:
    sys.setrecursionlimit(100_000)
    lib = _c.lib
    roots = bench.readme(tapead.Value, ROOTS)[0].roots
    ids = [r._i for r in roots]
    empties = [Empty() for _ in roots]
    adj, bw = lib.ta_adj, lib.ta_backward

    def loop_method() -> None:
        for e in empties:
            e.m()

    def loop_cffi() -> None:
        for i in ids:
            adj(i)

    def loop_sweep() -> None:
        for i in ids:
            bw(i)

    def loop_backward() -> None:
        for r in roots:
            r.backward()

    layers = {"Python loop + method call": loop_method, "+ cffi call (lookup only)": loop_cffi,
              "+ the sweep (lib.ta_backward)": loop_sweep, "Value.backward()": loop_backward}
    ts: dict = {k: [] for k in layers}
    ts["micrograd backward()"] = []
    for _ in range(ROUNDS):
        for name, fn in layers.items():
            t0 = time.perf_counter()
            fn()
            ts[name].append((time.perf_counter() - t0) / len(ids) * 1e9)
        groots = bench.readme(mg.Value, MG_ROOTS)[0]
        t0 = time.perf_counter()
        groots.backward()
        ts["micrograd backward()"].append((time.perf_counter() - t0) / MG_ROOTS * 1e9)
        del groots
    med = {k: statistics.median(v) for k, v in ts.items()}
    m = med["micrograd backward()"]
    print(f"README expression, {ROOTS} roots, medians of {ROUNDS} interleaved rounds (ns per backward call)\n")
    for k, v in med.items():
        print(f"  {k:32s} {v:9,.0f} ns   {v / 24:7.1f} ns/node")
    print(f"\n  ratio micrograd / Value.backward(): {m / med['Value.backward()']:.0f}x per node")
    print(f"  Python and cffi alone take {med['+ cffi call (lookup only)']:,.0f} ns of a call before the "
          f"sweep starts")


if __name__ == "__main__":
    main()
