"""Native replay benchmarks (docs/native.md): generated C (native=True) against
the interpreter, and the interpreter against a hand-written C tape interpreter,
each pair in the same run, medians of interleaved repeats, one thread.  Times
are the process's CPU time per call (time.process_time: on a shared machine it
moves less with the load than the wall clock does; one thread, so the two agree
on an idle one).

1. European call, price and pathwise delta, vega, rho per path (per-sample
   gradients), 2^17 paths: native=True vs the interpreter.
2. The demo training step's batched replay (tapead.demo.batched_trainer's
   program: hinge loss of micrograd's MLP over 100 rows, summed gradients,
   params=): native=True vs the interpreter.
3. The "Fastest Autograd in the West" workload (100 inputs, 10k ops cycling
   softplus, a 4-term sum, a product, a 4-way softmax over a sliding window;
   forward and reverse per row, the 100 input gradients per row): the Program
   as native=None runs it (the interpreter) vs benchmarks/fa_ref.c (gcc -O3).
4. The first call of a 1,000-node program of operations (that workload at
   190 ops), compile included, empty kernel cache: native=True (no shape is
   faster than the interpreter for such a program, so it runs the
   interpreter and builds nothing), native=None, and the split shape named
   (native="split": the build a large program costs), with that kernel's
   time per row against the interpreter's.
5. A GPT's loss (examples/gpt.py's model, fast path, one four-letter name; all
   its parameters in wrt: a program of uniform nodes): the first call of
   native=True (compile included, empty cache), the interpreter's first
   call, and the gradient's replay, native vs the interpreter.

Run: python benchmarks/bench_native.py [--quick] [--json FILE]
     python benchmarks/bench_native.py --fa [--quick] [--summed]   # section 3 alone
       (--summed: the Program sums the gradients over the rows; the reference
       still computes them per row, the same work)
     python benchmarks/bench_native.py --first [--quick]             # section 4 alone
     python benchmarks/bench_native.py --demo [--quick]              # sections 1 and 2 alone
     python benchmarks/bench_native.py --gpt [--quick]               # section 5 alone
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# one thread measured by process CPU time: OpenBLAS's idle threads (numpy starts
# them) would add their spinning to it
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import tapead
import tapead.nn
from tapead import Value, codegen, demo, native

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # run from anywhere
from fastest_autograd import graph  # noqa: E402  (the workload, written once)

def _args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller workloads, 5 repeats")
    ap.add_argument("--fa", action="store_true", help="section 3 alone")
    ap.add_argument("--summed", action="store_true", help="section 3: gradients summed over the rows")
    ap.add_argument("--first", action="store_true", help="section 4 alone")
    ap.add_argument("--demo", action="store_true", help="sections 1 and 2 alone")
    ap.add_argument("--gpt", action="store_true", help="section 5 alone")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return ap.parse_args()


ARGS = _args() if __name__ == "__main__" else argparse.Namespace(
    quick=False, fa=False, summed=False, first=False, demo=False, gpt=False, json=None)
QUICK, FA_ONLY, SUMMED = ARGS.quick, ARGS.fa, ARGS.summed
FIRST_ONLY, DEMO_ONLY, GPT_ONLY = ARGS.first, ARGS.demo, ARGS.gpt
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = {}     # the figures, for --json


def cpu(fn, inner):
    t0 = time.process_time()
    for _ in range(inner):
        fn()
    return (time.process_time() - t0) / inner


def paired(fa, fb, inner, repeats):
    """Medians of a and b, timed in alternation."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(cpu(fa, inner))
        tb.append(cpu(fb, inner))
    return statistics.median(ta), statistics.median(tb)


def same(a, b):
    if isinstance(a, tuple):
        return all(same(u, v) for u, v in zip(a, b))
    return a.tobytes() == b.tobytes()


def european():
    S0, K, r, sig, T = (Value(v) for v in (100.0, 105.0, 0.03, 0.2, 1.0))
    z = Value(0.0)
    ST = S0 * ((r - 0.5 * sig * sig) * T + sig * T.sqrt() * z).exp()
    pay = (ST - K).relu() * (-r * T).exp()
    return [pay], [z], [S0, sig, r]


