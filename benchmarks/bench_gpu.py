"""Programs on a GPU against their peers, in one run (benchmarks/gpu_check.sh runs every stage).

    python benchmarks/bench_gpu.py STAGE [--out results.json]

Stages (each independent; each adds its figures to the JSON file):
  european  a European call's price and pathwise delta, vega, rho per path,
            2^24 paths, float64: tapead's generated CUDA against JAX's
            jit(vmap(value_and_grad)) of the same payoff, on the same GPU,
            medians of interleaved repeats after warm-up (ns/path), the
            first call of each, and their largest difference
  big       the fastest-autograd workload (benchmarks/fastest_autograd.py,
            ~50k nodes) over 16,384 rows, per-sample gradients: the
            interpreter kernel against the CPU Program on all cores
  first     the first result in a fresh process (CUDA start-up, compile or
            disk cache, plan, run), for the European program and the big one,
            with an empty kernel cache and with a warm one
  mathdiff  GPU against CPU per math function (1M points each): how many
            results differ and by how many ulps at most; and the largest
            relative difference on the European and every-op programs
  compile   NVRTC compile time of generated straight-line CUDA by program
            size, and its time per row against the interpreter's
Times are medians; ratios are within one run on one machine (the GPU named).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import tapead  # noqa: E402
from tapead import Value  # noqa: E402


def save(out, stage, figures):
    data = {}
    if os.path.exists(out):
        with open(out) as f:
            data = json.load(f)
    data[stage] = figures
    with open(out, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    print(f"[{stage}] " + json.dumps(figures, sort_keys=True), flush=True)


def gpu_name():
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def timed_gpu(fn):
    """Seconds of fn() (device work included: synchronised before and after)."""
    import cupy as cp
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t


def interleaved(fns, repeats):
    """{name: [seconds]} over `repeats` rounds, the fns alternating in each round."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(timed_gpu(fn))
    return times


