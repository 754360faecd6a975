"""python -m tapead.bench: tapead against micrograd and a pure-Python floor.

Every figure is a median over repeats, and every ratio compares two
medians measured in this same run.  The floor column: the same workload on
a pure-Python __slots__ scalar whose operators only return a new instance
(no graph, no tape): what Python's operator overloading alone costs, so
"0.3x the floor's time" means recording each op costs less than a Python
object that records nothing.  Rows:
  forward   ns per recorded op (deep chain, wide sum, micrograd's README expression)
  backward  ns per node of one backward() over the graph just recorded
  memory    tape bytes per node
  demo      one training step of micrograd's demo notebook (graph rebuilt every step);
            also the same model written with plain Values (no nn), against
            micrograd and xad-py (when installed)
  gpt       one training step of examples/gpt.py (a microgpt-style GPT) on its
            plain-Python scalar Value, on tapead.Value as a drop-in, on the fast
            path (tapead.linear + optim.Adam) and compiled (the fast path's step
            recorded by tapead.jit once per name length, before the timing:
            the steps timed are replays; examples/gpt.py --compare gives a
            whole run's time, recordings included), and a compiled minibatch of 16
            names (tapead.jit's batch) on every core against one thread; and tapead.dot over 16 terms against
            the generator sum it replaces (source tree only: the example is not installed)
  tiny      a whole small script (import, MLP(3, [4, 4, 1]), 20 steps on four
            samples) run end to end as a subprocess, tapead against micrograd:
            what a script that runs for milliseconds feels, import included
Options: --quick (under a minute), --json FILE, --no-micrograd, --tiny, --gpt (that row only).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import tapead
import tapead.nn
from tapead import demo
from tapead.replay import cores as _cores

try:
    import micrograd.engine
    import micrograd.nn
except ImportError:  # the comparison is optional
    micrograd = None

_T = TypeVar("_T")


class Floor:
    """The pure-Python floor: a __slots__ scalar whose operators return a new instance, no graph."""
    __slots__ = ("data",)

    def __init__(self, data: float) -> None:
        self.data = data

    def __add__(self, other: Any) -> Floor:
        return Floor(self.data + (other.data if type(other) is Floor else other))

    __radd__ = __add__

    def __mul__(self, other: Any) -> Floor:
        return Floor(self.data * (other.data if type(other) is Floor else other))

    __rmul__ = __mul__

    def __sub__(self, other: Any) -> Floor:
        return Floor(self.data - (other.data if type(other) is Floor else other))

    def __rsub__(self, other: float) -> Floor:
        return Floor(other - self.data)

    def __neg__(self) -> Floor:
        return Floor(-self.data)

    def __truediv__(self, other: Any) -> Floor:
        return Floor(self.data / (other.data if type(other) is Floor else other))

    def __rtruediv__(self, other: float) -> Floor:
        return Floor(other / self.data)

    def __pow__(self, other: float) -> Floor:
        return Floor(self.data ** other)

    def relu(self) -> Floor:
        return Floor(0.0 if self.data < 0 else self.data)


# ------------------------------------------------------------- workloads
def chain(V: Any, n: int) -> Tuple[Any, int]:
    s, x = V(1.0), V(0.5)
    for _ in range(n):
        s = s * 0.9999 + x
    return s, 2 * n


def wide(V: Any, n: int) -> Tuple[Any, int, float]:
    vals = [V(i * 1e-3) for i in range(n)]
    t0 = time.perf_counter()
    s = sum(vals)
    return s, n, time.perf_counter() - t0


def readme_expr(V: Any) -> Tuple[Any, Any, Any]:
    """micrograd's README expression with Value class V: returns (a, b, g)."""
    a = V(-4.0)
    b = V(2.0)
    c = a + b
    d = a * b + b**3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + (b + a).relu()
    d += 3 * d + (b - a).relu()
    e = c - d
    f = e**2
    g = f / 2.0
    g += 10.0 / f
    return a, b, g


class Roots:
    """Several roots whose backward() is timed together."""

    def __init__(self, roots: List[Any]) -> None:
        self.roots = roots

    def backward(self) -> None:
        for r in self.roots:
            r.backward()