def fastest_autograd(n_ops):
    """(output, inputs) of arogozhnikov's graph: softplus as log1p(exp x); the
    softmax shifted by its inputs' maximum at recording (a constant)."""
    xs = [Value(float(v)) for v in np.random.default_rng(0).uniform(-1, 1, 100)]
    return graph(xs, n_ops), xs


def fa_ref():
    """benchmarks/fa_ref.c built with gcc -O3 into a temporary folder: its fa_run."""
    d = tempfile.mkdtemp(prefix="fa_ref")
    so = os.path.join(d, "fa_ref.so")
    cc = native.compiler() or ["cc"]
    subprocess.run(cc + ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-o", so,
                         os.path.join(HERE, "fa_ref.c"), "-lm"], check=True)
    f = ctypes.CDLL(so).fa_run
    f.argtypes = [ctypes.c_int, ctypes.c_int64] + [ctypes.c_void_p] * 3
    f.restype = ctypes.c_int
    return f


def fastest(reps):
    """Section 3: the fastest-autograd workload, tapead (native=None) vs fa_ref.c."""
    n_ops = 2000 if QUICK else 10000
    out, xs = fastest_autograd(n_ops)
    prog = tapead.compile(out, xs, wrt=xs)            # native=None: what it picks
    ref = fa_ref()
    B = 32
    R = np.ascontiguousarray(np.random.default_rng(2).uniform(-1, 1, (B, 100)))
    Yr, Gr = np.empty(B), np.empty((B, 100))
    run_ref = lambda: ref(n_ops, B, R.ctypes.data, Yr.ctypes.data, Gr.ctypes.data)  # noqa: E731
    run_ref()
    Yp, Gp = prog.grad(R, per_sample=True)
    assert np.allclose(Yp.ravel(), Yr, rtol=1e-9) and np.allclose(Gp, Gr, rtol=1e-6, atol=1e-12)
    mine = ((lambda: prog.grad(R, threads=1)) if SUMMED                      # noqa: E731
            else (lambda: prog.grad(R, per_sample=True, threads=1)))
    tp, tr = paired(mine, run_ref, 1, reps)
    RESULTS["fastest_autograd"] = dict(ops=n_ops, nodes=prog.nodes, summed=SUMMED, tapead_us_row=tp / B * 1e6,
                                       fa_ref_us_row=tr / B * 1e6)
    print(f"\n3. fastest-autograd, {n_ops} ops ({prog.nodes} nodes), per row (forward + reverse, "
          f"100 gradients{', summed over the rows' if SUMMED else ''}), {prog!r}:\n   tapead {tp / B * 1e6:7.1f} us/row   "
          f"hand-written C tape (fa_ref.c, -O3) {tr / B * 1e6:7.1f} us/row   ratio {tp / tr:5.2f}x")
    return R


def main():
    reps = 5 if QUICK else 11
    print(f"tapead native replay benchmarks ({'quick' if QUICK else 'full'}); medians of {reps} "
          f"interleaved repeats; CPU time, one thread; {os.cpu_count()} cores, shared")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TAPEAD_CACHE"] = cache
        sections(reps)
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(dict(quick=QUICK, repeats=reps, cores=os.cpu_count(), results=RESULTS), f, indent=2)
        print(f"\nresults written to {ARGS.json}")


def sections(reps):
    if FA_ONLY:
        fastest(reps)
        return
    if FIRST_ONLY:
        first(np.random.default_rng(2).uniform(-1, 1, (32, 100)))
        return
    if GPT_ONLY:
        gpt_section(reps)
        return
    european_section(reps)
    demo_section(reps)
    if DEMO_ONLY:
        return
    first(fastest(reps))
    gpt_section(reps)


