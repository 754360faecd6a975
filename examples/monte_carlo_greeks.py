"""Monte Carlo prices and pathwise Greeks (delta, vega, rho) by AAD, outside ML.

A European call and an arithmetic-average Asian call on geometric Brownian
motion.  One path is recorded with Values (the normals are input leaves;
S0, sigma and r are the parameters), compiled once, and replayed in C over
a million paths on every core: prog.grad(Z, per_sample=True) gives each
path's payoff and its derivatives, whose means are the price and the
Greeks and whose spreads give their standard errors.  The European figures
are checked against Black-Scholes (within 4 standard errors).  With --dask
the same Program runs on a local Dask cluster (two worker processes); with
--device cuda, on a GPU, one CUDA thread per path (docs/gpu.md; needs CuPy),
the normals drawn on the GPU.

Run: python examples/monte_carlo_greeks.py [--paths 1000000] [--steps 12]
                                           [--threads N] [--dask] [--quick]
                                           [--device cuda]
Exit status: 0 when every European figure is within 4 standard errors, 1 if
one is off, 2 if this machine cannot run what was asked (a bad option, no
CuPy or no GPU for --device cuda, no Dask for --dask), said in one line.
"""
import argparse
import math
import sys
import time

import numpy as np

import tapead
from tapead import Value

S0, SIGMA, RATE, STRIKE, T = 100.0, 0.2, 0.03, 100.0, 1.0
GREEKS = ("price", "delta", "vega", "rho")


def european():
    """One path of a European call: exp(-rT) max(S_T - K, 0)."""
    s0, sigma, r = Value(S0), Value(SIGMA), Value(RATE)
    z = Value(0.0)
    ST = s0 * ((r - 0.5 * sigma * sigma) * T + sigma * math.sqrt(T) * z).exp()
    payoff = (ST - STRIKE).relu() * (-r * T).exp()
    return tapead.compile(payoff, [z], wrt=[s0, sigma, r])


def asian(steps):
    """One path of an arithmetic-average Asian call over `steps` monitoring dates."""
    s0, sigma, r = Value(S0), Value(SIGMA), Value(RATE)
    dt = T / steps
    zs = [Value(0.0) for _ in range(steps)]
    drift = (r - 0.5 * sigma * sigma) * dt      # recorded once, used at every step
    vol = sigma * math.sqrt(dt)
    s, total = s0, 0.0
    for z in zs:
        s = s * (drift + vol * z).exp()
        total = total + s
    payoff = (total * (1.0 / steps) - STRIKE).relu() * (-r * T).exp()
    return tapead.compile(payoff, zs, wrt=[s0, sigma, r])


def black_scholes(s0=S0, k=STRIKE, t=T, r=RATE, sigma=SIGMA):
    """European call: price, delta, vega, rho in closed form."""
    N = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    d1 = (math.log(s0 / k) + (r + 0.5 * sigma ** 2) * t) / (sigma * math.sqrt(t))
    d2 = d1 - sigma * math.sqrt(t)
    return (s0 * N(d1) - k * math.exp(-r * t) * N(d2), N(d1),
            s0 * math.sqrt(t) * math.exp(-0.5 * d1 * d1) / math.sqrt(2 * math.pi),
            k * t * math.exp(-r * t) * N(d2))


def simulate(prog, paths, rng, batch=1 << 18, threads=None, progress=None, device=None):
    """(means, standard errors) of (payoff, d/dS0, d/dsigma, d/dr) over `paths` paths.
    device="cuda": the normals are drawn, and the paths run, on the GPU."""
    xp = np
    if device is not None and device != "cpu":
        import tapead.cuda
        xp = tapead.cuda.require()          # CuPy, with a clear error if there is no GPU
        rng, batch = xp.random.default_rng(int(rng.integers(1 << 62))), 1 << 22
    total = np.zeros(4)
    squares = np.zeros(4)
    done = 0
    while done < paths:
        n = min(batch, paths - done)
        Z = rng.standard_normal((n, prog.n_inputs))
        Y, G = prog.grad(Z, per_sample=True, threads=threads, device=device)
        V = xp.column_stack([Y[:, 0], G])
        total += np.asarray(V.sum(axis=0).tolist())
        squares += np.asarray((V * V).sum(axis=0).tolist())
        done += n
        if progress:
            progress(done, paths)
    mean = total / paths
    var = np.maximum(squares / paths - mean * mean, 0.0)
    return mean, np.sqrt(var / paths)