def readme(V: Any, reps: int) -> Tuple[Roots, int]:
    return Roots([readme_expr(V)[2] for _ in range(reps)]), reps * 24  # 24 ops in micrograd's spelling


def fwd_bwd_once(V: Any, build: Callable[[Any], Tuple[Any, ...]],
                 backward: bool = True) -> Tuple[float, Optional[float]]:
    """Forward seconds per op and backward seconds per node of one recording by build()."""
    gc.collect()
    t0 = time.perf_counter()
    res = build(V)
    t1 = time.perf_counter()
    root, nops = res[0], res[1]
    fw = (res[2] if len(res) > 2 else t1 - t0) / nops
    bw = None
    if backward and hasattr(root, "backward"):
        t0 = time.perf_counter()
        root.backward()
        bw = (time.perf_counter() - t0) / nops
    return fw, bw


def interleaved(build: Callable[[Any], Tuple[Any, ...]], build_mg: Callable[[Any], Tuple[Any, ...]],
                reps: int, mg_reps: int, with_mg: bool) -> Dict[str, Optional[float]]:
    """Median ns of floor, tapead and micrograd on one workload, their runs interleaved
    (floor, tapead, micrograd, floor, ...) so a slow spell of a shared machine hits all."""
    runs: Dict[str, List[float]] = {k: [] for k in ("floor_fwd", "tapead_fwd", "tapead_bwd",
                                                   "micrograd_fwd", "micrograd_bwd")}
    for r in range(reps):
        runs["floor_fwd"].append(fwd_bwd_once(Floor, build, backward=False)[0])
        fw, bw = fwd_bwd_once(tapead.Value, build)
        runs["tapead_fwd"].append(fw)
        runs["tapead_bwd"].append(bw or 0.0)
        if with_mg and r < mg_reps:
            fw, bw = _in_big_stack(lambda: fwd_bwd_once(micrograd.engine.Value, build_mg))
            runs["micrograd_fwd"].append(fw)
            runs["micrograd_bwd"].append(bw or 0.0)
    return {k + "_ns": (statistics.median(v) * 1e9 if v else None) for k, v in runs.items()}


def demo_stepper(nn: Any, V: Any, use_optim: bool = False, fused: bool = True) -> Callable[[], float]:
    """A function that runs the next eager demo training step (forward, backward,
    update) and returns its seconds."""
    model, X, y = demo.setup(nn)
    opt: Any = None
    if use_optim:
        from tapead.optim import SGD
        opt = SGD(model.parameters(), lr=1.0)
    k = [0]

    def run() -> float:
        old = tapead.nn.fuse_layers
        tapead.nn.fuse_layers = fused
        try:
            t0 = time.perf_counter()
            if opt is None:
                demo.step(model, X, y, V, k[0] % 100)
            else:
                total, _ = demo.loss(model, X, y, V)
                opt.zero_grad()
                total.backward()
                opt.lr = 1.0 - 0.9 * (k[0] % 100) / 100
                opt.step()
            return time.perf_counter() - t0
        finally:
            tapead.nn.fuse_layers = old
            k[0] += 1
    return run


def demo_rounds(steppers: Dict[str, Tuple[Callable[[], float], int]], rounds: int) -> Dict[str, float]:
    """Median step seconds of each stepper, run in interleaved rounds (each
    round runs every stepper its given number of steps)."""
    ts: Dict[str, List[float]] = {k: [] for k in steppers}
    if platform.python_implementation() == "PyPy":   # let the JIT compile each step first
        for run, per_round in steppers.values():
            for _ in range(10 * per_round):
                run()
    for _ in range(rounds):
        for name, (run, per_round) in steppers.items():
            ts[name].extend(run() for _ in range(per_round))
    return {k: statistics.median(v) for k, v in ts.items()}


