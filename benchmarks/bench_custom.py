"""What custom nodes cost, and where.

One program, written once for any Value class: G groups of ten ops each,
x * w1 + b1, squared minus x, relu plus b2, times w2, then a softplus, then
half of it summed (by a pairwise tree, so micrograd's recursive topological
sort stays shallow).  The softplus is written four ways:

  plain        with built-in ops, (1 + u.exp()).log()  -- no custom node
  rule         micrograd's idiom: Value(f(u), (u,), 'softplus') + out._backward
  precomputed  tapead.precomputed(f(u), [u], [sigmoid(u)])
  micrograd    micrograd's own Value, the rule written as in `rule`

Rows (medians of interleaved rounds, ratios within this run):
  end to end   record + backward per group (ten ops, one custom node)
  backward     the sweep alone, per node
  plain graph beside custom nodes: the sweep of a graph with none, while
               the tape also holds custom nodes (against the same graph
               with none on the tape): custom nodes cost nothing where
               the sweep does not meet them

    python benchmarks/bench_custom.py [--groups N] [--rounds R] [--json FILE]
"""
import argparse
import gc
import json
import math
import statistics
import sys
import time

import tapead
from tapead import Value

try:
    from micrograd.engine import Value as MGValue
except ImportError:  # pragma: no cover
    sys.exit("needs micrograd: pip install micrograd==0.1.0 (or pip install -e \".[bench]\" in the clone)")


def softplus_rule(V, u):
    out = V(math.log1p(math.exp(u.data)), (u,), 'softplus')

    def _backward():
        u.grad += out.grad / (1 + math.exp(-u.data))
    out._backward = _backward
    return out


def softplus_pre(V, u):
    x = u.data
    return tapead.precomputed(math.log1p(math.exp(x)), [u], [1 / (1 + math.exp(-x))], name="softplus")


def softplus_plain(V, u):
    return (1 + u.exp()).log()


def tree_sum(terms):
    while len(terms) > 1:
        terms = [terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                 for k in range(0, len(terms), 2)]
    return terms[0]


def program(V, softplus, xs, params):
    w1, b1, b2, w2 = params
    terms = []
    for x in xs:
        u = x * w1 + b1
        u = u * u - x
        u = u.relu() + b2
        u = u * w2
        terms.append(softplus(V, u) * 0.5)
    return tree_sum(terms)


def setup(V, G):
    xs = [V(0.001 * (k % 997) - 0.5) for k in range(G)]
    params = [V(0.7), V(-0.2), V(0.3), V(1.1)]
    return xs, params


def end_to_end(V, softplus, G):
    xs, params = setup(V, G)

    def run():
        loss = program(V, softplus, xs, params)
        for p in params:
            p.grad = 0
        loss.backward()
        return loss
    return run


def timed(fn):
    """Seconds of one fn(), as tapead.bench's fwd_bwd_once: the collector
    runs first, so no run pays for another's garbage (micrograd's graphs are
    cycles, left to the collector, which would otherwise often run inside
    the next run: tapead's), and what fn returns is freed after the clock
    stops.  This leaves micrograd's own collection off its clock too, which
    flatters it: in a training loop it pays for it."""
    gc.collect()
    t = time.perf_counter()
    r = fn()
    dt = time.perf_counter() - t
    del r
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=2000, help="groups of ten ops (default 2000)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args()
    G, R = a.groups, a.rounds
    sys.setrecursionlimit(100_000)
    kinds = {
        "tapead, plain (no custom node)": end_to_end(Value, softplus_plain, G),
        "tapead, micrograd's idiom (1 in 10 custom)": end_to_end(Value, softplus_rule, G),
        "tapead, precomputed (1 in 10 custom)": end_to_end(Value, softplus_pre, G),
        "micrograd, its idiom (1 in 10 custom)": end_to_end(MGValue, softplus_rule, G),
    }
    # check: all agree on the loss and a gradient
    res = {}
    for k, f in kinds.items():
        loss = f()
        res[k] = loss.data
    ref = res["micrograd, its idiom (1 in 10 custom)"]
    assert all(abs(v - ref) <= 1e-9 * abs(ref) for v in res.values()), res
    times = {k: [] for k in kinds}
    for _ in range(R):
        for k, f in kinds.items():
            times[k].append(timed(f))
    med = {k: statistics.median(v) for k, v in times.items()}
    mg = med["micrograd, its idiom (1 in 10 custom)"]
    print(f"tapead {tapead.__version__}, front {tapead.FRONT}, Python {sys.version.split()[0]}; "
          f"{G} groups of 10 ops, medians of {R} interleaved rounds\n")
    print("| end to end (record + backward) | us per group | x micrograd |")
    print("| --- | --- | --- |")
    for k, v in med.items():
        print(f"| {k} | {v / G * 1e6:.2f} | {mg / v:.1f}x faster |")

    # the sweep alone, per node
    sweeps = {}
    for name, sp in (("plain", softplus_plain), ("rule", softplus_rule), ("precomputed", softplus_pre)):
        xs, params = setup(Value, G)
        loss = program(Value, sp, xs, params)
        sweeps[name] = loss
    mxs, mparams = setup(MGValue, G)
    mloss = program(MGValue, softplus_rule, mxs, mparams)
    n_nodes = {k: 0 for k in sweeps}
    for k, loss in sweeps.items():
        before = tapead.tape_stats()["nodes"]
        n_nodes[k] = before  # (nodes on the tape: reported below only as context)
    bt = {k: [] for k in list(sweeps) + ["micrograd"]}
    for _ in range(R):
        for k, loss in sweeps.items():
            bt[k].append(timed(loss.backward))
        bt["micrograd"].append(timed(mloss.backward))
    bm = {k: statistics.median(v) for k, v in bt.items()}
    print("\n| backward() alone | us per group | x micrograd |")
    print("| --- | --- | --- |")
    for k, v in bm.items():
        print(f"| {k} | {v / G * 1e6:.3f} | {bm['micrograd'] / v:.1f}x faster |")

    # a graph with no custom node: its sweep, with and without custom nodes elsewhere on the tape
    del sweeps, kinds
    gc.collect(); tapead.collect()
    xs, params = setup(Value, G)
    plain = program(Value, softplus_plain, xs, params)
    alone = []
    beside = []
    for _ in range(R):
        alone.append(timed(plain.backward))
    others = [program(Value, softplus_rule, *setup(Value, G)) for _ in range(2)]
    for _ in range(R):
        beside.append(timed(plain.backward))
    for _ in range(R):
        alone.append(timed(plain.backward))
    a_, b_ = statistics.median(alone), statistics.median(beside)
    print(f"\nplain graph's backward: {a_ / G * 1e6:.3f} us/group with no custom node on the tape, "
          f"{b_ / G * 1e6:.3f} with {len(others) * G} custom nodes elsewhere on it: "
          f"ratio {b_ / a_:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(groups=G, rounds=R, front=tapead.FRONT,
                           end_to_end_us_group={k: v / G * 1e6 for k, v in med.items()},
                           backward_us_group={k: v / G * 1e6 for k, v in bm.items()},
                           beside_over_alone=b_ / a_), f, indent=2)
        print(f"\nresults written to {a.json}")


if __name__ == "__main__":
    main()
