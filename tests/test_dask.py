"""tapead.dask (tapead/dask.py): Programs over Dask arrays, against the same
Program run locally, with Dask's threads and on a distributed LocalCluster of
two worker processes.  Skipped when the dask extra is not installed."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import tapead
from tapead import Value

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import tapead.dask as tdask  # noqa: E402


def european_call():
    """One GBM path of a European call, S0 = 100, sigma = 0.2, r = 0.03, K = 100, T = 1."""
    S0, sig, r = Value(100.0), Value(0.2), Value(0.03)
    z = Value(0.0)
    ST = S0 * ((r - 0.5 * sig * sig) + sig * z).exp()
    pay = (ST - 100.0).relu() * (-r).exp()
    return tapead.compile([pay, ST], [z], wrt=[S0, sig, r])


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1", silence_logs=40) as cluster, Client(cluster) as c:
        yield c
        # Programs the workers unpickled may sit in Dask's reference cycles
        # and in its cache of serialized task functions (a function holding
        # a Program keeps it); a worker is stopped without a last collection,
        # so let go of both here: the sanitized CI run judges what C still
        # holds at exit.
        c.run(_let_go)
    # The scheduler and the client run in this process (a CI run found one
    # Program left at exit): the same once the cluster is closed.
    _let_go()


def _let_go():
    """Drop what Dask keeps of this module's tasks in this process: its cache
    of serialized functions, then the cycles."""
    from distributed import worker
    cache = getattr(worker, "cache_dumps", None)
    if cache is not None:
        cache.clear()
    gc.collect()


@pytest.fixture(scope="module")
def case():
    prog = european_call()
    Z = np.random.default_rng(7).standard_normal((20000, 1))
    return prog, Z


def test_import_tapead_does_not_import_dask():
    root = os.path.dirname(os.path.dirname(os.path.abspath(tapead.__file__)))
    code = "import sys, tapead, tapead.replay; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_same_bits_as_local_on_aligned_chunks(case, scheduler):
    prog, Z = case
    X = da.from_array(Z, chunks=(4096, 1))        # chunks of whole 1024-row blocks
    seed = np.array([1.0, -0.5])
    Yl, Gl = prog.grad(Z, seed=seed)
    _, Gp = prog.grad(Z, seed=seed, per_sample=True)
    Y, G = tdask.grad(prog, X, seed=seed)
    Y, G = Y.compute(scheduler=scheduler), G.compute(scheduler=scheduler)
    assert np.array_equal(Y, Yl) and np.array_equal(G, Gl)
    _, G = tdask.grad(prog, X, seed=seed, per_sample=True)
    assert np.array_equal(G.compute(scheduler=scheduler), Gp)
    assert np.array_equal(tdask.evaluate(prog, X).compute(scheduler=scheduler), prog(Z))


def test_uneven_chunks_agree_to_rounding(case):
    prog, Z = case
    X = da.from_array(Z, chunks=(3001, 1))
    S = np.random.default_rng(1).standard_normal((len(Z), 2))
    Yl, Gl = prog.grad(Z, seed=S)
    Y, G = tdask.grad(prog, X, seed=da.from_array(S, chunks=(5000, 2)))
    assert np.array_equal(Y.compute(), Yl)
    assert np.allclose(G.compute(), Gl, rtol=1e-12, atol=0)


def test_local_cluster_of_two_processes(client, case):
    prog, Z = case
    X = da.from_array(Z, chunks=(4096, 1))
    Yl, Gl = prog.grad(Z)
    Y, G = tdask.grad(prog, X)
    Y, G = client.compute([Y, G], sync=True)
    assert np.array_equal(Y, Yl) and np.array_equal(G, Gl)
    _, Gp = tdask.grad(prog, X, per_sample=True)
    assert np.array_equal(client.compute(Gp, sync=True), prog.grad(Z, per_sample=True)[1])
    # params= for this graph only; the Program is left as it was
    params = np.array([110.0, 0.25, 0.01])
    _, G = tdask.grad(prog, X, params=params)
    assert np.array_equal(client.compute(G, sync=True), prog.grad(Z, params=params)[1])
    assert prog.follows_values
    # uneven chunks
    _, G = tdask.grad(prog, da.from_array(Z, chunks=(7000, 1)))
    assert np.allclose(client.compute(G, sync=True), Gl, rtol=1e-12, atol=0)
    # both workers ran chunks
    assert len(client.scheduler_info()["workers"]) == 2


def test_errors_name_the_row_of_x(client):
    tapead.clear_guards()
    x = Value(1.0)
    y = x * 2 if x > 0 else x * 3
    prog = tapead.compile(y, [x])
    Z = np.ones((6000, 1)); Z[4500, 0] = -1.0
    X = da.from_array(Z, chunks=(2000, 1))
    with pytest.raises(tapead.GuardError, match="row 4500"):
        client.compute(tdask.evaluate(prog, X), sync=True)
    with pytest.raises(tapead.GuardError, match="row 4500"):
        tdask.grad(prog, X)[0].compute(scheduler="sync")
    tapead.clear_guards()


def test_bad_arguments(case):
    prog, Z = case
    with pytest.raises(ValueError, match="shape"):
        tdask.grad(prog, da.zeros((10, 3)))
    with pytest.raises(TypeError, match="Program"):
        tdask.evaluate(object(), da.zeros((10, 1)))
    with pytest.raises(ValueError, match="params"):
        tdask.grad(prog, da.zeros((10, 1)), params=[1.0])
