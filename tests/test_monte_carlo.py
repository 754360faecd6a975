"""examples/monte_carlo_greeks.py: Monte Carlo prices and pathwise Greeks by
AAD against Black-Scholes (European) and against central differences of the
Monte Carlo price itself with the same normals (Asian)."""
import importlib.util
import math
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "examples", "monte_carlo_greeks.py")
if not os.path.isfile(PATH):
    pytest.skip("needs the source tree (examples/)", allow_module_level=True)
spec = importlib.util.spec_from_file_location("monte_carlo_greeks", PATH)
mc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mc)


def test_european_matches_black_scholes_within_standard_errors():
    mean, se = mc.simulate(mc.european(), 400_000, np.random.default_rng(11), threads=2)
    ref = mc.black_scholes()
    assert np.all(np.abs(mean - ref) < 4 * se), (mean, ref, se)
    assert np.all(se < [0.03, 0.0015, 0.15, 0.1])


def test_black_scholes_reference_against_its_own_central_differences():
    h = 1e-5
    for k, kw in ((1, "s0"), (2, "sigma"), (3, "r")):
        base = {"s0": mc.S0, "sigma": mc.SIGMA, "r": mc.RATE}
        up, dn = dict(base), dict(base)
        up[kw] += h; dn[kw] -= h
        fd = (mc.black_scholes(**up)[0] - mc.black_scholes(**dn)[0]) / (2 * h)
        assert mc.black_scholes()[k] == pytest.approx(fd, rel=1e-6)


def asian_price(Z, s0, sigma, r, steps):
    """The Asian payoff averaged over the paths Z, in numpy (an independent spelling)."""
    dt = mc.T / steps
    S = s0 * np.exp(np.cumsum((r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * Z, axis=1))
    return (np.maximum(S.mean(axis=1) - mc.STRIKE, 0.0) * math.exp(-r * mc.T)).mean()


def test_asian_pathwise_greeks_are_the_derivatives_of_the_price():
    steps = 6
    prog = mc.asian(steps)
    Z = np.random.default_rng(5).standard_normal((50_000, steps))
    Y, G = prog.grad(Z)
    base = dict(s0=mc.S0, sigma=mc.SIGMA, r=mc.RATE)
    assert Y.mean() == pytest.approx(asian_price(Z, **base, steps=steps), rel=1e-12)
    for k, name in enumerate(("s0", "sigma", "r")):
        h = 1e-4 * base[name]
        up, dn = dict(base), dict(base)
        up[name] += h; dn[name] -= h
        fd = (asian_price(Z, **up, steps=steps) - asian_price(Z, **dn, steps=steps)) / (2 * h)
        assert G[k] / len(Z) == pytest.approx(fd, rel=1e-4)


def test_the_script_runs_and_checks(capsys):
    assert mc.main(["--paths", "60000", "--steps", "4", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "within 4 standard errors" in out and "Asian call (4 dates)" in out


def test_without_cupy_one_line_and_its_own_exit_status(monkeypatch, capsys):
    """--device cuda where CuPy is missing: one line naming what to install,
    and exit status 2, not the 1 of a figure off (nor a traceback)."""
    import sys
    monkeypatch.setitem(sys.modules, "cupy", None)      # import cupy raises ImportError
    assert mc.main(["--quick", "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith('monte_carlo_greeks.py: device="cuda" needs CuPy: pip install cupy-cuda'), line
    assert mc.main(["--quick", "--device", "gpu"]) == 2
    assert "cuda:N" in capsys.readouterr().err
