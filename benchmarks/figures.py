"""The figures README.md and docs/ quote, each with the command that measures it.

    python benchmarks/figures.py --list              # the commands, one a line
    python benchmarks/figures.py --runs 5            # each command 5 times, interleaved: the tables
    python benchmarks/figures.py --runs 5 --save FILE    # and the raw results, kept in FILE
    python benchmarks/figures.py --load FILE         # the tables again, from kept results
    python benchmarks/figures.py --runs 5 --write    # and write each into its page
    python benchmarks/figures.py --check             # each command once, in its quickest form:
                                                     # it runs and gives every figure read from it

Run from the root of a clone after `pip install -e ".[bench]"`.  Each command
measures tapead and its peer in the same process, as medians of interleaved
repeats, and writes what it measured as JSON (--json FILE); the runs take
turns (command A, B, C, then A again ...), so a slow spell of a shared
machine falls on all of them.  A figure here is the range of one measure
over the runs: the tables below are what README.md ("Benchmarks"),
docs/native.md ("Figures") and docs/benchmarks.md quote, each under a line
naming the machine and the number of runs, between the page's markers
(BEGIN and END below), where --write puts them.  A row's name is
what its command prints for it.  tests/test_figures.py checks that each
command and flag exists and that the pages quote only rows listed here.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

# name -> the command as a user types it from the root of a clone (its JSON
# output goes to the file given by --json, added here)
COMMANDS = {
    "bench": "python -m tapead.bench",
    "native": "python benchmarks/bench_native.py",
    "custom": "python benchmarks/bench_custom.py",
    "scale": "python benchmarks/bench_scale.py mc",
}
# the quickest form of each, for --check (the same JSON, smaller workloads)
QUICK = {
    "bench": "python -m tapead.bench --quick",
    "native": "python benchmarks/bench_native.py --quick",
    "custom": "python benchmarks/bench_custom.py --groups 100 --rounds 1",
    "scale": "python benchmarks/bench_scale.py --quick mc",
}

# how a ratio reads: peer/tapead "Nx faster", peer/tapead "Nx micrograd's speed",
# tapead/peer "Nx" (of the peer's time), peer/tapead "Nx less"; or none (the peer shown beside)
FASTER, SPEED, TIME, LESS, NONE = "faster", "speed", "time", "less", ""


class Figure(NamedTuple):
    """One row: `name` as its command prints it, `cmd` a key of COMMANDS,
    `value` and `peer` paths into its JSON (a value that is a list of repeats
    gives its median), `peer_name`, how the ratio reads, the tables (pages)
    that quote it, and the factor from the JSON's unit to the row's."""
    name: str
    cmd: str
    value: Tuple[str, ...]
    peer: Optional[Tuple[str, ...]]
    peer_name: str
    ratio: str
    pages: Tuple[str, ...]
    scale: float = 1.0


README, NATIVE, BENCH = "README.md", "docs/native.md", "docs/benchmarks.md"
_R = ("results",)


MS, NS = 1e3, 1e9      # from the bench's seconds


def _bench(name: str, value: Tuple[str, ...], peer: Optional[Tuple[str, ...]], peer_name: str = "micrograd",
           ratio: str = FASTER, pages: Tuple[str, ...] = (BENCH,), scale: float = 1.0) -> Figure:
    return Figure(name, "bench", _R + value, None if peer is None else _R + peer, peer_name, ratio, pages, scale)


FIGURES: List[Figure] = [
    _bench("deep chain: forward ns/op", ("deep chain", "tapead_fwd_ns"), ("deep chain", "micrograd_fwd_ns"),
           pages=(README, BENCH)),
    _bench("deep chain: backward ns/node", ("deep chain", "tapead_bwd_ns"), ("deep chain", "micrograd_bwd_ns")),
    _bench("wide sum: forward ns/op", ("wide sum", "tapead_fwd_ns"), ("wide sum", "micrograd_fwd_ns")),
    _bench("wide sum: backward ns/node", ("wide sum", "tapead_bwd_ns"), ("wide sum", "micrograd_bwd_ns")),
    _bench("README expression: forward ns/op", ("README expression", "tapead_fwd_ns"),
           ("README expression", "micrograd_fwd_ns")),
    _bench("README expression: backward ns/node", ("README expression", "tapead_bwd_ns"),
           ("README expression", "micrograd_bwd_ns"), pages=(README, BENCH)),
    _bench("deep chain: forward ns/op, against the floor", ("deep chain", "tapead_fwd_ns"),
           ("deep chain", "floor_fwd_ns"), "floor", TIME),
    _bench("tape memory bytes/node", ("memory", "bytes_per_node"), None),
    _bench("demo training step, ms", ("demo_step_s", "tapead"), ("demo_step_s", "micrograd"), pages=(README, BENCH),
           scale=MS),
    _bench("demo step, op by op (no fused Layer), ms", ("demo_step_s", "tapead_op_by_op"),
           ("demo_step_s", "micrograd"), scale=MS),
    _bench("demo step with optim.SGD, ms", ("demo_step_s", "tapead_optim"), ("demo_step_s", "micrograd"), scale=MS),
    _bench("demo model in plain Values (no nn), ms (cpython front)", ("demo_step_s", "plain_tapead"),
           ("demo_step_s", "plain_micrograd"), pages=(README, BENCH), scale=MS),
    _bench("demo model in plain Values (no nn), ms (cpython front), against xad-py", ("demo_step_s", "plain_tapead"),
           ("demo_step_s", "plain_xad"), "xad-py", scale=MS),
    _bench("demo step peak RSS growth, MB", ("demo_step_peak_rss_bytes", "tapead"),
           ("demo_step_peak_rss_bytes", "micrograd"), ratio=LESS, scale=1 / 2 ** 20),
    _bench("GPT step, tapead drop-in (cpython front), ms", ("gpt", "step_s", "dropin"), ("gpt", "step_s", "reference"),
           "plain-Python Value", pages=(README, BENCH), scale=MS),
    _bench("GPT step, fast path (tapead.linear + optim.Adam), ms", ("gpt", "step_s", "fast"),
           ("gpt", "step_s", "reference"), "plain-Python Value", pages=(README, BENCH), scale=MS),
    _bench("GPT step, compiled (tapead.jit, its Program replayed), ms", ("gpt", "step_s", "compiled"),
           ("gpt", "step_s", "reference"), "plain-Python Value", pages=(README, BENCH), scale=MS),
    _bench("GPT minibatch of 16 names compiled (tapead.jit batch), every core, ms", ("gpt", "step_s", "batch16_n"),
           ("gpt", "step_s", "batch16_1"), "one thread", pages=(README, BENCH), scale=MS),
    _bench("tapead.dot, 16 terms, ns", ("gpt", "dot16_s", "dot"), ("gpt", "dot16_s", "generator"),
           "the generator sum", scale=NS),
    _bench("demo step, record once + recompute, ms", ("demo_step_s", "recompute"), ("demo_step_s", "micrograd"),
           scale=MS),
    _bench("demo step, batched replay (100 rows), ms", ("demo_step_s", "batched"), ("demo_step_s", "micrograd"),
           pages=(README, BENCH), scale=MS),
    _bench("tiny script end to end (subprocess), ms", ("tiny_script_s", "tapead"), ("tiny_script_s", "micrograd"),
           ratio=SPEED, pages=(README, BENCH), scale=MS),
    Figure("European call, price and pathwise Greeks (native=True), ns/path", "native",
           _R + ("european", "native_ns_path"), _R + ("european", "interpreter_ns_path"), "interpreter", TIME,
           (README, NATIVE)),
    Figure("demo batched step, 100 rows (native=True), us", "native", _R + ("demo", "native_us"),
           _R + ("demo", "interpreter_us"), "interpreter", TIME, (README, NATIVE)),
    Figure("the same, the C call alone, us", "native", _R + ("demo", "native_c_us"), _R + ("demo", "interpreter_c_us"),
           "interpreter", TIME, (NATIVE,)),
    Figure("the demo's kernel, its build (native=True), s", "native", _R + ("demo", "build_s"), None, "", TIME,
           (NATIVE,)),
    Figure("fastest-autograd, 10k ops (native=None: the interpreter), us/row", "native",
           _R + ("fastest_autograd", "tapead_us_row"), _R + ("fastest_autograd", "fa_ref_us_row"),
           "fa_ref.c, gcc -O3", TIME, (README, NATIVE)),
    Figure("first call of an 899-node program of operations, native=\"split\" (build included), s", "native",
           _R + ("first", "first_s", "split"), None, "", NONE, (NATIVE,)),
    Figure("the same program's first call, native=True (no shape is faster: nothing built), ms", "native",
           _R + ("first", "first_s", "True"), _R + ("first", "first_s", "None"), "native=None", NONE, (NATIVE,), 1e3),
    Figure("that program's split kernel, per row, us", "native", _R + ("first", "split_native_us_row"),
           _R + ("first", "split_interpreter_us_row"), "interpreter", TIME, (NATIVE,)),
    Figure("GPT loss's gradient, 40k nodes (native=True), us", "native", _R + ("gpt", "native_us"),
           _R + ("gpt", "interpreter_us"), "interpreter", TIME, (NATIVE,)),
    Figure("GPT loss, first call (native=True, build included), s", "native", _R + ("gpt", "first_native_s"),
           None, "", NONE, (NATIVE,)),
    Figure("custom nodes, micrograd's idiom (1 in 10 custom), record + backward, us/group", "custom",
           ("end_to_end_us_group", "tapead, micrograd's idiom (1 in 10 custom)"),
           ("end_to_end_us_group", "micrograd, its idiom (1 in 10 custom)"), "micrograd", FASTER, (BENCH,)),
    Figure("custom nodes by tapead.precomputed (1 in 10 custom), us/group", "custom",
           ("end_to_end_us_group", "tapead, precomputed (1 in 10 custom)"),
           ("end_to_end_us_group", "micrograd, its idiom (1 in 10 custom)"), "micrograd", FASTER, (BENCH,)),
    Figure("the same graph with no custom node, us/group", "custom",
           ("end_to_end_us_group", "tapead, plain (no custom node)"),
           ("end_to_end_us_group", "micrograd, its idiom (1 in 10 custom)"), "micrograd", FASTER, (BENCH,)),
    Figure("Monte Carlo, European call, price and pathwise Greeks, 1 thread, ns/path", "scale",
           _R + ("mc", "European", "threads1_ns_path"), _R + ("mc", "European", "numpy_ns_path"),
           "hand-vectorised numpy", TIME, (BENCH,)),
    Figure("Monte Carlo, Asian call (12 dates), 1 thread, ns/path", "scale",
           _R + ("mc", "Asian (12 dates)", "threads1_ns_path"), _R + ("mc", "Asian (12 dates)", "numpy_ns_path"),
           "hand-vectorised numpy", TIME, (BENCH,)),
]
PAGES = (README, NATIVE, BENCH)
BEGIN, END = "<!-- the table of benchmarks/figures.py -->", "<!-- end of the table -->"


def get(result: Dict[str, Any], path: Sequence[str]) -> Optional[float]:
    """The number at path in one run's JSON (the median of a list), or None
    where the run did not measure it (micrograd or xad not installed, ...)."""
    x: Any = result
    for key in path:
        if not isinstance(x, dict) or key not in x:
            return None
        x = x[key]
    if isinstance(x, list):
        x = statistics.median(x) if x else None
    return None if x is None else float(x)


def fmt(x: float) -> str:
    """A measure as the tables print it: three significant digits, thousands with commas."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if x >= 1 else f"{x:#.3g}"      # (0.600, not 0.6)


def span(xs: List[float], f: Any = fmt) -> str:
    lo, hi = f(min(xs)), f(max(xs))
    return lo if lo == hi else f"{lo}-{hi}"


def ratio_text(fig: Figure, rs: List[float]) -> str:
    def f(x: float) -> str:
        return f"{x:,.0f}" if x >= 100 else f"{x:.0f}" if x >= 10 else f"{x:.2f}"
    if fig.ratio == NONE:
        return ""
    if fig.ratio == FASTER:
        return f"{span(rs, f)}x faster"
    if fig.ratio == LESS:
        return f"{span(rs, f)}x less"
    if fig.ratio == SPEED:
        return f"{span(rs, f)}x {fig.peer_name}'s speed"
    return f"{span(rs, f)}x"


def row(fig: Figure, runs: List[Dict[str, Any]]) -> Optional[List[str]]:
    """The table row of fig over runs (each: its command's JSON), or None if no run measured it."""
    vals = [(get(r, fig.value), get(r, fig.peer) if fig.peer else None) for r in runs]
    vals = [(v, p) for v, p in vals if v is not None and (fig.peer is None or p is not None)]
    if not vals:
        return None
    ts = [v * fig.scale for v, _ in vals]
    if fig.peer is None:
        return [fig.name, span(ts), "", "", COMMANDS[fig.cmd]]
    ps = [p * fig.scale for _, p in vals]
    rs = [v / p if fig.ratio == TIME else p / v for v, p in vals]
    return [fig.name, span(ts), f"{fig.peer_name} {span(ps)}", ratio_text(fig, rs), COMMANDS[fig.cmd]]


def machine() -> str:
    """The machine in words: cores, architecture, VM or not, CPU model."""
    model, vm = "", False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags") and " hypervisor" in line:
                    vm = True
    except OSError:
        pass
    kind = "VM" if vm else "machine"
    return f"{os.cpu_count()}-core {platform.machine()} {kind}" + (f" ({model})" if model else "")


def table(page: str, runs: Dict[str, List[Dict[str, Any]]], about: str) -> str:
    lines = [about, "", "| measure (median) | tapead | peer | ratio | command |", "| --- | --- | --- | --- | --- |"]
    for fig in FIGURES:
        if page in fig.pages:
            r = row(fig, runs.get(fig.cmd, []))
            if r is not None:
                lines.append("| " + " | ".join(r[:4] + [f"`{r[4]}`"]) + " |")
    return "\n".join(lines)


def write(page: str, text: str) -> None:
    """text, a table, into page between its markers (the one place it goes)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), page)
    with open(path, encoding="utf-8") as f:
        old = f.read()
    if old.count(BEGIN) != 1 or old.count(END) != 1:
        raise SystemExit(f"{page} should hold the markers {BEGIN} and {END} once each")
    head, rest = old.split(BEGIN)
    new = head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def run_once(cmd: str, quick: bool = False) -> Tuple[Dict[str, Any], str]:
    """One run of command cmd (a key of COMMANDS) from the repository root:
    (its JSON, what it printed)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = (QUICK if quick else COMMANDS)[cmd].split()
    argv[0] = sys.executable
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        print(f"  {' '.join(argv[1:])} ...", file=sys.stderr, flush=True)
        printed = subprocess.run(argv + ["--json", out], cwd=root, check=True, stdout=subprocess.PIPE,
                                 text=True).stdout
        with open(out) as f:
            return json.load(f), printed


def check() -> int:
    """Each command once in its quickest form: it runs, every figure read
    from it is in its JSON, and python -m tapead.bench prints each of its
    rows by the name the tables give it.  0 if so."""
    missing = []
    for cmd in COMMANDS:
        got, printed = run_once(cmd, quick=True)
        for fig in FIGURES:
            if fig.cmd == cmd == "bench" and f"| {fig.name.split(', against')[0]} " not in printed:
                missing.append(f"{fig.name}: {QUICK[cmd]} prints no row of that name")
            if fig.cmd == cmd:
                for path in (fig.value, fig.peer):
                    if path is not None and get(got, path) is None:
                        missing.append(f"{fig.name}: {QUICK[cmd]} gave no {'/'.join(path)}")
    print("\n".join(missing) or f"all {len(COMMANDS)} commands run and give all {len(FIGURES)} figures")
    return 1 if missing else 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs of each command (default 3)")
    ap.add_argument("--only", nargs="+", choices=sorted(COMMANDS), help="these commands alone")
    ap.add_argument("--save", metavar="FILE", help="also keep the raw results in FILE")
    ap.add_argument("--load", metavar="FILE", help="print the tables from results kept by --save")
    ap.add_argument("--list", action="store_true", help="the commands, one a line")
    ap.add_argument("--check", action="store_true", help="each command once, in its quickest form")
    ap.add_argument("--write", action="store_true", help="write each table into its page")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(COMMANDS.values()))
        return 0
    if args.check:
        return check()
    if args.load:
        with open(args.load) as f:
            kept = json.load(f)
    else:
        cmds = args.only or list(COMMANDS)
        runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in cmds}
        for k in range(args.runs):
            print(f"run {k + 1} of {args.runs}", file=sys.stderr, flush=True)
            for c in cmds:
                runs[c].append(run_once(c)[0])
        kept = dict(machine=machine(), python=f"{platform.python_implementation()} {platform.python_version()}",
                    runs=runs)
        if args.save:
            with open(args.save, "w") as f:
                json.dump(kept, f, indent=1)
    n = max((len(v) for v in kept["runs"].values()), default=0)
    about = (f"{n} runs of each command, taking turns, on a {kept['machine']}, {kept['python']}: "
             f"each figure is the range of the runs' medians.")
    for page in PAGES:
        text = table(page, kept["runs"], about)
        print(f"\n{page}:\n")
        print(text)
        if args.write:
            write(page, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