def plain_stepper(lib: str) -> Optional[Callable[[], float]]:
    """The demo model written with plain Values, as users write their own
    (no nn module): micrograd's MLP(2, [16, 16, 1]) as lists of weights, its
    SVM loss and L2 term, SGD.  lib: "tapead", "micrograd" or "xad" (xad-py,
    a C++ tape behind pybind11), or "floats": the step's Python skeleton on
    plain floats, forward and loss only (the least any scalar library could
    cost).  A function running the next step and
    returning its seconds, or None if lib is not installed."""
    import random
    _, X, y = demo.setup(tapead.nn)
    random.seed(1337)
    init = [[([random.uniform(-1, 1) for _ in range(nin)], 0.0) for _ in range(nout)]
            for nin, nout in ((2, 16), (16, 16), (16, 1))]
    rows = [[float(a) for a in x] for x in X]
    labels = [float(t) for t in y]
    tape: Any = None
    if lib == "xad":
        try:
            import xad.math as xm
            from xad.adj_1st import Real as V, Tape
        except ImportError:
            return None
        tape = Tape()
        tape.activate()

        def relu(v: Any) -> Any:
            return xm.fmax(v, 0.0)
    elif lib == "floats":
        V = float

        def relu(v: Any) -> Any:
            return v if v > 0.0 else 0.0
    else:
        if lib == "micrograd" and micrograd is None:
            return None
        V = tapead.Value if lib == "tapead" else micrograd.engine.Value

        def relu(v: Any) -> Any:
            return v.relu()
    flat = [w for layer in init for ws, b in layer for w in ws + [b]]
    params = [V(w) for w in flat]
    k = [0]

    def run() -> float:
        t0 = time.perf_counter()
        if tape is not None:          # xad: inputs are registered anew for each recording
            tape.newRecording()
            params[:] = [V(w) for w in flat]
            for p in params:
                tape.registerInput(p)
        it = iter(params)             # micrograd's parameter order: each neuron's w, then b
        layers = [[([next(it) for _ in ws], next(it)) for ws, _ in layer] for layer in init]
        scores = []
        for x in rows:
            act = x
            for i, layer in enumerate(layers):
                act = [sum((wi * xi for wi, xi in zip(ws, act)), b) for ws, b in layer]
                if i < 2:
                    act = [relu(a) for a in act]
            scores.append(act[0])
        data_loss = sum(relu(1 + -yi * si) for yi, si in zip(labels, scores)) * (1.0 / len(rows))
        total = data_loss + 1e-4 * sum(p * p for p in params)
        lr = 1.0 - 0.9 * (k[0] % 100) / 100
        if lib == "floats":
            pass
        elif tape is not None:
            tape.registerOutput(total)
            total.derivative = 1.0
            tape.computeAdjoints()
            flat[:] = [p.value - lr * p.derivative for p in params]
        else:
            for p in params:
                p.grad = 0.0
            total.backward()
            for p in params:
                p.data -= lr * p.grad
        k[0] += 1
        return time.perf_counter() - t0
    return run


_PEAK_CODE = r"""
import gc, resource, sys
def peak():
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak over exec
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
lib = sys.argv[1]
import tapead.demo as demo
if lib == "tapead":
    import tapead, tapead.nn as nn; V = tapead.Value
else:
    import micrograd.nn as nn, micrograd.engine; V = micrograd.engine.Value
model, X, y = demo.setup(nn)
demo.loss(model, X[:2], y[:2], V)     # warm up code paths on a tiny batch
gc.collect()
base = peak()
demo.step(model, X, y, V, 0)          # one full step: forward, backward, update
print(peak() - base)
"""