def simulate_dask(prog, paths, rng, chunk=1 << 17):
    """The same on a local Dask cluster of two worker processes."""
    import dask.array as da
    from distributed import Client, LocalCluster
    import tapead.dask
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1", silence_logs=40) as cluster, Client(cluster) as client:
        Z = da.from_array(rng.standard_normal((paths, prog.n_inputs)), chunks=(chunk, -1))
        Y, G = tapead.dask.grad(prog, Z, per_sample=True)
        V = da.concatenate([Y, G], axis=1)
        mean, sq = client.compute([V.mean(axis=0), (V * V).mean(axis=0)], sync=True)
    return mean, np.sqrt(np.maximum(sq - mean * mean, 0.0) / paths)


def report(name, mean, se, ref=None):
    ok = True
    print(f"  {name}")
    for k, g in enumerate(GREEKS):
        line = f"    {g:6s} {mean[k]:12.6f} +- {se[k]:.6f}"
        if ref is not None:
            z = (mean[k] - ref[k]) / se[k] if se[k] > 0 else math.inf
            good = abs(z) < 4.0
            ok &= good
            line += f"   Black-Scholes {ref[k]:12.6f}   {z:+5.2f} se  {'ok' if good else 'OFF'}"
        print(line)
    return ok


def unavailable(device, dask):
    """Why this machine cannot run what was asked (one line), or None."""
    if device not in (None, "cpu"):
        import tapead.cuda
        try:
            tapead.cuda._device_index(device)
            tapead.cuda.require()
        except (ImportError, ValueError, tapead.cuda.CUDAUnavailable) as e:
            return str(e)
    if dask:
        try:
            import distributed  # noqa: F401  (the local cluster)
            import tapead.dask  # noqa: F401
        except ImportError as e:
            return str(e)
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=12, help="Asian monitoring dates")
    ap.add_argument("--threads", type=int, default=None, help="default: all cores")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--dask", action="store_true", help="also run on a local Dask cluster")
    ap.add_argument("--quick", action="store_true", help="100,000 paths")
    ap.add_argument("--device", default=None, help='"cuda": run the paths on a GPU')
    args = ap.parse_args(argv)
    paths = 100_000 if args.quick else args.paths
    why = unavailable(args.device, args.dask)
    if why:
        print(f"monte_carlo_greeks.py: {why}", file=sys.stderr)
        return 2

    def progress(done, total):
        print(f"\r    {done:>12,} / {total:,} paths", end="" if done < total else "\n", flush=True)

    t0 = time.perf_counter()
    progs = {"European call": european(), f"Asian call ({args.steps} dates)": asian(args.steps)}
    print(f"recorded and compiled both paths in {(time.perf_counter() - t0) * 1e3:.1f} ms: "
          + ", ".join(f"{p.nodes} nodes" for p in progs.values()))
    where = (f"on the GPU ({args.device})" if args.device not in (None, "cpu")
             else f"threads={args.threads or tapead.replay.cores()}")
    print(f"S0={S0} sigma={SIGMA} r={RATE} K={STRIKE} T={T}; {paths:,} paths, {where}")
    ok = True
    for name, prog in progs.items():
        t0 = time.perf_counter()
        mean, se = simulate(prog, paths, np.random.default_rng(args.seed), threads=args.threads,
                            progress=progress if paths >= 1 << 19 else None, device=args.device)
        dt = time.perf_counter() - t0
        print(f"  ({dt:.2f} s, {dt / paths * 1e9:.0f} ns per path, normals included)")
        good = report(name, mean, se, black_scholes() if name.startswith("European") else None)
        ok &= good
        if args.dask:
            t0 = time.perf_counter()
            dmean, dse = simulate_dask(prog, paths, np.random.default_rng(args.seed))
            print(f"  on a local Dask cluster ({time.perf_counter() - t0:.2f} s, cluster start-up "
                  f"included): largest difference from the local run "
                  f"{np.max(np.abs(dmean - mean) / np.maximum(se, 1e-300)):.2e} se")
    print("all European figures within 4 standard errors of Black-Scholes" if ok
          else "a European figure is off")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
