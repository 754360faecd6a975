"""micrograd's demo (moons, MLP(2,[16,16,1]), SVM loss + L2, 100 SGD steps) three ways:

1. eager: record a fresh graph every step, as micrograd's notebook does;
2. recompute: record once, then per step loss.recompute(), zero_grad, backward,
   tapead.optim.SGD step: no per-node Python;
3. batched replay: record the per-sample loss once, compile it, and run all
   100 samples per step through the compiled Program (numpy in, numpy out).

All three must log the same losses (to 1e-9 relative); the script checks and prints.
Run: python examples/moons_replay.py
"""
import sys
import time

import tapead
import tapead.nn
from tapead import demo


def run(trainer, steps=100):
    model, X, y = demo.setup(tapead.nn)
    step = trainer(model, X, y, tapead.Value)
    t0 = time.perf_counter()
    losses = [step(k) for k in range(steps)]
    return losses, (time.perf_counter() - t0) / steps


def eager(model, X, y, Value):
    return lambda k: demo.step(model, X, y, Value, k)[0]


def main():
    runs = {"eager": run(eager), "recompute": run(demo.recompute_trainer),
            "batched": run(demo.batched_trainer)}
    for k in (0, 99):
        print(f"step {k:2d}  " + "  ".join(f"{name} {r[0][k]:.16g}" for name, r in runs.items()))
    ref = runs["eager"][0]
    ok = True
    for name, (losses, per_step) in runs.items():
        worst = max(abs(a - b) / abs(a) for a, b in zip(ref, losses))
        ok = ok and worst <= 1e-9
        print(f"{name:9s} {per_step * 1e3:8.2f} ms/step   max relative difference from eager {worst:.3g}")
    print("OK: same losses to 1e-9 relative" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