def rel_diff(a, b):
    """Largest |a - b| relative to each column's largest |b|."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    scale = np.maximum(np.abs(b).max(axis=0), 1e-300)
    return float((np.abs(a - b) / scale).max())


# ------------------------------------------------------------- european
def stage_european(out, paths=1 << 24, repeats=7):
    import cupy as cp
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from monte_carlo_greeks import european, S0, SIGMA, RATE, STRIKE, T
    prog = european()
    Z = cp.asarray(np.random.default_rng(7).standard_normal((paths, 1)))
    t = time.perf_counter()
    Y, G = prog.grad(Z, per_sample=True, device="cuda")
    cp.cuda.Device().synchronize()
    first_tapead = time.perf_counter() - t

    def payoff(p, z):
        s0, sigma, r = p[0], p[1], p[2]
        st = s0 * jnp.exp((r - 0.5 * sigma * sigma) * T + sigma * math.sqrt(T) * z)
        return jnp.maximum(st - STRIKE, 0.0) * jnp.exp(-r * T)
    f = jax.jit(jax.vmap(jax.value_and_grad(payoff), in_axes=(None, 0)))
    p = jnp.array([S0, SIGMA, RATE], dtype=jnp.float64)
    zj = jnp.asarray(cp.asnumpy(Z[:, 0]))
    t = time.perf_counter()
    vj, gj = f(p, zj)
    vj.block_until_ready(); gj.block_until_ready()
    first_jax = time.perf_counter() - t

    def run_tapead():
        prog.grad(Z, per_sample=True, device="cuda")

    def run_jax():
        v, g = f(p, zj)
        v.block_until_ready(); g.block_until_ready()
    interleaved({"tapead": run_tapead, "jax": run_jax}, 2)          # warm-up
    times = interleaved({"tapead": run_tapead, "jax": run_jax}, repeats)
    med = {k: statistics.median(v) for k, v in times.items()}
    # the same numbers? (JAX's exp is XLA's; relu's derivative at 0 is JAX's 0 too)
    dy = rel_diff(cp.asnumpy(Y[:, 0]), np.asarray(vj))
    dg = rel_diff(cp.asnumpy(G), np.asarray(gj))
    Yc, Gc = prog.grad(cp.asnumpy(Z[:1 << 20]), per_sample=True)
    figures = {
        "gpu": gpu_name(), "paths": paths, "repeats": repeats,
        "tapead_ns_per_path": med["tapead"] / paths * 1e9,
        "jax_ns_per_path": med["jax"] / paths * 1e9,
        "tapead_over_jax": med["tapead"] / med["jax"],
        "tapead_ms_all": sorted(x * 1e3 for x in times["tapead"]),
        "jax_ms_all": sorted(x * 1e3 for x in times["jax"]),
        "first_call_s": {"tapead": first_tapead, "jax": first_jax},
        "max_rel_diff_vs_jax": {"price": dy, "greeks": dg},
        "max_rel_diff_vs_cpu_program_2^20_paths": {
            "price": rel_diff(cp.asnumpy(Y[:1 << 20]), Yc), "greeks": rel_diff(cp.asnumpy(G[:1 << 20]), Gc)},
        "means_price_delta_vega_rho": [float(Y.mean())] + [float(x) for x in G.mean(axis=0).get()],
        "kernel": "generated" if prog.nodes <= tapead.cuda.GENERATED_MAX_NODES else "interpreter",
    }
    save(out, "european", figures)
    # where a call's time goes: the generated kernel alone (CUDA events over
    # 20 back-to-back launches, as tapead.cuda.run launches it), a call cut
    # at its launch, and the fixed cost of a call (1,024 paths) against JAX's
    try:
        figures["kernel_only"] = kernel_only(prog, Z, paths)
        figures["per_call"] = per_call(prog, Z, f, p, zj, med)
    except Exception as e:      # (a diagnostic: never losing the figures above)
        figures["per_call_error"] = repr(e)[:500]
    save(out, "european", figures)
    print_breakdown(figures)
    bad = [k for k, v in (("vs JAX", max(dy, dg)),
                          ("vs the CPU Program", max(figures["max_rel_diff_vs_cpu_program_2^20_paths"].values())))
           if not v <= 1e-12]
    ko = figures.get("kernel_only", {})
    if bad or figures.get("per_call_error") or ko.get("failed") or not ko.get("same_as_the_call"):
        sys.exit(f"FAILED european: numbers differ ({bad}) or the breakdown failed "
                 f"({figures.get('per_call_error')}, kernel_only {figures.get('kernel_only')})")


def per_call(prog, Z, f, p, zj, med, repeats=15):
    """A call's time split where its kernel is launched (the launch wrapped
    to note the time; medians of `repeats` calls, synchronised before each),
    and the fixed cost of a call: tapead and JAX on 1,024 paths."""
    import cupy as cp
    from tapead import cuda as tc
    P = tc._plan(prog, cp)
    real = P.gen("ps")
    marks = []

    def noted(*a, **k):
        marks.append(time.perf_counter())
        real(*a, **k)
        marks.append(time.perf_counter())
    P._gen["ps"] = noted
    split = []
    try:
        for _ in range(repeats):
            cp.cuda.Device().synchronize()
            marks.clear()
            t0 = time.perf_counter()
            prog.grad(Z, per_sample=True, device="cuda")
            t1 = time.perf_counter()
            split.append((marks[0] - t0, marks[1] - marks[0], t1 - marks[1], t1 - t0))
    finally:
        P._gen["ps"] = real
    ms = [statistics.median(x[i] for x in split) * 1e3 for i in range(4)]
    Zs = Z[:1024]
    zs = zj[:1024]

    def tiny_tapead():
        prog.grad(Zs, per_sample=True, device="cuda")

    def tiny_jax():
        v, g = f(p, zs)
        v.block_until_ready(); g.block_until_ready()
    tiny_jax()          # (JAX compiles for the new shape)
    interleaved({"tapead": tiny_tapead, "jax": tiny_jax}, 3)
    tiny = interleaved({"tapead": tiny_tapead, "jax": tiny_jax}, repeats)
    # the failure word's cost on an idle GPU: a fresh zeroed word and its
    # .get() each call (the simple way), against what a call does (the
    # thread's word: an 8-byte copy into pinned memory and a wait)
    rt = cp.cuda.runtime
    word = tc._failword(cp, rt.getDevice())

    def zeroed_word():
        w = cp.zeros(1, dtype=cp.uint64)
        int(w.get()[0])

    def kept_word():
        stream = cp.cuda.get_current_stream().ptr
        word.arm(rt, stream)
        word.read(rt, stream)
    words = interleaved({"zeroed": zeroed_word, "kept": kept_word}, 50)
    return {"host_before_launch_ms": ms[0], "launch_ms": ms[1], "after_launch_ms": ms[2],
            "call_ms": ms[3], "whole_call_median_ms": med["tapead"] * 1e3,
            "jax_call_median_ms": med["jax"] * 1e3,
            "fixed_cost_1024_paths_ms": {k: statistics.median(v) * 1e3 for k, v in tiny.items()},
            "failure_word_ms": {k: statistics.median(v) * 1e3 for k, v in words.items()}}


def print_breakdown(fig):
    """The European figures as lines a person reads in the log."""
    k, c = fig.get("kernel_only", {}), fig.get("per_call", {})
    print(f"european on {fig['gpu']}, {fig['paths']} paths, medians of {fig['repeats']}:")
    print(f"  tapead call {fig['tapead_ns_per_path'] * fig['paths'] / 1e6:.3f} ms, "
          f"JAX call {fig['jax_ns_per_path'] * fig['paths'] / 1e6:.3f} ms: "
          f"tapead/JAX = {fig['tapead_over_jax']:.3f}")
    if "ms_per_launch" in k:
        print(f"  kernel alone (CUDA events) {k['ms_per_launch']:.3f} ms = "
              f"{k['ms_per_launch'] / (fig['jax_ns_per_path'] * fig['paths'] / 1e6):.3f} of JAX's call, "
              f"{k['GB_per_s']:.0f} GB/s")
    if "call_ms" in c:
        print(f"  a call cut at its launch: host before the launch {c['host_before_launch_ms']:.3f} ms, "
              f"the launch {c['launch_ms']:.3f} ms, after it (kernel, wait, failure word) "
              f"{c['after_launch_ms']:.3f} ms; total {c['call_ms']:.3f} ms")
        if "ms_per_launch" in k:
            print(f"  the call beyond its kernel: {c['whole_call_median_ms'] - k['ms_per_launch']:.3f} ms")
        t = c["fixed_cost_1024_paths_ms"]
        print(f"  fixed cost of a call (1,024 paths): tapead {t['tapead']:.3f} ms, JAX {t['jax']:.3f} ms")
        w = c["failure_word_ms"]
        print(f"  the failure word a call (idle GPU): a fresh zeroed word and its get {w['zeroed']:.3f} ms, "
              f"the kept word (pinned copy + wait) {w['kept']:.3f} ms")


def kernel_only(prog, Z, paths, launches=20):
    import cupy as cp
    from tapead import cuda as tc
    from tapead.replay import _vector
    P = tc._plan(prog, cp)
    fn = P.gen("ps")
    par = tc._params(cp, P, _vector(prog.params, prog._dims[3], "params"))   # (the call's own)
    Yb = cp.empty((prog.n_outputs, paths))
    Gb = cp.empty((prog.n_wrt, paths))
    fb = cp.zeros(1, dtype=cp.uint64)
    grid = (min(tc._blocks(paths, tc._THREADS), P.maxblocks),)
    args = (Z, par, P.ones, np.int32(1), np.int64(0), np.int64(paths), np.int64(paths), Yb, Gb, fb)
    fn(grid, (tc._THREADS,), args)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(launches):
        fn(grid, (tc._THREADS,), args)
    end.record()
    end.synchronize()
    ms = cp.cuda.get_elapsed_time(start, end) / launches
    moved = paths * 8 * (prog.n_inputs + prog.n_outputs + prog.n_wrt)
    return {"ms_per_launch": ms, "ns_per_path": ms * 1e6 / paths, "GB_per_s": moved / (ms * 1e-3) / 1e9,
            "grid_blocks": grid[0], "failed": int(fb.get()[0]) != 0,
            "same_as_the_call": bool(cp.array_equal(Gb.T, prog.grad(Z, per_sample=True, device="cuda")[1]))}


# ------------------------------------------------------------------ big
def stage_big(out, rows=16384, repeats=7, cpu_repeats=7):
    import cupy as cp
    import fastest_autograd
    t = time.perf_counter()
    prog = fastest_autograd.record()
    record_s = time.perf_counter() - t
    X = np.random.default_rng(8).standard_normal((rows, prog.n_inputs))
    Xd = cp.asarray(X)
    t = time.perf_counter()
    Y, G = prog.grad(Xd, per_sample=True, device="cuda")
    cp.cuda.Device().synchronize()
    first = time.perf_counter() - t
    threads = tapead.replay.cores()
    Yc, Gc = prog.grad(X, per_sample=True, threads=threads)       # warm-up, and the reference

    def gpu():
        prog.grad(Xd, per_sample=True, device="cuda")

    def cpu():
        prog.grad(X, per_sample=True, threads=threads)
    gpu()
    tg, tc = [], []
    for r in range(max(repeats, cpu_repeats)):
        if r < repeats:
            tg.append(timed_gpu(gpu))
        if r < cpu_repeats:
            tc.append(timed_gpu(cpu))
    g, c = statistics.median(tg), statistics.median(tc)
    figures = {
        "gpu": gpu_name(), "nodes": prog.nodes, "rows": rows, "cpu_threads": threads,
        "gpu_us_per_row": g / rows * 1e6, "cpu_us_per_row": c / rows * 1e6,
        "gpu_speedup_over_cpu": c / g,
        "gpu_ms_all": sorted(x * 1e3 for x in tg), "cpu_ms_all": sorted(x * 1e3 for x in tc),
        "first_call_s": first, "record_and_compile_s": record_s,
        "max_rel_diff_outputs": rel_diff(cp.asnumpy(Y), Yc),
        "max_abs_diff_gradients": float(np.abs(cp.asnumpy(G) - Gc).max()),
        "kernel": "generated" if prog.nodes <= tapead.cuda.GENERATED_MAX_NODES else "interpreter",
    }
    # the gradients of the 10,000-op graph underflow to 0 on both sides: a
    # shorter one (200 ops) checks them
    small = fastest_autograd.record(200)
    Xs = X[:4096]
    Ys, Gs = small.grad(Xs, per_sample=True, device="cuda")
    Ysc, Gsc = small.grad(Xs, per_sample=True)
    figures["200_ops"] = {"nodes": small.nodes, "max_rel_diff_outputs": rel_diff(Ys, Ysc),
                          "max_rel_diff_gradients": rel_diff(Gs, Gsc),
                          "gradients_nonzero": int(np.count_nonzero(Gsc))}
    save(out, "big", figures)


# ---------------------------------------------------------------- first
FIRST = r"""
import sys, time, json
t0 = time.perf_counter()
import numpy as np, tapead
sys.path.insert(0, {bench!r}); sys.path.insert(0, {examples!r})
which = {which!r}
if which == "european":
    from monte_carlo_greeks import european
    prog = european(); X = np.random.default_rng(1).standard_normal((1 << 20, 1))
