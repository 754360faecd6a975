"""Replay at scale: Programs on every core, on Dask, against their peers in the same run.

Every figure is a median of repeats timed in alternation with its peer (a
shared machine's load hits both alike); ratios compare those medians.

  mc       Monte Carlo pathwise Greeks per path (examples/monte_carlo_greeks.py's
           European and Asian calls, prog.grad(Z, per_sample=True), normals drawn
           beforehand) against the same pathwise formulas hand-written in
           vectorised numpy; tapead at 1 thread and at all cores
  threads  the demo model's per-sample hinge loss over a 200,000-row batch:
           prog.grad at threads=1 against threads=2 (and all cores); same bits
  dask     a million European paths through tapead.dask.grad on a LocalCluster
           of 2 worker processes against prog.grad in this process (all cores)
  demo     the demo's batched-replay training step (100 rows, prog.grad + numpy
           SGD, one thread) against JAX jit(value_and_grad) + the same SGD, float64,
           the process pinned to one core (skipped if JAX is not installed); and
           the time to the first step (record + compile, against JAX's trace + jit)

Run: python benchmarks/bench_scale.py [--quick] [--json FILE] [section ...]

numpy's BLAS is held to one thread here: the numpy peer is single-threaded
vectorised numpy, and OpenBLAS's idle threads (started by numpy_asian's S @ tk)
spin for a while after a call, which a profile of this benchmark showed.
Thread scaling needs an idle second core: on a shared machine, look at the
load before believing a 1.0x.
"""
import os
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import time

import numpy as np

import tapead
import tapead.nn
from tapead import demo
from tapead.replay import cores

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("mc", os.path.join(HERE, "..", "examples",
                                                                  "monte_carlo_greeks.py"))
mc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mc)


from bench_replay import once  # noqa: E402  (the same timing helper as the other benchmarks)


def paired(fns, repeats, inner=1):
    """Medians of each fn, timed in alternation."""
    ts = [[] for _ in fns]
    for _ in range(repeats):
        for t, fn in zip(ts, fns):
            t.append(once(fn, inner))
    return [statistics.median(t) for t in ts]


# ------------------------------------------------------------------- mc
def numpy_european(Z, s0=mc.S0, sigma=mc.SIGMA, r=mc.RATE, k=mc.STRIKE, t=mc.T):
    """Per path: payoff and pathwise delta, vega, rho, vectorised by hand."""
    z = Z[:, 0]
    sq = math.sqrt(t)
    ST = np.exp(z * (sigma * sq) + (r - 0.5 * sigma * sigma) * t)
    ST *= s0
    disc = math.exp(-r * t)
    itm = ST > k
    pay = np.maximum(ST - k, 0.0)
    pay *= disc
    dS = np.where(itm, ST, 0.0)
    dS *= disc
    return pay, dS / s0, dS * (z * sq - sigma * t), dS * t - t * pay


def numpy_asian(Z, s0=mc.S0, sigma=mc.SIGMA, r=mc.RATE, k=mc.STRIKE, t=mc.T):
    """The same for the arithmetic-average Asian call (Z: paths x dates)."""
    m = Z.shape[1]
    dt = t / m
    tk = dt * np.arange(1, m + 1)
    W = np.cumsum(Z, axis=1)
    W *= math.sqrt(dt)                        # Brownian motion at the dates
    S = np.exp(sigma * W + (r - 0.5 * sigma * sigma) * tk)
    S *= s0
    A = S.mean(axis=1)
    disc = math.exp(-r * t)
    itm = A > k
    pay = np.maximum(A - k, 0.0) * disc
    w = np.where(itm, disc / m, 0.0)
    delta = w * S.sum(axis=1) / s0
    vega = w * (S * (W - sigma * tk)).sum(axis=1)
    rho = w * (S @ tk) - t * pay
    return pay, delta, vega, rho


def bench_mc(quick):
    n = 200_000 if quick else 1_000_000
    reps = 5 if quick else 11
    out = []
    for name, prog, ref, cols in (("European", mc.european(), numpy_european, 1),
                                  ("Asian (12 dates)", mc.asian(12), numpy_asian, 12)):
        Z = np.random.default_rng(0).standard_normal((n, cols))
        a = np.column_stack(ref(Z))
        Y, G = prog.grad(Z, per_sample=True)
        assert np.allclose(np.column_stack([Y, G]), a, rtol=1e-9, atol=1e-9), name
        t_np, t1, tall = paired([lambda: ref(Z), lambda: prog.grad(Z, per_sample=True, threads=1),
                                 lambda: prog.grad(Z, per_sample=True, threads=None)], reps)
        print(f"  {name:17s} numpy {t_np / n * 1e9:6.1f} ns/path   tapead 1 thread "
              f"{t1 / n * 1e9:6.1f} ns/path ({t1 / t_np:4.2f}x numpy)   {cores()} threads "
              f"{tall / n * 1e9:6.1f} ns/path ({tall / t_np:4.2f}x numpy)")
        out.append((name, t_np / n, t1 / n, tall / n))
    return {name: dict(numpy_ns_path=a * 1e9, threads1_ns_path=b * 1e9, all_cores_ns_path=c * 1e9)
            for name, a, b, c in out}


