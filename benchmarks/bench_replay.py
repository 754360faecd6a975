"""Replay benchmarks, each against its peer measured in the same run (medians of repeats, each pair timed
in alternation so the load of a shared machine hits both alike).

1. demo training step: micrograd eager (record + zero_grad + backward + SGD) vs
   tapead record-once + recompute + zero_grad + backward + tapead.optim.SGD
   (tapead.demo.recompute_trainer).
2. batched replay step (per-sample loss compiled once, 100 rows per step, numpy SGD:
   tapead.demo.batched_trainer)
   vs the same model/loss/SGD in PyTorch float64 CPU, torch.set_num_threads(1)
   (skipped if torch is not installed).
3. forward-replay sweep cost per node: loss.recompute() on the 65.8k-node demo graph
   vs a plain C loop doing the same arithmetic over flat arrays (benchmarks/prog_ref.c,
   compiled here with cffi from the Program's flat form).

Run: python benchmarks/bench_replay.py [--quick]
"""
import os
import statistics
import sys
import tempfile
import time


import tapead
import tapead.nn
from tapead import demo
from tapead.bench import torch_step

QUICK = "--quick" in sys.argv


def once(fn, inner=1):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def median_time(fn, repeats, inner=1):
    return statistics.median(once(fn, inner) for _ in range(repeats))


def paired(fa, ia, fb, ib, repeats):
    """Medians of a and b timed in alternation, so shared-machine load hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(once(fa, ia))
        tb.append(once(fb, ib))
    return statistics.median(ta), statistics.median(tb)


def bench_micrograd_step():
    import micrograd.engine
    import micrograd.nn
    model, X, y = demo.setup(micrograd.nn)
    k = [0]

    def step():
        demo.step(model, X, y, micrograd.engine.Value, k[0] % 100)
        k[0] += 1
    return step


def _trainer(make):
    model, X, y = demo.setup(tapead.nn)
    step = make(model, X, y, tapead.Value)
    k = [0]

    def run():
        step(k[0] % 100)
        k[0] += 1
    return run


def prog_ref():
    """benchmarks/prog_ref.c, compiled with cffi into a temporary directory: (ffi, lib)."""
    import importlib.util

    from cffi import FFI
    here = os.path.dirname(os.path.abspath(__file__))
    csrc = os.path.join(here, os.pardir, "csrc")
    floors = sorted(os.path.join(csrc, d) for d in os.listdir(csrc))   # headers by bare name
    ffi = FFI()
    ffi.cdef("int prog_ref(uint32_t n, const uint8_t *op, const uint32_t *a, const uint32_t *b,"
             " const double *c, uint32_t reps);")
    ffi.set_source("_prog_ref", "#include <stdint.h>\n"
                   "int prog_ref(uint32_t n, const uint8_t *op, const uint32_t *a,"
                   " const uint32_t *b, const double *c, uint32_t reps);",
                   sources=[os.path.join(here, "prog_ref.c"), os.path.join(csrc, "ops", "ops.c")],
                   include_dirs=floors, define_macros=[("TA_NO_CPYTHON", None)],
                   extra_compile_args=["-O3", "-std=c99", "-fno-strict-aliasing", "-ffp-contract=off"],
                   extra_link_args=["-lm"])
    path = ffi.compile(tmpdir=tempfile.mkdtemp(prefix="prog_ref"))
    spec = importlib.util.spec_from_file_location("_prog_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def bench_sweep(loss):
    prog = tapead.compile(loss, [])
    nodes = prog.nodes
    reps = 20
    ffi, ref = prog_ref()
    flat = prog.__reduce__()[1][0]          # the flat form, as pickling carries it
    arrs = [ffi.from_buffer(t, flat[k]) for t, k in (("uint8_t[]", "op"), ("uint32_t[]", "a"),
                                                     ("uint32_t[]", "b"), ("double[]", "c"))]
    t_ref, t_rec = paired(lambda: ref.prog_ref(flat["n"], *arrs, reps), 1, loss.recompute, reps, 15)
    t_ref /= reps
    return nodes, t_rec, t_ref


def main():
    print(f"tapead replay benchmarks ({'quick' if QUICK else 'full'}); medians; "
          f"{os.cpu_count()} cores, shared")
    t_mg, t_rec = paired(bench_micrograd_step(), 1, _trainer(demo.recompute_trainer), 20,
                         3 if QUICK else 7)
    print(f"\n1. demo step  micrograd eager {t_mg * 1e3:9.1f} ms   tapead recompute step "
          f"{t_rec * 1e3:7.3f} ms   speedup {t_mg / t_rec:7.0f}x")

    bat_step = _trainer(demo.batched_trainer)
    tt = torch_step()
    if tt is None:
        t_bat = median_time(bat_step, 9, 30 if QUICK else 100)
    else:
        t_step, ver = tt
        t_torch, t_bat = paired(t_step, 30, bat_step, 30, 9 if QUICK else 21)
    line = f"\n2. batched    tapead Program step {t_bat * 1e6:8.1f} us (100 rows)"
    if tt is None:
        line += "\n   torch not installed: comparison skipped"
    else:
        line += (f"\n   torch {ver} float64 1 thread step {t_torch * 1e6:8.1f} us   "
                 f"tapead faster by {t_torch / t_bat:5.2f}x")
    print(line)

    model, X, y = demo.setup(tapead.nn)
    loss, _ = demo.loss(model, X, y, tapead.Value)
    n, t_sweep, t_ref = bench_sweep(loss)
    print(f"\n3. forward sweep over {n} nodes: recompute {t_sweep / n * 1e9:6.2f} ns/node   "
          f"plain C loop {t_ref / n * 1e9:6.2f} ns/node   ratio {t_sweep / t_ref:5.2f}x")


if __name__ == "__main__":
    main()
