"""The commands README.md and docs/ give, and the figures they quote
(benchmarks/figures.py lists each figure with its command): every command
names a script and flags that exist (its --help runs and lists them); every
table of figures quotes only rows figures.py lists, each with its command,
under a line naming the machine and the number of runs, and a row quoted on
two pages says the same on both.  Nothing here runs a benchmark:
`python benchmarks/figures.py --check` (CI) runs each command's quick form
and checks that it prints each row's name and gives its figures."""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

import tapead
from conftest import this_tapead

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES_PY = os.path.join(ROOT, "benchmarks", "figures.py")
if not (os.path.isfile(FIGURES_PY) and os.path.isfile(os.path.join(ROOT, "README.md"))):
    pytest.skip("needs the source tree (README.md, docs/, benchmarks/, examples/)", allow_module_level=True)
spec = importlib.util.spec_from_file_location("figures", FIGURES_PY)
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)

PAGES = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                         if f.endswith(".md")]
ENV = this_tapead()


def read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def quoted_commands():
    """(page, command) for every `python ...` / `bash ...` command the pages
    give, in backticks or in a code block."""
    found = set()
    for page in PAGES:
        text = read(page)
        spans = re.findall(r"`((?:python3?|pypy3|bash) [^`\n]+)`", text)
        for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S):
            spans += [ln.split("#")[0] for ln in block.splitlines()]
        for s in spans:
            for part in re.split(r"&&|;|\|", s):
                part = part.strip()
                if re.match(r"(python3?|pypy3|bash) ", part):
                    found.add((page, part))
    return sorted(found)


def script_of(cmd):
    """(the script's path or module, its flags) of one command."""
    argv = shlex.split(cmd)
    if argv[1] == "-m":
        return argv[2], [a.split("=")[0] for a in argv[3:] if a.startswith("--")]
    return argv[1], [a.split("=")[0] for a in argv[2:] if a.startswith("--")]


_HELP = {}


def help_text(script):
    """--help of an argparse script or module (others: None)."""
    if script not in _HELP:
        if script.endswith(".py"):
            with open(os.path.join(ROOT, script), encoding="utf-8") as f:
                if "argparse" not in f.read():
                    _HELP[script] = None
                    return None
            argv = [sys.executable, os.path.join(ROOT, script), "--help"]
        else:
            argv = [sys.executable, "-m", script, "--help"]
        # (from elsewhere than the root: there -m would import the source folder, not this tapead)
        out = subprocess.run(argv, cwd=tempfile.gettempdir(), env=ENV, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, f"{' '.join(argv[1:])}: {out.stderr}"
        _HELP[script] = out.stdout
    return _HELP[script]


def test_every_quoted_command_names_a_script_and_flags_that_exist():
    cmds = quoted_commands()
    assert any(c == "python -m tapead.bench" for _, c in cmds), cmds
    bad = []
    for page, cmd in cmds:
        if cmd.startswith("python -m pytest") or cmd.startswith("python build_ext.py"):
            continue
        script, flags = script_of(cmd)
        if script.endswith((".py", ".sh")):
            if not os.path.isfile(os.path.join(ROOT, script)):
                bad.append(f"{page}: {cmd}: no {script}")
                continue
            if script.endswith(".sh"):
                with open(os.path.join(ROOT, script), encoding="utf-8") as f:
                    src = f.read()
                bad += [f"{page}: {cmd}: {script} has no {fl}" for fl in flags if fl not in src]
                continue
        elif not script.startswith("tapead"):
            continue
        text = help_text(script)
        if text is None:
            with open(os.path.join(ROOT, script), encoding="utf-8") as f:
                src = f.read()
            bad += [f"{page}: {cmd}: {script} has no {fl}" for fl in flags if fl not in src]
        else:
            bad += [f"{page}: {cmd}: {script} --help lists no {fl}" for fl in flags if fl not in text]
    assert bad == []


def test_each_figures_command_and_its_quick_form_exists():
    for table in (figures.COMMANDS, figures.QUICK):
        assert set(table) == {f.cmd for f in figures.FIGURES}
        for cmd in table.values():
            script, flags = script_of(cmd)
            text = help_text(script)
            assert text is not None and "--json" in text, cmd
            assert [fl for fl in flags if fl not in text] == [], cmd
    out = subprocess.run([sys.executable, FIGURES_PY, "--list"], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == list(figures.COMMANDS.values())


def tables(page):
    """Each table of figures on page (rows whose last cell is a command of
    figures.py): (the text before it, [(name, cells, command)])."""
    commands = {f"`{c}`" for c in figures.COMMANDS.values()}
    found, rows, before = [], [], []
    for line in read(page).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells and cells[-1] in commands:
            rows.append((cells[0], cells[1:-1], cells[-1].strip("`")))
            continue
        if rows:
            found.append(("\n".join(before[-6:]), rows))
            rows = []
        if cells is None:
            before.append(line)
    if rows:
        found.append(("\n".join(before[-6:]), rows))
    return found


def test_figures_quoted_are_listed_with_their_command_machine_and_runs():
    seen = {}
    for page in figures.PAGES:
        ts = tables(page)
        assert ts, f"{page} has no table of figures"
        for before, rows in ts:
            assert re.search(r"\d+ runs of each command, taking turns, on an? \d+-core \S+", before), \
                f"{page}: a table of figures without the line naming its machine and runs: {before!r}"
            for name, cells, cmd in rows:
                figs = [f for f in figures.FIGURES if f.name == name]
                assert figs, f"{page}: {name!r} is not a figure of benchmarks/figures.py"
                assert page in figs[0].pages and figures.COMMANDS[figs[0].cmd] == cmd, (page, name)
                assert seen.setdefault(name, cells) == cells, f"{name!r} differs between pages"
    listed = {(p, f.name) for f in figures.FIGURES for p in f.pages}
    quoted = {(p, name) for p in figures.PAGES for _, rows in tables(p) for name, _, _ in rows}
    assert listed - quoted == set(), "figures.py lists rows that no page quotes"