def european_section(reps):
    """Section 1: the European call, native=True against the interpreter."""
    outs, ins, wrt = european()
    interp = tapead.compile(outs, ins, wrt=wrt, native=False)
    t0 = time.perf_counter()
    nat = tapead.compile(outs, ins, wrt=wrt, native=True)
    build = time.perf_counter() - t0
    Z = np.random.default_rng(1).standard_normal((1 << 17, 1))
    assert same(interp.grad(Z, per_sample=True), nat.grad(Z, per_sample=True))
    ti, tn = paired(lambda: interp.grad(Z, per_sample=True, threads=1),
                    lambda: nat.grad(Z, per_sample=True, threads=1), 3, reps)
    shape = codegen.choose(codegen.Code.of(nat))
    RESULTS["european"] = dict(nodes=interp.nodes, shape=shape, build_s=build, interpreter_ns_path=ti / len(Z) * 1e9,
                               native_ns_path=tn / len(Z) * 1e9)
    print(f"\n1. European call, per-path price + delta/vega/rho ({interp.nodes} nodes, {shape} shape, build "
          f"{build:.2f} s): interpreter {ti / len(Z) * 1e9:6.1f} ns/path   native "
          f"{tn / len(Z) * 1e9:6.1f} ns/path   ratio {tn / ti:5.2f}x")


def demo_section(reps):
    """Section 2: the demo's batched step, native=True against the interpreter."""
    model, X, y = demo.setup(tapead.nn)
    params = model.parameters()
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    interp = tapead.compile([hinge], [x0, x1, yi], wrt=params, native=False)
    t0 = time.perf_counter()
    nat = tapead.compile([hinge], [x0, x1, yi], wrt=params, native=True)
    build = time.perf_counter() - t0
    Xy = np.column_stack([X, y]).astype(np.float64)
    seed, w = np.full(1, 1.0 / len(y)), np.array([p.data for p in params])
    assert same(interp.grad(Xy, seed=seed, params=w), nat.grad(Xy, seed=seed, params=w))
    ti, tn = paired(lambda: interp.grad(Xy, seed=seed, params=w, threads=1),
                    lambda: nat.grad(Xy, seed=seed, params=w, threads=1), 100, reps)
    shape = codegen.choose(codegen.Code.of(nat))
    print(f"\n2. demo batched step ({interp.nodes} nodes, 100 rows, {shape} shape, build {build:.1f} s): "
          f"interpreter {ti * 1e6:7.1f} us   native {tn * 1e6:7.1f} us   ratio {tn / ti:5.2f}x")
    ci, cn = paired(c_call(interp, Xy, seed, w), c_call(nat, Xy, seed, w), 100, reps)
    print(f"   the C call alone (ta_prog_run, its arguments made once): interpreter {ci * 1e6:7.1f} us"
          f"   native {cn * 1e6:7.1f} us   ratio {cn / ci:5.2f}x; the rest of a call (Python: "
          f"checking and wrapping the arrays) {(ti - ci) * 1e6:.1f} / {(tn - cn) * 1e6:.1f} us")
    RESULTS["demo"] = dict(nodes=interp.nodes, shape=shape, build_s=build, interpreter_us=ti * 1e6,
                           native_us=tn * 1e6, interpreter_c_us=ci * 1e6, native_c_us=cn * 1e6)


def c_call(prog, X, seed, w):
    """prog.grad(X, seed=seed, params=w, threads=1) without its Python: the
    C call alone, on a ta_run_t filled once (tapead._c.program.prog_run fills
    it per call)."""
    from tapead._c import f64, ffi, lib
    Y, G, P = np.empty((len(X), 1)), np.zeros(len(w)), np.empty((1, len(w)))
    keep = [f64(a) for a in (X, Y, w, seed, G, P)]
    r, f = ffi.new("ta_run_t *"), ffi.new("ta_fail_t *")
    r.B, r.nin, r.nout, r.nwrt, r.npar, r.threads = len(X), X.shape[1], 1, len(w), len(w), 1
    r.X, r.Y, r.params, r.seed, r.G, r.parts = keep
    r.seedmode, r.nblocks = 1, 1
    run = lib.ta_prog_run

    def call():
        assert run(prog._p, r, f) == 0, keep
    return call