def peak_step_bytes(lib: str) -> Optional[int]:
    """Growth of peak RSS over the first demo step, in a fresh process (same code for both)."""
    out = subprocess.run([sys.executable, "-c", _PEAK_CODE, lib], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return int(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ main
TINY_SCRIPT = """
import random
from {lib}.engine import Value
from {lib}.nn import MLP
random.seed(0)
xs = [[2.0, 3.0, -1.0], [3.0, -1.0, 0.5], [0.5, 1.0, 1.0], [1.0, 1.0, -1.0]]
ys = [1.0, -1.0, -1.0, 1.0]
n = MLP(3, [4, 4, 1])
for k in range(20):
    ypred = [n(x) for x in xs]
    loss = sum((yout - Value(ygt)) ** 2 for ygt, yout in zip(ys, ypred))
    for p in n.parameters():
        p.grad = 0.0
    loss.backward()
    for p in n.parameters():
        p.data += -0.05 * p.grad
print(loss.data)
"""


def tiny_script(rounds: int, libs: Tuple[str, ...] = ("tapead", "micrograd")) -> Dict[str, float]:
    """Median wall seconds of TINY_SCRIPT run end to end in a fresh interpreter
    (`python -c`, this environment), per library, in interleaved rounds."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(tapead.__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")   # this tapead
    times: Dict[str, List[float]] = {lib: [] for lib in libs}
    for lib in libs:            # a first run each warms the file cache
        subprocess.run([sys.executable, "-c", TINY_SCRIPT.format(lib=lib)], env=env, check=True,
                       capture_output=True)
    for _ in range(rounds):
        for lib in libs:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", TINY_SCRIPT.format(lib=lib)], env=env, check=True,
                           capture_output=True)
            times[lib].append(time.perf_counter() - t0)
    return {lib: statistics.median(ts) for lib, ts in times.items()}


def tiny_row(rounds: int, mg: Any) -> Tuple[Tuple[str, ...], Dict[str, float]]:
    t = tiny_script(rounds, ("tapead", "micrograd") if mg is not None else ("tapead",))
    m = t.get("micrograd")
    return (("tiny script end to end (subprocess), ms", "", f"{t['tapead'] * 1e3:.1f}", "-" if m is None else f"{m * 1e3:.1f}",
             f"{m / t['tapead']:.2f}x micrograd's speed" if m else ""), t)


def fmt_ns(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def gpt_example() -> Any:
    """examples/gpt.py as a module; None outside a source tree."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "gpt.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("tapead_gpt_example", path)
    gpt: Any = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(gpt)  # type: ignore[union-attr]
    return gpt


def compiled_step(model: Any, docs: List[str], encode: Callable[[str], List[int]], batch: int = 1) -> Any:
    """examples/gpt.py's training step (the mean over `batch` names) as
    tapead.jit records it, every name length recorded already (so what is
    timed is replays), the gradients zeroed."""
    step = tapead.jit(model.loss if batch == 1 else (lambda tokens: model.loss(tokens) * (1.0 / batch)),
                      wrt=model.params)
    for n in sorted({len(doc) for doc in docs}):
        step(encode(next(doc for doc in docs if len(doc) == n)))
    model.opt.zero_grad()
    return step


def gpt_rows(rounds: int) -> Optional[Tuple[List[Tuple[str, ...]], Dict[str, Any]]]:
    """The gpt rows: step medians of examples/gpt.py's four runs, interleaved
    (each round: the same 5 documents a step on each of the four, then 3
    steps of 16 names compiled on one thread and on every core), and
    dot over 16 terms against the generator sum; None outside a source tree."""
    gpt = gpt_example()
    if gpt is None:
        return None

    def stepper(mode: str, batch: int = 1, threads: int = 1) -> Callable[[], float]:
        model, docs, encode, _, _ = gpt.setup(mode)
        k = [0]
        if mode == "compiled":              # the step recorded once per name length, replayed
            step = compiled_step(model, docs, encode, batch)

            def replay() -> float:
                t0 = time.perf_counter()
                if batch == 1:
                    step(encode(docs[k[0] % len(docs)]))
                else:
                    step.batch([encode(docs[(k[0] * batch + i) % len(docs)]) for i in range(batch)],
                               threads=threads)
                model.update(k[0] % 1000, 1000)
                k[0] += 1
                return time.perf_counter() - t0
            return replay

        def run() -> float:
            t0 = time.perf_counter()
            model.loss(encode(docs[k[0] % len(docs)])).backward()
            model.update(k[0] % 1000, 1000)
            k[0] += 1
            return time.perf_counter() - t0
        return run
    # every single-document stepper takes the same documents in the same round
    d = demo_rounds({"reference": (stepper("reference"), 5), "dropin": (stepper("dropin"), 5),
                     "fast": (stepper("fast"), 5), "compiled": (stepper("compiled"), 5),
                     "batch16_1": (stepper("compiled", 16, 1), 3),
                     "batch16_n": (stepper("compiled", 16, _cores()), 3)}, rounds)
    w = [tapead.Value(0.1 * i) for i in range(16)]
    x = [tapead.Value(1.0 - 0.05 * i) for i in range(16)]
    dot = tapead.dot
    loops = 2000

    def gen() -> float:
        t0 = time.perf_counter()
        for _ in range(loops):
            sum(wi * xi for wi, xi in zip(w, x))
        return (time.perf_counter() - t0) / loops

    def fused() -> float:
        t0 = time.perf_counter()
        for _ in range(loops):
            dot(w, x)
        return (time.perf_counter() - t0) / loops
    dd = demo_rounds({"generator": (gen, 3), "dot": (fused, 3)}, 3 * rounds)
    ref = d["reference"]
    impl = platform.python_implementation()
    rows: List[Tuple[str, ...]] = [(f"GPT step, plain-Python Value ({impl}), ms", "", "", f"{ref * 1e3:.1f}", "examples/gpt.py --reference"),
            (f"GPT step, tapead drop-in ({tapead.FRONT} front), ms", "", f"{d['dropin'] * 1e3:.2f}", "",
             f"{ref / d['dropin']:.0f}x the plain-Python Value"),
            ("GPT step, fast path (tapead.linear + optim.Adam), ms", "", f"{d['fast'] * 1e3:.2f}", "",
             f"{ref / d['fast']:.0f}x the plain-Python Value"),
            ("GPT step, compiled (tapead.jit, its Program replayed), ms", "", f"{d['compiled'] * 1e3:.3f}", "",
             f"{ref / d['compiled']:.0f}x the plain-Python Value"),
            ("GPT minibatch of 16 names compiled (tapead.jit batch), every core, ms", "",
             f"{d['batch16_n'] * 1e3:.3f}", "",
             f"{d['batch16_1'] / d['batch16_n']:.2f}x one thread on {_cores()} cores ({d['batch16_1'] * 1e3:.3f} ms)"),
            ("tapead.dot, 16 terms, ns", "", fmt_ns(dd["dot"] * 1e9), "",
             f"{dd['generator'] / dd['dot']:.1f}x the generator sum ({dd['generator'] * 1e9:.0f} ns)")]
    return rows, dict(step_s=d, dot16_s=dd)


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m tapead.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats (under a minute)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--no-micrograd", action="store_true", help="skip the micrograd comparison")
    ap.add_argument("--tiny", action="store_true", help="only the tiny-script row")
    ap.add_argument("--gpt", action="store_true", help="only the gpt rows")
    args = ap.parse_args(argv)

    mg = None if args.no_micrograd else micrograd
    q = args.quick
    n = 20_000 if q else 100_000
    n_mg = 5_000 if q else 20_000       # micrograd: ~15 us/op and recursive backward
    reps = 3 if q else 11
    demo_steps = 2 if q else 9      # interleaved rounds: 3 steps of each tapead variant, 1 of micrograd
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * n_mg + 1000))
    rows: List[Tuple[str, ...]]
    rows, res = [], {"python": platform.python_version(), "machine": platform.machine(),
                     "quick": q, "results": {}}

    def note(msg: str) -> None:
        print(f"  ... {msg}", file=sys.stderr, flush=True)

    if mg is None:
        print("micrograd is not installed: timing tapead and the floor only "
              "(pip install micrograd==0.1.0, or pip install -e \".[bench]\" in a clone of "
              "tapead, adds the micrograd comparison)\n")
    if args.tiny:
        row, t = tiny_row(11 if q else 31, mg)
        res["results"]["tiny_script_s"] = t
        print("| " + " | ".join(row) + " |")
        return res

    if args.gpt:
        g = gpt_rows(3 if q else 9)
        if g is None:
            print("the gpt rows need the source tree (examples/gpt.py)")
            return res
        res["results"]["gpt"] = g[1]
        for row in g[0]:
            print("| " + " | ".join(row) + " |")
        return res

    workloads: List[Tuple[str, Callable[..., Tuple[Any, ...]], Callable[..., Tuple[Any, ...]]]] = [
        ("deep chain", lambda V, m=n: chain(V, m), lambda V, m=n_mg: chain(V, m)),
        ("wide sum", lambda V, m=n: wide(V, m), lambda V, m=n_mg: wide(V, m)),
        ("README expression", lambda V: readme(V, n // 24), lambda V: readme(V, n_mg // 24)),
    ]
    for name, build, build_mg in workloads:
        note(name)
        m = interleaved(build, build_mg, reps, max(3, reps // 2), mg is not None)
        f_fw, t_fw, t_bw = m["floor_fwd_ns"] or 0.0, m["tapead_fwd_ns"] or 0.0, m["tapead_bwd_ns"] or 0.0
        m_fw, m_bw = m["micrograd_fwd_ns"], m["micrograd_bwd_ns"]
        res["results"][name] = m
        rows.append((f"{name}: forward ns/op", fmt_ns(f_fw), fmt_ns(t_fw), fmt_ns(m_fw),
                     f"{t_fw / f_fw:.2f}x the floor's time" + (f", {m_fw / t_fw:.0f}x faster than micrograd" if m_fw else "")))
        rows.append((f"{name}: backward ns/node", "", fmt_ns(t_bw), fmt_ns(m_bw),
                     f"{m_bw / t_bw:.0f}x faster than micrograd" if m_bw else ""))

    tapead.collect()
    s, nodes = chain(tapead.Value, n)
    st = tapead.tape_stats()
    bpn = 29  # op 1 + x 4 + aux 8 + val 8 + adj 8 bytes per slot, as laid out in csrc/api/tapead.h
    measured = st["bytes"] / max(st["nodes"], 1)
    res["results"]["memory"] = dict(nodes=st["nodes"], bytes=st["bytes"], bytes_per_node=measured)
    rows.append(("tape memory bytes/node", "", f"{measured:.1f}", "", f"{bpn} per slot + segment tables"))
    del s

    note("demo training steps: tapead (fused Layer, op by op, with optim.SGD) and micrograd, interleaved")
    steppers: Dict[str, Tuple[Callable[[], float], int]] = {
        "tapead": (demo_stepper(tapead.nn, tapead.Value), 3),
        "tapead_op_by_op": (demo_stepper(tapead.nn, tapead.Value, fused=False), 3),
        "tapead_optim": (demo_stepper(tapead.nn, tapead.Value, use_optim=True), 3)}
    for lib_name in ("tapead", "xad", "micrograd"):   # the model written with plain Values
        run_plain = plain_stepper(lib_name) if (lib_name != "micrograd" or mg is not None) else None
        if run_plain is not None:
            steppers[f"plain_{lib_name}"] = (run_plain, 1 if lib_name == "micrograd" else 3)
    if mg is not None:
        steppers["micrograd"] = (demo_stepper(micrograd.nn, micrograd.engine.Value), 1)
    d = demo_rounds(steppers, demo_steps)
    m_demo = d.get("micrograd")
    res["results"]["demo_step_s"] = dict(d, micrograd=m_demo)
    for key, label in (("tapead", "demo training step, ms"),
                       ("tapead_op_by_op", "demo step, op by op (no fused Layer), ms"),
                       ("tapead_optim", "demo step with optim.SGD, ms")):
        rows.append((label, "", f"{d[key] * 1e3:.1f}", fmt_ms(m_demo),
                     f"{m_demo / d[key]:.1f}x faster than micrograd" if m_demo else ""))

    p_t, p_x, p_m = d.get("plain_tapead"), d.get("plain_xad"), d.get("plain_micrograd")
    if p_t:
        cmp = [f"{p_m / p_t:.0f}x faster than micrograd" if p_m else "",
               f"{p_x / p_t:.1f}x faster than xad-py ({p_x * 1e3:.1f} ms)" if p_x else ""]
        rows.append((f"demo model in plain Values (no nn), ms ({tapead.FRONT} front)", "",
                     f"{p_t * 1e3:.1f}", fmt_ms(p_m), ", ".join(c for c in cmp if c)))

    note("peak memory of one demo step (fresh processes)")
    t_peak = peak_step_bytes("tapead")
    m_peak = peak_step_bytes("micrograd") if mg is not None else None
    res["results"]["demo_step_peak_rss_bytes"] = dict(tapead=t_peak, micrograd=m_peak)
    rows.append(("demo step peak RSS growth, MB", "", fmt_mb(t_peak), fmt_mb(m_peak),
                 f"{m_peak / t_peak:.0f}x less than micrograd" if (t_peak and m_peak) else ""))

    note("examples/gpt.py training steps: plain-Python Value, tapead drop-in, fast path, interleaved")
    g = gpt_rows(3 if q else 9)
    if g is not None:
        rows.extend(g[0])
        res["results"]["gpt"] = g[1]

    extra_sections(rows, res, args)

    note("a tiny script end to end, tapead and micrograd in fresh interpreters, interleaved")
    row, res["results"]["tiny_script_s"] = tiny_row(11 if q else 31, mg)
    rows.append(row)

    head = ("measure (median)", "floor", "tapead", "micrograd", "ratio")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(5)]
    print(f"\ntapead {tapead.__version__}, Python {res['python']} on {res['machine']}, "
          f"{os.cpu_count()} cores{' (--quick)' if q else ''}\n")
    for r in [head, tuple("-" * w for w in widths)] + rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    print("\n" + FLOOR_NOTE)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
        print(f"\nresults written to {args.json}")
    return res


FLOOR_NOTE = ("floor: the same workload on a pure-Python __slots__ scalar whose operators only return "
              "a new instance (no graph):\nwhat operator overloading alone costs; \"0.3x the floor's time\": "
              "tapead records each op in 0.3x that time.")


def trainer_step(make: Callable[..., Callable[[int], float]], steps: int) -> float:
    """Median seconds of one demo step of a tapead.demo trainer (recompute, batched)."""
    model, X, y = demo.setup(tapead.nn)
    step = make(model, X, y, tapead.Value)
    step(0)  # the first call records (recompute) or compiles (batched)
    ts: List[float] = []
    for k in range(1, steps + 1):
        t0 = time.perf_counter()
        step(k % 100)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def torch_step() -> Optional[Tuple[Callable[[], None], str]]:
    """The demo's model, loss and SGD as PyTorch tensors (float64, one thread): (step, version)."""
    try:
        import torch as _torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    torch: Any = _torch
    torch.set_num_threads(1)
    _, X, y = demo.setup(tapead.nn)
    Xt = torch.tensor(X, dtype=torch.float64)
    yt = torch.tensor(y, dtype=torch.float64).reshape(-1, 1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                              torch.nn.ReLU(), torch.nn.Linear(16, 1)).double()
    params = list(net.parameters())
    k = [0]

    def step() -> None:
        scores = net(Xt)
        loss = torch.relu(1 - yt * scores).mean() + 1e-4 * sum((p * p).sum() for p in params)
        for p in params:
            p.grad = None
        loss.backward()
        lr = 1.0 - 0.9 * (k[0] % 100) / 100
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        k[0] += 1
    return step, str(torch.__version__)


def extra_sections(rows: List[Tuple[str, ...]], res: Dict[str, Any], args: argparse.Namespace) -> None:
    """Replay rows: the demo step recorded once and replayed, eager micrograd as the peer."""
    m_demo = res["results"]["demo_step_s"]["micrograd"]
    n = 20 if args.quick else 100
    for label, key, make in (("demo step, record once + recompute, ms", "recompute",
                              demo.recompute_trainer),
                             ("demo step, batched replay (100 rows), ms", "batched",
                              demo.batched_trainer)):
        print(f"  ... {label}", file=sys.stderr, flush=True)
        t = trainer_step(make, n)
        res["results"]["demo_step_s"][key] = t
        rows.append((label, "", f"{t * 1e3:.2f}", fmt_ms(m_demo),
                     f"{m_demo / t:,.0f}x faster than micrograd" if m_demo else ""))
    tt = torch_step()
    if tt is not None:
        step, ver = tt
        ts: List[float] = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t0)
        t_torch = statistics.median(ts)
        t_bat = res["results"]["demo_step_s"]["batched"]
        res["results"]["demo_step_s"]["torch"] = t_torch
        rows.append((f"same step in PyTorch {ver} (float64, 1 thread), ms", "", f"{t_bat * 1e3:.2f}",
                     f"{t_torch * 1e3:.2f} (torch)", f"batched replay {t_torch / t_bat:.1f}x faster than torch"))


def fmt_ms(s: Optional[float]) -> str:
    return "-" if s is None else f"{s * 1e3:,.0f}"


def fmt_mb(b: Optional[float]) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def _in_big_stack(fn: Callable[[], _T]) -> _T:
    """Run fn in a thread with a large stack: micrograd's backward recurses once per node."""
    out: List[_T] = []
    old = threading.stack_size(512 * 2**20)
    try:
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    return out[0]


if __name__ == "__main__":
    main()
