"""The microgpt migration's figures: one training step
of examples/gpt.py (a microgpt-style GPT, ~57k tape nodes a step) on its
plain-Python scalar Value, on tapead.Value as a drop-in, and on the fast
path (tapead.linear + tapead.optim.Adam), medians of interleaved rounds;
and tapead.dot over 16 terms against the generator sum it replaces.  The
rows are tapead.bench's gpt rows (python -m tapead.bench --gpt), here with
more rounds and, with --pypy, the same rows run by PyPy in the same
run (its drop-in against plain Python on PyPy).

    python benchmarks/bench_gpt.py [--rounds R] [--pypy PATH-TO-PYPY-PYTHON]
"""
import argparse
import subprocess
import sys

from tapead.bench import gpt_rows


def show(rows):
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pypy", help="a PyPy python with tapead installed: run the rows there too")
    args = ap.parse_args()
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