def first(R):
    """Section 4: the first call of a 1,000-node program of operations,
    compile included: native=True (the interpreter: no shape is faster),
    native=None, and the split shape named."""
    out, xs = fastest_autograd(190)
    modes = (True, None, "split")
    firsts = {m: [] for m in modes}
    cache = os.environ["TAPEAD_CACHE"]
    for k in range(3 if QUICK else 5):
        for mode in modes:
            os.environ["TAPEAD_CACHE"] = os.path.join(cache, f"first{k}{mode}")
            t0 = time.perf_counter()
            p = tapead.compile(out, xs, wrt=xs, native=mode)
            p.grad(R, per_sample=True)
            firsts[mode].append(time.perf_counter() - t0)
            if mode is True:
                assert not p.native, p       # no shape chosen: the interpreter runs it
    shown = {m: f"{min(t) * 1e3:.1f}-{max(t) * 1e3:.1f} ms" if max(t) < 0.1 else f"{min(t):.2f}-{max(t):.2f} s"
             for m, t in firsts.items()}
    print(f"\n4. first call of a {p.nodes}-node program of operations (32 rows), compile included, empty "
          f"cache (wall clock, {native.jobs()} compilers at once): native=True {shown[True]} (no shape "
          f"is faster: the interpreter, nothing built), native=None {shown[None]}, native=\"split\" "
          f"{shown['split']}")
    nat = tapead.compile(out, xs, wrt=xs, native="split")
    interp = tapead.compile(out, xs, wrt=xs, native=False)
    R2 = np.random.default_rng(4).uniform(-1, 1, (2048, 100))
    assert same(interp.grad(R2, per_sample=True), nat.grad(R2, per_sample=True))
    ti, tn = paired(lambda: interp.grad(R2, per_sample=True, threads=1),
                    lambda: nat.grad(R2, per_sample=True, threads=1), 3, 5 if QUICK else 11)
    print(f"   that program's split kernel per row, per-sample: interpreter "
          f"{ti / len(R2) * 1e6:6.2f} us   native {tn / len(R2) * 1e6:6.2f} us   ratio {tn / ti:5.2f}x")
    RESULTS["first"] = dict(nodes=p.nodes, first_s={str(m): t for m, t in firsts.items()},
                            split_interpreter_us_row=ti / len(R2) * 1e6, split_native_us_row=tn / len(R2) * 1e6)


def gpt_loss():
    """(loss, parameters) of examples/gpt.py's model (fast path) for the first
    four-letter name of its data."""
    sys.path.insert(0, os.path.join(HERE, os.pardir, "examples"))
    import gpt
    model, docs, encode, _, _ = gpt.setup("fast")
    tapead.clear_guards()
    return model.loss(encode(next(d for d in docs if len(d) == 4))), model.params


def gpt_section(reps):
    """Section 5: a GPT's loss over its parameters, native against the interpreter."""
    loss, params = gpt_loss()
    cache = os.environ["TAPEAD_CACHE"]
    os.environ["TAPEAD_CACHE"] = os.path.join(cache, "gpt")
    t0 = time.perf_counter()
    nat = tapead.compile([loss], [], wrt=params, native=True)
    X = np.zeros((1, 0))
    gn = nat.grad(X)
    tn0 = time.perf_counter() - t0
    os.environ["TAPEAD_CACHE"] = cache
    t0 = time.perf_counter()
    interp = tapead.compile([loss], [], wrt=params, native=False)
    gi = interp.grad(X)
    ti0 = time.perf_counter() - t0
    assert same(gi, gn)
    ti, tn = paired(lambda: interp.grad(X, threads=1), lambda: nat.grad(X, threads=1), 20, reps)
    shape = codegen.choose(codegen.Code.of(nat))
    print(f"\n5. GPT loss (examples/gpt.py, one four-letter name, {interp.nodes} nodes, {len(params)} "
          f"parameters in wrt, {shape} shape): first call (compile included, empty cache, "
          f"{native.jobs()} compilers at once) native {tn0:.1f} s, interpreter {ti0 * 1e3:.0f} ms; "
          f"gradient: interpreter {ti * 1e6:7.1f} us   native {tn * 1e6:7.1f} us   ratio {tn / ti:5.2f}x")
    RESULTS["gpt"] = dict(nodes=interp.nodes, shape=shape, first_native_s=tn0, first_interpreter_s=ti0,
                          interpreter_us=ti * 1e6, native_us=tn * 1e6)


if __name__ == "__main__":
    main()
