"""The plain-Values demo step against its own Python skeleton.

python benchmarks/bench_plain_floor.py

The demo model written with plain Values (tapead.bench.plain_stepper) spends
most of its time in the user's own Python: generator expressions, zip, sum
and list building.  This times that skeleton on plain floats (no graph, no
objects: the least any scalar library could cost per step) in the same
rounds as tapead's whole step (forward, backward, SGD), xad-py's and
micrograd's.
"""
import statistics

import tapead
from tapead import bench


def main(rounds=7):
    runs = {name: bench.plain_stepper(lib) for name, lib in
            (("skeleton (floats)", "floats"), ("tapead", "tapead"), ("xad-py", "xad"),
             ("micrograd", "micrograd"))}
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