# -------------------------------------------------------------- threads
def demo_program():
    model, X, y = demo.setup(tapead.nn)
    x0, x1, yi = tapead.Value(0.0), tapead.Value(0.0), tapead.Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    return tapead.compile([hinge], [x0, x1, yi], wrt=model.parameters()), X, y


def bench_threads(quick):
    prog, _, _ = demo_program()
    n = 50_000 if quick else 200_000
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.uniform(-1.5, 2.5, (n, 2)), rng.choice([-1.0, 1.0], n)])
    seed = np.full(1, 1.0 / n)
    r1, r2 = prog.grad(X, seed=seed, threads=1), prog.grad(X, seed=seed, threads=2)
    same = all(np.array_equal(a, b) for a, b in zip(r1, r2))
    t1, t2 = paired([lambda: prog.grad(X, seed=seed, threads=1),
                     lambda: prog.grad(X, seed=seed, threads=2)], 5 if quick else 9)
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(5):
        prog.grad(X, seed=seed, threads=2)
    busy = (time.process_time() - c0) / (time.perf_counter() - w0)
    print(f"  demo model, {n:,} rows, summed gradients: 1 thread {t1 * 1e3:7.1f} ms "
          f"({t1 / n * 1e9:.0f} ns/row)   2 threads {t2 * 1e3:7.1f} ms   speed-up {t1 / t2:4.2f}x   "
          f"same bits: {same}\n  (cores this process got while running 2 threads: {busy:.2f}; "
          f"below ~1.9 another process held one)")
    t1, t2 = paired([lambda: prog.grad(X, per_sample=True, threads=1),
                     lambda: prog.grad(X, per_sample=True, threads=2)], 5 if quick else 9)
    print(f"  the same, per-sample gradients:   1 thread {t1 * 1e3:7.1f} ms   2 threads "
          f"{t2 * 1e3:7.1f} ms   speed-up {t1 / t2:4.2f}x")
    return t1 / t2


# ----------------------------------------------------------------- dask
def bench_dask(quick):
    import dask.array as da
    from distributed import Client, LocalCluster
    import tapead.dask
    prog = mc.european()
    n = 200_000 if quick else 1_000_000
    Z = np.random.default_rng(2).standard_normal((n, 1))
    t0 = time.perf_counter()
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1", silence_logs=40) as cluster, Client(cluster) as client:
        t_start = time.perf_counter() - t0
        X = client.persist(da.from_array(Z, chunks=(1 << 17, 1)))   # the data lives on the workers

        def on_cluster():   # every path's price and Greeks back in this process
            return client.compute(list(tapead.dask.grad(prog, X, per_sample=True)), sync=True)

        def means_on_cluster():   # price and Greeks averaged on the workers
            Y, G = tapead.dask.grad(prog, X, per_sample=True)
            return client.compute([Y.mean(axis=0), G.mean(axis=0)], sync=True)

        def means_local():
            Y, G = prog.grad(Z, per_sample=True)
            return Y.mean(axis=0), G.mean(axis=0)
        Yd, Gd = on_cluster()
        Yl, Gl = prog.grad(Z, per_sample=True)
        same = np.array_equal(Yd, Yl) and np.array_equal(Gd, Gl)
        t_local, t_dask, t_lm, t_dm = paired([lambda: prog.grad(Z, per_sample=True), on_cluster,
                                              means_local, means_on_cluster], 3 if quick else 7)
    print(f"  {n:,} European paths, per-sample: local ({cores()} threads) {t_local * 1e3:7.1f} ms   "
          f"LocalCluster (2 processes) {t_dask * 1e3:7.1f} ms ({t_dask / t_local:4.1f}x local; "
          f"{n * 4 * 8 / 2 ** 20:.0f} MiB of results sent back)   same bits: {same}")
    print(f"  the same, averaged where computed: local {t_lm * 1e3:7.1f} ms   LocalCluster "
          f"{t_dm * 1e3:7.1f} ms ({t_dm / t_lm:4.1f}x local)   cluster start {t_start:.1f} s")


