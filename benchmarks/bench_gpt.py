"""The microgpt migration's figures: one training step
of examples/gpt.py (a microgpt-style GPT, ~57k tape nodes a step) on its
plain-Python scalar Value, on tapead.Value as a drop-in, and on the fast
path (tapead.linear + tapead.optim.Adam), medians of interleaved rounds;
and tapead.dot over 16 terms against the generator sum it replaces.  The
rows are tapead.bench's gpt rows (python -m tapead.bench --gpt), here with
more rounds and, with --pypy, the same rows run by PyPy in the same
run (its drop-in against plain Python on PyPy).

    python benchmarks/bench_gpt.py [--rounds R] [--pypy PATH-TO-PYPY-PYTHON]

--parts: what a compiled step (examples/gpt.py --compiled) spends its time
on, in a training loop over the documents as the example runs it: the
jit call (its Program's forward and reverse in C, and jit's own Python:
the shape, the token row, adding the gradient to .grad), the Program's
run alone (Program.grad on the step's row, timed just before the step),
Adam's step over the 3,904 parameters and zero_grad; medians over
R x 100 steps.

    python benchmarks/bench_gpt.py --parts [--rounds R]
"""
import argparse
import statistics
import subprocess
import sys
import time

from tapead.bench import compiled_step, gpt_example, gpt_rows


def parts(rounds):
    import numpy as np
    gpt = gpt_example()
    if gpt is None:
        sys.exit("examples/gpt.py is not in this tree")
    model, docs, encode, _, _ = gpt.setup("compiled")
    step = compiled_step(model, docs, encode)
    t = {"program": [], "jit": [], "adam": [], "zero_grad": [], "step": []}
    for k in range(rounds * 100):
        tokens = encode(docs[k % len(docs)])
        prog = step._program((tokens,))[1]
        X = np.array([tokens], dtype=np.float64)
        t0 = time.perf_counter()
        prog.grad(X, threads=1)
        t1 = time.perf_counter()
        step(tokens)
        t2 = time.perf_counter()
        model.opt.lr = model.lr * (1 - k / (rounds * 100))
        model.opt.step()
        t3 = time.perf_counter()
        model.opt.zero_grad()
        t4 = time.perf_counter()
        for name, dt in (("program", t1 - t0), ("jit", t2 - t1), ("adam", t3 - t2),
                         ("zero_grad", t4 - t3), ("step", t4 - t1)):
            t[name].append(dt)
    us = {name: statistics.median(v) * 1e6 for name, v in t.items()}
    print(f"the compiled step's parts, medians over {rounds * 100} steps (us):")
    for label, name in (("step (jit call + Adam + zero_grad)", "step"), ("jit call", "jit"),
                        ("its Program's run alone", "program"),
                        (f"Adam's step, {len(model.params):,} parameters", "adam"), ("zero_grad", "zero_grad")):
        print(f"  {label:<38}{us[name]:8.1f}")


def show(rows):
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pypy", help="a PyPy python with tapead installed: run the rows there too")
    ap.add_argument("--parts", action="store_true", help="the compiled step's parts instead (see above)")
    args = ap.parse_args()
    if args.parts:
        parts(args.rounds)
        return
    got = gpt_rows(args.rounds)
    if got is None:
        sys.exit("examples/gpt.py is not in this tree")
    show(got[0])
    if args.pypy:
        sys.stdout.flush()
        code = f"from tapead.bench import gpt_rows\nfor r in gpt_rows({args.rounds})[0]: print('| ' + ' | '.join(r) + ' |')"
        subprocess.run([args.pypy, "-c", code], check=True)


if __name__ == "__main__":
    main()
