"""The generated source of every kernel shape for a fixed set of programs,
recorded as hashes in tests/codegen_golden.json: the code generator's output
must not change unless a change means it to.

    python tests/codegen_golden.py            # check (what tests/test_codegen.py runs)
    python tests/codegen_golden.py --update   # record the current sources
    python tests/codegen_golden.py --dump DIR # write every source into DIR (to diff two versions)

Programs: micrograd's demo step (a network: 337 parameters, 100 rows), a
European call's price and Greeks, the fastest-autograd graph at 60 ops (past
the split size), and a small program with guards, uniform nodes and
parameters.  Shapes: every CPU shape (tapead.codegen.SHAPES) and the generated CUDA."""
import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "codegen_golden.json")


def programs():
    """name -> a compiled (interpreted) Program, each recorded the same way every time."""
    import tapead
    from tapead import Value, demo
    tapead.clear_guards()
    out = {}
    model, X, y = demo.setup(tapead.nn)
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    out["demo"] = tapead.compile([hinge], [x0, x1, yi], wrt=model.parameters(), native=False)

    S0, K, r, sig, T = (Value(v) for v in (100.0, 105.0, 0.03, 0.2, 1.0))
    z = Value(0.0)
    ST = S0 * ((r - 0.5 * sig * sig) * T + sig * T.sqrt() * z).exp()
    pay = (ST - K).relu() * (-r * T).exp()
    out["european"] = tapead.compile([pay], [z], wrt=[S0, sig, r], native=False)

    sys.path.insert(0, os.path.join(HERE, os.pardir, "benchmarks"))
    try:
        from fastest_autograd import graph
    finally:
        sys.path.pop(0)
    rng = random.Random(0)
    xs = [Value(rng.uniform(-1, 1)) for _ in range(100)]
    out["fastest60"] = tapead.compile(graph(xs, 60), xs, wrt=xs, native=False)

    tapead.clear_guards()
    a, b = Value(0.7), Value(-0.4)            # inputs
    w, u = Value(1.5), Value(0.25)            # parameters
    h = (w * u).exp() + w / 3.0               # uniform nodes
    t = a * h + b * w
    s = t.tanh() if t > 0 else (t * t).log1p()        # guard on a row value
    q = s * u if w > u else s - u                     # guard on parameters
    r2 = (a ** 2 + b ** -2.0).sqrt() if a * a < 4 else a
    out["guards"] = tapead.compile([q, r2, q * r2 + h], [a, b], wrt=[w, u, a], native=False)
    tapead.clear_guards()
    return out


def sources():
    """(program, shape, part) -> source text."""
    from tapead import codegen
    res = {}
    for name, prog in programs().items():
        code = codegen.Code.of(prog)
        shapes = {name: codegen.printer(s) for name, s in codegen.SHAPES.items()}
        for sname, t in shapes.items():
            units = t.units(code, 3) if sname in ("split", "rows") else t.units(code)
            for i, text in enumerate(units):
                res[(name, sname, f"unit{i}")] = text
            res[(name, sname, "nscratch")] = str(t.nscratch)
        for mode in ("fwd", "ps"):
            res[(name, "cuda", mode)] = codegen.CUDAPrinter(mode).source(code)
    return res


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def current():
    return {"/".join(k): digest(v) for k, v in sorted(sources().items())}


def main(argv):
    if "--update" in argv:
        with open(GOLDEN, "w") as f:
            json.dump(current(), f, indent=1, sort_keys=True)
            f.write("\n")
        return 0
    if "--dump" in argv:
        d = argv[argv.index("--dump") + 1]
        os.makedirs(d, exist_ok=True)
        for k, v in sources().items():
            with open(os.path.join(d, "-".join(k) + ".c"), "w") as f:
                f.write(v)
        return 0
    with open(GOLDEN) as f:
        want = json.load(f)
    got = current()
    bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    for k in bad:
        print(f"differs: {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