else:
    import fastest_autograd
    prog = fastest_autograd.record(); X = np.random.default_rng(1).standard_normal((16384, 100))
t1 = time.perf_counter()
Y, G = prog.grad(X, per_sample=True, device="cuda")
t2 = time.perf_counter()
Y, G = prog.grad(X, per_sample=True, device="cuda")
t3 = time.perf_counter()
print(json.dumps({{"nodes": prog.nodes, "record_compile_s": t1 - t0, "first_call_s": t2 - t1,
                  "second_call_s": t3 - t2}}))
"""


def stage_first(out):
    import tempfile
    figures = {"gpu": gpu_name()}
    cache = tempfile.mkdtemp(prefix="tapead_cuda_cache_")
    for which in ("european", "big"):
        for state in ("cold_cache", "warm_cache"):
            env = dict(os.environ, TAPEAD_CACHE=cache)
            code = FIRST.format(bench=HERE, examples=os.path.join(os.path.dirname(HERE), "examples"),
                                which=which)
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=env, timeout=300)
            if r.returncode:
                print(r.stdout, r.stderr)
                figures[f"{which}_{state}"] = {"error": r.stderr[-2000:]}
                continue
            figures[f"{which}_{state}"] = json.loads(r.stdout.strip().splitlines()[-1])
    save(out, "first", figures)
    failed = [k for k, v in figures.items() if isinstance(v, dict) and "error" in v]
    if failed:
        sys.exit(f"FAILED first: {failed}")


# ------------------------------------------------------------- mathdiff
def ulps(a, b):
    """|a - b| in units in the last place of b (both finite), exactly: the
    difference of the bit patterns as integers (bit patterns near 2^62 made
    floats first would round every difference to a multiple of 1024)."""
    ia, ib = a.view(np.int64), b.view(np.int64)
    same = np.signbit(a) == np.signbit(b)
    d = np.where(same, np.abs(ia - ib), np.abs(ia & 0x7FFFFFFFFFFFFFFF) + np.abs(ib & 0x7FFFFFFFFFFFFFFF))
    return d


def differences(a, b):
    """How a (GPU) differs from b (CPU): how many differ; the most ulps
    and the largest relative difference over normal results; the largest
    difference relative to the largest |b| (the function's scale)."""
    tiny = np.finfo(np.float64).tiny
    normal = np.abs(b) >= tiny
    u = ulps(a, b)
    rel = np.abs(a - b)[normal] / np.abs(b[normal])
    scale = max(float(np.abs(b).max()), tiny)
    return {"differing": int((u > 0).sum()),
            "max_ulps_normal": int(u[normal].max()) if normal.any() else 0,
            "max_rel_diff_normal": float(rel.max()) if rel.size else 0.0,
            "max_abs_diff_over_scale": float(np.abs(a - b).max() / scale)}


def stage_mathdiff(out, n=1 << 20):
    import cupy as cp
    rng = np.random.default_rng(9)
    cases = {
        "exp": (lambda x: x.exp(), rng.uniform(-700, 700, n)),
        "log": (lambda x: x.log(), np.exp(rng.uniform(-700, 700, n))),
        "log1p": (lambda x: x.log1p(), rng.uniform(-0.999, 10, n)),
        "tanh": (lambda x: x.tanh(), rng.uniform(-20, 20, n)),
        "sigmoid": (lambda x: x.sigmoid(), rng.uniform(-40, 40, n)),
        "sin": (lambda x: x.sin(), rng.uniform(-1e3, 1e3, n)),
        "cos": (lambda x: x.cos(), rng.uniform(-1e3, 1e3, n)),
        "sqrt": (lambda x: x.sqrt(), np.exp(rng.uniform(-700, 700, n))),
        "pow_x_2.5": (lambda x: x ** 2.5, np.exp(rng.uniform(-200, 200, n))),
        "pow_1.3_x": (lambda x: 1.3 ** x, rng.uniform(-500, 500, n)),
        "div": (lambda x: 1.0 / x, rng.standard_normal(n)),
    }
    figures = {"gpu": gpu_name(), "points": n, "functions": {}}
    for name, (f, xs) in cases.items():
        tapead.clear_guards()
        x = Value(1.0)
        prog = tapead.compile(f(x), [x], wrt=[x])
        X = xs.reshape(n, 1)
        Y, G = prog.grad(X, per_sample=True, device="cuda")
        Yc, Gc = prog.grad(X, per_sample=True)
        ok = np.isfinite(Yc[:, 0]) & np.isfinite(Y[:, 0]) & np.isfinite(Gc[:, 0]) & np.isfinite(G[:, 0])
        figures["functions"][name] = {
            "values": differences(np.ascontiguousarray(Y[ok, 0]), np.ascontiguousarray(Yc[ok, 0])),
            "derivatives": differences(np.ascontiguousarray(G[ok, 0]), np.ascontiguousarray(Gc[ok, 0])),
            "nonfinite_mismatch": int((np.isfinite(Y[:, 0]) != np.isfinite(Yc[:, 0])).sum())}
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    import test_gpu
    prog = test_gpu.every_op_program()
    X = test_gpu._rows(rng, 200_000)
    Y, G = prog.grad(X, per_sample=True, device="cuda")
    Yc, Gc = prog.grad(X, per_sample=True)
    figures["every_op_program"] = {"max_rel_diff_outputs": rel_diff(Y, Yc),
                                   "max_rel_diff_gradients": rel_diff(G, Gc),
                                   "summed_rel_diff": rel_diff(prog.grad(X, device="cuda")[1][None],
                                                               prog.grad(X)[1][None])}
    prog = test_gpu.arithmetic_program()
    X = rng.uniform(-3, 3, (200_000, 2))
    Y, G = prog.grad(X, per_sample=True, device="cuda")
    Yc, Gc = prog.grad(X, per_sample=True)
    figures["arithmetic_program_bits_equal"] = bool(np.array_equal(Y, Yc) and np.array_equal(G, Gc))
    save(out, "mathdiff", figures)


# -------------------------------------------------------------- compile
COMPILE = r"""
import sys, time, json
import numpy as np, tapead
from tapead import cuda, Value
n = {n}
rng = np.random.default_rng(n)
tapead.clear_guards()
xs = [Value(0.5 + i) for i in range(8)]
nodes = list(xs)
for k in range(n):
    a, b = nodes[-1 - rng.integers(0, min(8, len(nodes)))], nodes[-1 - rng.integers(0, min(20, len(nodes)))]
    o = k % 5
    nodes.append((a * b).tanh() if o == 0 else (a + b) * 0.5 if o == 1 else (a * 0.5).tanh() if o == 2
                 else (a - b) * 0.5 if o == 3 else (a * 0.1).sin())   # bounded, so never sin(inf)
prog = tapead.compile(nodes[-1], xs, wrt=xs)
src = cuda.cuda_source(prog, "ps")
import cupy as cp
arch = str(cp.cuda.Device().compute_capability)
t = time.perf_counter(); cuda._module(cp, src, arch); c = time.perf_counter() - t   # kept on disk
X = cp.asarray(rng.standard_normal((1 << 18, 8)) * 0.1)
res = {{"nodes": prog.nodes, "nvrtc_s": c}}
for kind, limit in (("generated", 10 ** 9), ("interpreter", 0)):
    cuda.GENERATED_MAX_NODES = limit
    prog.__dict__.pop("_gpu_plans", None)
    prog.grad(X, per_sample=True, device="cuda"); cp.cuda.Device().synchronize()
    ts = []
    for _ in range(5):
        t = time.perf_counter(); prog.grad(X, per_sample=True, device="cuda"); cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    res[kind + "_ns_per_row"] = sorted(ts)[2] / X.shape[0] * 1e9
print(json.dumps(res))
"""


def stage_compile(out, sizes=(48, 120, 150, 180, 360), budget_s=150):
    figures = {"gpu": gpu_name(), "sizes": []}
    start = time.perf_counter()
    for n in sizes:
        left = budget_s - (time.perf_counter() - start)
        if left < 10:
            figures["sizes"].append({"nodes_asked": n, "skipped": "time budget"})
            continue
        try:
            r = subprocess.run([sys.executable, "-c", COMPILE.format(n=n)], capture_output=True,
                               text=True, timeout=left,
                               env=dict(os.environ, TAPEAD_CACHE=os.path.join(
                                   os.environ.get("TMPDIR", "/tmp"), f"tapead_compile_{n}")))
        except subprocess.TimeoutExpired:
            figures["sizes"].append({"nodes_asked": n, "timeout_s": left})
            break
        if r.returncode:
            print(r.stdout, r.stderr[-3000:])
            figures["sizes"].append({"nodes_asked": n, "error": r.stderr[-1500:]})
            continue
        figures["sizes"].append(json.loads(r.stdout.strip().splitlines()[-1]))
        save(out, "compile", figures)
    save(out, "compile", figures)
    if any("error" in f for f in figures["sizes"]):
        sys.exit("FAILED compile: " + str([f["nodes_asked"] for f in figures["sizes"] if "error" in f]))


STAGES = {"european": stage_european, "big": stage_big, "first": stage_first,
          "mathdiff": stage_mathdiff, "compile": stage_compile}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=sorted(STAGES))
    ap.add_argument("--out", default="gpu_results.json")
    ap.add_argument("--budget", type=float, default=150.0, help="compile: seconds for all sizes")
    ap.add_argument("--dry", action="store_true",
                    help="import what the stage needs and stop (gpu_check.sh --dry)")
    args = ap.parse_args()
    if args.dry:
        import cupy  # noqa: F401
        if args.stage == "european":
            import jax  # noqa: F401
            import monte_carlo_greeks  # noqa: F401
        if args.stage == "big":
            import fastest_autograd  # noqa: F401
        print(f"dry: stage {args.stage} would write {args.out}")
        return
    if args.stage == "compile":
        stage_compile(args.out, budget_s=args.budget)
    else:
        STAGES[args.stage](args.out)


if __name__ == "__main__":
    main()