# ----------------------------------------------------------------- demo
def jax_steps():
    """The demo's model, loss and SGD in JAX, float64: two steps, (k) -> loss: jit(value_and_grad)
    then a jitted SGD update, and the whole step in one jit; the time to the first step; version."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    t0 = time.perf_counter()
    _, X, y = demo.setup(tapead.nn)
    rng = np.random.default_rng(0)
    params = [(jnp.asarray(rng.uniform(-1, 1, s)), jnp.asarray(rng.uniform(-1, 1, s[1])))
              for s in [(2, 16), (16, 16), (16, 1)]]
    Xj, yj = jnp.asarray(X), jnp.asarray(y, dtype=jnp.float64)

    def loss(ps):
        h = Xj
        for i, (W, b) in enumerate(ps):
            h = h @ W + b
            if i < 2:
                h = jax.nn.relu(h)
        data = jnp.mean(jax.nn.relu(1 - yj * h[:, 0]))
        return data + 1e-4 * sum(jnp.sum(W * W) + jnp.sum(b * b) for W, b in ps)
    vg = jax.jit(jax.value_and_grad(loss))
    sgd = jax.jit(lambda ps, g, lr: jax.tree_util.tree_map(lambda p, d: p - lr * d, ps, g))

    @jax.jit
    def whole(ps, lr):
        val, g = jax.value_and_grad(loss)(ps)
        return val, jax.tree_util.tree_map(lambda p, d: p - lr * d, ps, g)
    state = {"a": params, "b": params}

    def step_vg(k):
        val, g = vg(state["a"])
        state["a"] = sgd(state["a"], g, 1.0 - 0.9 * k / 100)
        return float(val)

    def step_whole(k):
        val, state["b"] = whole(state["b"], 1.0 - 0.9 * k / 100)
        return float(val)
    step_vg(0)
    first = time.perf_counter() - t0
    step_whole(0)
    return step_vg, step_whole, first, jax.__version__


def bench_demo(quick):
    t0 = time.perf_counter()
    model, X, y = demo.setup(tapead.nn)
    step = demo.batched_trainer(model, X, y, tapead.Value)
    step(0)
    first = time.perf_counter() - t0
    prog, _, _ = demo_program()
    Xy = np.column_stack([X, y]).astype(np.float64)
    seed = np.full(1, 1.0 / len(y))
    counters = {}

    def cycle(name, fn):
        counters[name] = 0

        def run():
            fn(counters[name] % 100); counters[name] += 1
        return run
    fns = [cycle("tapead", step), lambda: prog.grad(Xy, seed=seed, threads=1)]
    try:
        step_vg, step_whole, jfirst, ver = jax_steps()
        fns += [cycle("vg", step_vg), cycle("whole", step_whole)]
    except ImportError:
        ver = None
    ts = paired(fns, 9 if quick else 21, 50 if quick else 200)
    print(f"  tapead batched-replay step {ts[0] * 1e6:6.1f} us (of which prog.grad "
          f"{ts[1] * 1e6:5.1f} us); first step {first * 1e3:.1f} ms (record, compile, one step)")
    if ver is None:
        print("  JAX is not installed: comparison skipped (pip install jax)")
        return
    print(f"  JAX {ver}: jit(value_and_grad) + jitted SGD {ts[2] * 1e6:6.1f} us, whole step in one "
          f"jit {ts[3] * 1e6:6.1f} us; first step {jfirst * 1e3:.0f} ms\n"
          f"  tapead step / JAX step: {ts[0] / ts[2]:4.2f}x (value_and_grad), "
          f"{ts[0] / ts[3]:4.2f}x (one jit);  first step JAX / tapead: {jfirst / first:.0f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--json", metavar="FILE", help="also write the mc section's figures as JSON")
    ap.add_argument("--pinned", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("sections", nargs="*", default=["mc", "threads", "dask", "demo"],
                    choices=[[], "mc", "threads", "dask", "demo"], help="default: all four")
    args = ap.parse_args()
    results = {}
    print(f"tapead {tapead.__version__} bench_scale ({'quick' if args.quick else 'full'}); "
          f"medians of interleaved repeats; {cores()} cores, shared", flush=True)
    for s in args.sections:
        print(f"\n{s}:", flush=True)
        if s == "demo" and not args.pinned and hasattr(os, "sched_setaffinity"):
            # one core for the whole process, JAX's threads included
            cpu = min(os.sched_getaffinity(0))
            subprocess.run([sys.executable, __file__, "--pinned", "demo"]
                           + (["--quick"] if args.quick else []),
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), check=True)
            continue
        got = {"mc": bench_mc, "threads": bench_threads, "dask": bench_dask, "demo": bench_demo}[s](
            args.quick)
        if s == "mc":
            results[s] = got
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(quick=args.quick, cores=cores(), results=results), f, indent=2)
        print(f"\nresults written to {args.json}")


if __name__ == "__main__":
    main()
