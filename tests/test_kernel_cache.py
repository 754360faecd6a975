"""The build and cache of generated kernels (tapead/codegen/build.py), for the C
path (tapead.native) and the CUDA path's cubins: a cache that runs code
trusts only what it wrote (a private folder, no symbolic links, a checksum
of the bytes it wrote, the very file checked is loaded), a damaged entry is
rebuilt, never run, the bound is one for both kinds, bad settings give a
warning and the default, and no compiler outlives its build (success,
failure, timeout, KeyboardInterrupt, SIGKILL of the process).  Each test
uses a cache folder of its own (TAPEAD_CACHE) and sources of its own (a
kernel already loaded in this process is not looked up again)."""
import ctypes
import os
import pickle
import re
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import numpy as np
import pytest

import tapead
from tapead import Value, codegen, native
from conftest import this_tapead

pytestmark = pytest.mark.skipif(native.compiler() is None or os.name != "posix",
                                reason="no C compiler, or not POSIX")
INCLUDE = codegen.include_dirs()


def python(*args, env=None, **kw):
    """A new Python process running this tapead (args: what follows the interpreter)."""
    env = dict(os.environ if env is None else env, PYTHONPATH=this_tapead()["PYTHONPATH"])
    return subprocess.Popen([sys.executable, *args], env=env, **kw)


def run_python(*args, env=None):
    p = python(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


class _Lazy:
    """tapead.codegen.build, imported on first use (the tests of the reproduced
    defects go through compile(native=True) and native.key alone)."""

    def __getattr__(self, name):
        from tapead.codegen import build as k
        return getattr(k, name)


kcache = _Lazy()


@pytest.fixture(autouse=True)
def _own_folders(tmp_path, monkeypatch):
    """The cache in tmp_path/cache; the private fallback (tempfile's folder) in tmp_path/tmp."""
    monkeypatch.setenv("TAPEAD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("TAPEAD_CACHE_MB", raising=False)
    monkeypatch.delenv("TAPEAD_BUILD_TIMEOUT", raising=False)


def source(value):
    """A kernel returning value, with a name no other test builds."""
    return f"/* {secrets.token_hex(8)} */\nint ta_kernel(void) {{ return {value}; }}\n"


def load(src, **kw):
    """The kernel of src, built or found, called: its value."""
    address = kcache.library(src, "-O1", INCLUDE, ("ta_kernel",), {}, **kw)[0]
    return ctypes.CFUNCTYPE(ctypes.c_int)(address)()


def entry_name(src):
    return f"k-{kcache.c_key([src], native.compiler(), '-O1', {})}.so"


def forged(name, data):
    """data as an entry of that name, with tapead's trailer (what only tapead writes)."""
    return data + kcache._MAGIC + kcache._digest(name, data)


def planted_library(tmp_path, marker, value=7):
    """A library with ta_kernel returning value and a constructor that writes marker."""
    src = tmp_path / "planted.c"
    src.write_text(textwrap.dedent(f"""\
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        int ta_kernel(void) {{ return {value}; }}
        """))
    so = tmp_path / "planted.so"
    subprocess.run(native.compiler() + ["-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so.read_bytes()


def entries(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith(("k-", "b-")))


# ---------------------------------------------------------------- keys, reuse, bound

def test_keys_reuse_and_one_bound(tmp_path, monkeypatch):
    argv = native.compiler()
    s1, s2 = source(1), source(2)
    assert kcache.key("ab", "c") != kcache.key("a", "bc") != kcache.key(["a", "bc"])
    assert native.key(s1, argv) == native.key(s1, argv) != native.key(s2, argv)
    assert native.key(s1, argv) != native.key(s1, argv + ["-DX"])
    assert native.key(s1, argv) != native.key(s1, argv, "-O2")
    cache = tmp_path / "cache"
    made = []
    cubin = kcache.fetch("c0ffee", ".sm_90.cubin", lambda b: made.append(1) or b"\x7fELF" + bytes(240_000))
    cubin.close()
    assert load(s1) == 1
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    name = entry_name(s1)
    assert entries(cache) == sorted([name, "k-c0ffee.sm_90.cubin"])
    ino = os.stat(cache / name).st_ino
    kcache._loaded.clear()                     # as a new process: found in the cache, not rebuilt
    assert load(s1) == 1 and os.stat(cache / name).st_ino == ino
    # one bound for C and CUDA entries: past it, the least recently used goes (the cubin)
    monkeypatch.setenv("TAPEAD_CACHE_MB", str(250_000 / 2 ** 20))
    assert load(s2) == 2
    assert entries(cache) == sorted([name, entry_name(s2)])
    monkeypatch.setenv("TAPEAD_CACHE_MB", "0")                    # 0: only the newest stays
    assert kcache.fetch("c0ffee", ".sm_90.cubin", lambda b: made.append(1) or b"cubin").data == b"cubin"
    assert made == [1, 1] and entries(cache) == ["k-c0ffee.sm_90.cubin"]


def test_concurrent_builders(tmp_path):
    """Processes building the same kernel at once all get it, whole, and leave no temporary files."""
    prog = ("import ctypes, tapead.codegen.build as k, tapead.codegen as c; "
            f"a = k.library({source(7)!r}, '-O1', c.include_dirs(), ('ta_kernel',), {{}})[0]; "
            "print(ctypes.CFUNCTYPE(ctypes.c_int)(a)())")
    procs = [python("-c", prog, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [o.strip() for o, _ in outs] == ["7"] * 4 and not any(e for _, e in outs)
    assert len(entries(tmp_path / "cache")) == 1


# ------------------------------------------------------------------- trust

def program():
    """A small Program no other test compiles, run by the interpreter; its
    code; its kernel's file name; and compile(native=True) of it."""
    x, w = Value(0.5), Value(1.5)
    y = (x * w).tanh() + x.sin() * (1 + secrets.randbelow(10 ** 9))
    p = tapead.compile([y], [x], wrt=[w], native=False)
    code = codegen.Code.of(p)
    name = f"k-{native.key(codegen.source(code, codegen.choose(code))[0], native.compiler(), '-O1')}.so"
    return p, code, name, lambda: tapead.compile([y], [x], wrt=[w], native=True)


def planted_kernel(tmp_path, code, marker):
    """code's genuine kernel, and a constructor that writes marker."""
    src = tmp_path / "planted.c"
    src.write_text(codegen.source(code, codegen.choose(code))[0][0] + textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        """))
    so = tmp_path / "planted.so"
    subprocess.run(native.compiler() + native.flags("-O1") + ["-shared", *(f"-I{d}" for d in INCLUDE), "-o",
                                                             str(so), str(src), "-lm"], check=True)
    return so.read_bytes()


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "foreign-owned", "symbolic link"])
def test_a_folder_others_could_write_is_not_used(tmp_path, monkeypatch, how):
    """A kernel planted in a cache folder someone else could write (the
    genuine kernel, plus code of theirs) is never loaded: the folder is
    refused with a warning, and the kernel built in the private fallback."""
    if how == "foreign-owned" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    slow, code, name, fast_of = program()
    marker = tmp_path / "marker"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    (shared / name).write_bytes(planted_kernel(tmp_path, code, marker))
    os.chmod(shared / name, 0o600)
    cache = shared
    if how == "world-writable":
        os.chmod(shared, 0o1777)
    elif how == "group-writable":
        os.chmod(shared, 0o770)
    elif how == "foreign-owned":
        os.chown(shared / name, 5001, 5001)
        os.chown(shared, 5001, 5001)
    else:
        cache = tmp_path / "link"
        cache.symlink_to(shared)
    monkeypatch.setenv("TAPEAD_CACHE", str(cache))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fast = fast_of()
    assert not marker.exists(), "the planted code ran"
    assert fast.native and any(re.match(f"tapead: not using the kernel cache folder {re.escape(str(cache))}: "
                                        ".*must be private", str(w.message)) for w in seen), seen
    assert entries(tmp_path / "tmp" / f"tapead-{os.geteuid()}") == [name]
    X = np.linspace(-1, 1, 9).reshape(-1, 1)
    assert np.array_equal(fast(X), slow(X))


@pytest.mark.parametrize("how", ["symbolic link", "foreign-owned", "group-writable", "not tapead's",
                                 "another kernel's", "one byte changed", "a folder"])
def test_an_entry_not_written_by_tapead_is_rebuilt(tmp_path, how):
    """In the private folder, an entry that is a symbolic link, is not this
    user's own, is writable by others, or whose bytes are not what tapead
    wrote under that name, is never loaded: a warning, and it is rebuilt."""
    if how == "foreign-owned" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    src, marker = source(6), tmp_path / "marker"
    cache = tmp_path / "cache"
    load(source(0))                           # (makes the folder)
    name = entry_name(src)
    evil = forged(name, planted_library(tmp_path, marker, 6))
    path = cache / name
    if how == "symbolic link":
        (tmp_path / "target.so").write_bytes(evil)
        path.symlink_to(tmp_path / "target.so")
    elif how == "not tapead's":
        path.write_bytes(planted_library(tmp_path, marker, 6))     # no trailer: a library someone copied in
    elif how == "another kernel's":
        other = entry_name(source(6))
        path.write_bytes(forged(other, planted_library(tmp_path, marker, 6)))
    elif how == "one byte changed":
        raw = bytearray(evil)
        raw[len(raw) // 2] ^= 1
        path.write_bytes(bytes(raw))
    elif how == "a folder":
        path.mkdir()
    else:
        path.write_bytes(evil)
        if how == "foreign-owned":
            os.chown(path, 5001, 5001)
        else:
            os.chmod(path, 0o660)
    with pytest.warns(UserWarning, match=f"the cached kernel {re.escape(str(path))} was not used .*rebuilding"):
        assert load(src) == 6
    assert not marker.exists()
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def test_the_file_checked_is_the_file_loaded(tmp_path, monkeypatch):
    """A cached kernel is loaded from the file descriptor that was checked:
    replacing the file after the check changes nothing."""
    if not kcache._PROC_FD:
        pytest.skip("no /proc/self/fd")
    src, marker = source(8), tmp_path / "marker"
    load(src)
    kcache._loaded.clear()
    name = entry_name(src)
    evil = planted_library(tmp_path, marker, 9)
    real = kcache._dlopen

    def swap_then_load(e):                    # (the checked entry: swap the file under its name)
        (tmp_path / "evil").write_bytes(evil)
        os.replace(tmp_path / "evil", tmp_path / "cache" / name)
        return real(e)
    monkeypatch.setattr(kcache, "_dlopen", swap_then_load)
    assert load(src) == 8 and not marker.exists()


def test_each_load_has_its_own_path():
    """Two kernels loaded through the same fd number are two libraries
    (dlopen returns the library it already has under a path string)."""
    values = [load(source(v)) for v in (11, 12, 13)]
    assert values == [11, 12, 13]


def test_without_home_the_cache_is_absolute_and_private(tmp_path, monkeypatch):
    """HOME unset and no passwd entry: tapead-<uid> in the temporary folder,
    never a folder relative to the working directory."""
    import pwd

    def no_entry(uid):
        raise KeyError(uid)
    for var in ("HOME", "TAPEAD_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    d = native.cache_dir()
    assert d == str(tmp_path / "tmp" / f"tapead-{os.geteuid()}") and os.path.isabs(d)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")      # (ignored: the XDG spec)
    assert native.cache_dir() == d
    slow, code, name, fast_of = program()
    assert fast_of().native
    assert os.listdir(work) == [] and entries(d) == [name]
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


# ------------------------------------------------------------------ damage

CHILD = r"""
import sys, numpy as np, tapead
from tapead import Value
x = Value(0.5); w = Value(1.5)
y = (x * w).tanh() + x.sin() * float(sys.argv[1])
p = tapead.compile([y], [x], wrt=[w], native=True)
print(p.native, p(np.array([[0.1], [0.2]])).ravel().tolist())
"""


def test_a_damaged_kernel_is_rebuilt_not_run(tmp_path):
    """A kernel cut short (a full disk, a copy in progress) would crash the
    process that maps it (SIGBUS): it is rebuilt with a warning; so is a
    library without the kernel in its place."""
    cache = tmp_path / "cache"
    c = str(secrets.randbelow(1000) / 1000)
    first = run_python("-c", CHILD, c)
    assert first.returncode == 0 and first.stdout.startswith("True"), first.stderr
    (name,) = entries(cache)
    whole = (cache / name).read_bytes()
    for frac in (0.05, 0.5, 0.95, 0.999):
        (cache / name).write_bytes(whole[:int(len(whole) * frac)])
        r = run_python("-c", CHILD, c)
        assert r.returncode == 0 and r.stdout == first.stdout, (frac, r.returncode, r.stderr)
        assert "was not used" in r.stderr and "rebuilding it" in r.stderr
        assert len((cache / name).read_bytes()) == len(whole)
    # a library that loads but is not the kernel (no ta_kernel), put in its place
    other = tmp_path / "other.c"
    other.write_text("int unrelated(void) { return 1; }\n")
    subprocess.run(native.compiler() + ["-shared", "-fPIC", "-o", str(cache / name), str(other)], check=True)
    for _ in range(2):
        r = run_python("-c", CHILD, c)
        assert r.returncode == 0 and r.stdout == first.stdout, r.stderr
    assert len((cache / name).read_bytes()) == len(whole)


def test_a_library_without_the_kernel_is_rebuilt(tmp_path):
    """An entry with a valid trailer that loads but has no ta_kernel is
    rebuilt with a warning (and a fresh build without it is a CompilerError)."""
    src = source(4)
    load(source(0))
    name = entry_name(src)
    other = tmp_path / "other.c"
    other.write_text("int unrelated(void) { return 1; }\n")
    subprocess.run(native.compiler() + ["-shared", "-fPIC", "-o", str(tmp_path / "other.so"), str(other)],
                   check=True)
    (tmp_path / "cache" / name).write_bytes(forged(name, (tmp_path / "other.so").read_bytes()))
    os.chmod(tmp_path / "cache" / name, 0o600)
    with pytest.warns(UserWarning, match="was not used .it does not load as a kernel.*ta_kernel"):
        assert load(src) == 4
    with pytest.raises(kcache.CompilerError, match="could not be loaded.*ta_kernel"):
        kcache.library(f"/* {secrets.token_hex(8)} */ int unrelated(void) {{ return 1; }}\n", "-O1",
                       INCLUDE, ("ta_kernel",), {})


def test_entries_are_written_whole_and_flushed(tmp_path, monkeypatch):
    """Written to a temporary file, flushed to disk, renamed, the folder flushed."""
    calls = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", stat.S_IFMT(os.fstat(fd).st_mode)))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "rename", lambda *a, **k: calls.append(("rename",)) or real_rename(*a, **k))
    load(source(10))
    assert calls == [("fsync", stat.S_IFREG), ("rename",), ("fsync", stat.S_IFDIR)]


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "abc", "-1"])
def test_bad_settings_warn_and_use_the_default(monkeypatch, value):
    monkeypatch.setenv("TAPEAD_CACHE_MB", value)
    slow, code, name, fast_of = program()
    with pytest.warns(UserWarning, match=f"TAPEAD_CACHE_MB='{value}' is not valid: it takes a size in MiB.*256"):
        assert fast_of().native
    with pytest.warns(UserWarning, match=f"TAPEAD_CACHE_MB='{value}'"):
        assert kcache.cache_limit() == 256 * 2 ** 20
    monkeypatch.setenv("TAPEAD_BUILD_TIMEOUT", value)
    with pytest.warns(UserWarning, match=f"TAPEAD_BUILD_TIMEOUT='{value}' is not valid: it takes a time.*600"):
        assert kcache.build_timeout() == 600
    monkeypatch.setenv("TAPEAD_BUILD_TIMEOUT", "0")
    with pytest.warns(UserWarning, match="TAPEAD_BUILD_TIMEOUT='0' is not valid"):
        assert kcache.build_timeout() == 600
    monkeypatch.setenv("TAPEAD_CACHE_MB", "0.5")
    monkeypatch.setenv("TAPEAD_BUILD_TIMEOUT", "2.5")
    assert kcache.cache_limit() == 2 ** 19 and kcache.build_timeout() == 2.5


LAND = r"""
import pickle, sys, warnings, numpy as np
warnings.simplefilter("always")
with open(sys.argv[1], "rb") as f:
    p = pickle.load(f)
print(p.native, repr(p), p(np.linspace(-1, 1, 7).reshape(-1, 1)).ravel().tolist())
"""


def test_unpickling_never_fails_because_of_the_cache(tmp_path):
    """Where a native Program lands (a new process, its own cache): bad
    settings, it runs native (the default used, a warning); a build that
    cannot be made (out of time), it runs the interpreter, saying why."""
    slow, code, name, fast_of = program()
    p = fast_of()
    (tmp_path / "p.pkl").write_bytes(pickle.dumps(p))
    ref = p(np.linspace(-1, 1, 7).reshape(-1, 1)).ravel().tolist()
    for var, value in (("TAPEAD_CACHE_MB", "nan"), ("TAPEAD_CACHE_MB", "1e400"), ("TAPEAD_CACHE_MB", "abc"),
                       ("TAPEAD_BUILD_TIMEOUT", "1e-9")):
        env = dict(os.environ, TAPEAD_CACHE=str(tmp_path / f"c{value}"), **{var: value})
        r = run_python("-c", LAND, str(tmp_path / "p.pkl"), env=env)
        assert r.returncode == 0, r.stderr
        if var == "TAPEAD_CACHE_MB":
            assert r.stdout.startswith("True") and f"TAPEAD_CACHE_MB={value!r} is not valid" in r.stderr
        else:                                  # no compiler finishes in a nanosecond
            assert r.stdout.startswith("False") and "build failed where it was unpickled: tapead stopped" in r.stdout
        assert r.stdout.endswith(f" {ref}\n")


# ------------------------------------------------- compilers end with the build

def big_source(n=20000):
    """A kernel gcc takes tens of seconds to compile at -O1 (~2 s at 5,000)."""
    body = [f"    a = a * {1 + i % 97 / 1e4!r} + x[{i % 13}] / (a + {i + 1}.0);" for i in range(n)]
    return "\n".join([f"/* {secrets.token_hex(8)} */", "double ta_kernel(const double *x) {",
                      "    double a = x[0];"] + body + ["    return a;", "}"])


def procs():
    """{pid: (ppid, pgid, state, name)} of every process, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")]
            fields = s[s.rindex(")") + 2:].split()
            out[int(d)] = (int(fields[1]), int(fields[2]), fields[0], name)
    return out


def family(root):
    """The pids whose parent chain reaches root, and their process groups."""
    table = procs()
    pids = set()
    for pid in table:
        p = pid
        while p in table and p != root and p > 1:
            p = table[p][0]
        if p == root and pid != root:
            pids.add(pid)
    return pids, {table[p][1] for p in pids}


def proper(table, q):
    """Whether process q compiles C: GCC's cc1, or Clang on a .c file (its
    driver runs the compile job in its own process, or in a clang it
    starts; not clang --version)."""
    name = table.get(q, (0, 0, "", ""))[3]
    if name == "cc1":
        return True
    try:
        with open(f"/proc/{q}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return name.startswith("clang") and any(a.endswith(b".c") for a in argv)


def wait_for(cond, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def gone(pids, groups):
    """No live process (a zombie is dead) among pids or in groups."""
    return not any(st != "Z" and (pid in pids or pg in groups) for pid, (_, pg, st, _) in procs().items())


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_or_interrupted_build_leaves_nothing(tmp_path, sig):
    """The process building is killed (SIGKILL) or interrupted (SIGINT:
    KeyboardInterrupt) while the compiler proper (GCC's cc1, clang -cc1)
    runs: no compiler process is left, nor any build folder or entry."""
    (tmp_path / "big.c").write_text(big_source())
    child = textwrap.dedent(f"""\
        import sys, tapead.codegen.build as k, tapead.codegen as c
        try:
            k.library(open({str(tmp_path / "big.c")!r}).read(), "-O1", c.include_dirs(), ("ta_kernel",), {{}})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        """)
    p = python("-c", child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: any(proper(procs(), q) for q in family(p.pid)[0])), \
            "the compiler proper never started"
        pids, groups = family(p.pid)
        groups.discard(os.getpgid(0))   # (a child caught between its fork and its own group is in ours)
        os.kill(p.pid, sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    if sig == signal.SIGINT:
        assert p.returncode == 3 and out.strip() == "interrupted", err
    else:
        assert p.returncode == -signal.SIGKILL
    assert pids and wait_for(lambda: gone(pids, groups)), \
        [(q, v) for q, v in procs().items() if v[2] != "Z" and (q in pids or v[1] in groups)]
    assert wait_for(lambda: entries(tmp_path / "cache") == []), entries(tmp_path / "cache")


class Watch:
    """The processes a build in this process starts (new descendants, seen
    every 10 ms while it runs), and their process groups."""

    def __enter__(self):
        import threading
        self.before, self.pids, self.groups, self.propers = family(os.getpid())[0], set(), set(), set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll)
        self.thread.start()
        return self

    def _poll(self):
        while not self.stop.wait(0.01):
            table = procs()
            for q in family(os.getpid())[0] - self.before:
                if q in table:
                    self.pids.add(q)
                    self.groups.add(table[q][1])
                    if proper(table, q):
                        self.propers.add(q)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.groups.discard(os.getpgid(0))

    def left(self):
        return [(q, v) for q, v in procs().items() if v[2] != "Z" and (q in self.pids or v[1] in self.groups)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
@pytest.mark.parametrize("units", [1, 3])
def test_a_build_past_its_time_is_stopped(tmp_path, units):
    """A build that runs past its timeout: every compiler stopped, nothing
    left behind, and a CompilerError that says what happened and what to do."""
    src = big_source() if units == 1 else [big_source(), "int f(void) { return 1; }\n", big_source()]
    t0 = time.monotonic()
    with Watch() as w, pytest.raises(kcache.CompilerError) as e:
        kcache.library(src, "-O1", INCLUDE, ("ta_kernel",), {}, timeout=0.5)
    assert time.monotonic() - t0 < 10
    what = "the kernel .unit0.c: 20,005 lines" if units == 1 else "unit [13] of 3 .unit[02].c: 20,005 lines"
    assert e.match(f"tapead stopped the C compiler '.*' after 0.5 s: {what}, \\d+ KB. was still being "
                   "built.*pass native=False to run the interpreter instead, or allow it more time "
                   "with TAPEAD_BUILD_TIMEOUT=<seconds> .now 0.5.")
    assert w.propers and wait_for(lambda: not w.left()), w.left()
    assert entries(tmp_path / "cache") == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_a_failing_unit_stops_the_others(tmp_path):
    """One unit fails: the others (still compiling) are stopped at once."""
    # The failing unit parses 30,000 small functions before its error (about
    # half a second under gcc or clang), so that the watch sees the compilers
    # it must see stopped.
    failing = "\n".join([f"double g{i}(double a) {{ return a * {i}.0 + {i % 7}.5; }}" for i in range(30000)]
                        + ["int f(void) { return undeclared; }", ""])
    t0 = time.monotonic()
    with Watch() as w, pytest.raises(kcache.CompilerError, match="(?s)failed .exit 1. on unit 2 of 2 .*undeclared"):
        kcache.library([big_source(), failing], "-O1", INCLUDE, ("ta_kernel",), {})
    assert time.monotonic() - t0 < 10
    assert w.pids and wait_for(lambda: not w.left()), w.left()
    assert entries(tmp_path / "cache") == []


def test_the_next_build_removes_what_a_dead_builder_left(tmp_path):
    """A build folder whose maker is gone (its lock free) is removed by the
    next build; one whose maker lives (it holds the lock) stays."""
    cache = tmp_path / "cache"
    load(source(0))
    dead, live = cache / "b-1-dead", cache / "b-2-live"
    for d in (dead, live):
        d.mkdir(mode=0o700)
        (d / "unit0.c").write_text("int x;\n")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
                               str(live)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        old = time.time() - 120
        for d in (dead, live):
            os.utime(d, (old, old))
        load(source(1))
        assert not dead.exists() and live.exists()
    finally:
        holder.communicate("")


# -------------------------------------------------------------------- CUDA

def test_cubins_share_the_cache_and_its_checks(tmp_path, monkeypatch):
    """The CUDA path's cubins: kept in the same folder under the same rules
    (built once, found by a new process, a damaged one rebuilt), loaded from
    the checked bytes on the current GPU.  (A stand-in for CuPy.)"""
    import types
    from tapead import cuda
    compiled, loaded = [], []

    def fake_nvrtc(src, arch, name="tapead.cu", ptx=False):
        compiled.append(arch)
        return b"\x7fELF cubin of " + src.encode()

    class Module:
        def load(self, data):
            loaded.append(data)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        function=types.SimpleNamespace(Module=Module), runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setattr(cuda, "nvrtc_compile", fake_nvrtc)
    monkeypatch.setattr(cuda, "_MODULES", {})
    src = source(0)
    mod = cuda._module(fake, src, "90")
    assert cuda._module(fake, src, "90") is mod and compiled == ["90"]
    assert loaded == [b"\x7fELF cubin of " + src.encode()]
    (name,) = entries(tmp_path / "cache")
    assert name.endswith(".sm_90.cubin")
    monkeypatch.setattr(cuda, "_MODULES", {})                       # a new process: from the disk
    cuda._module(fake, src, "90")
    assert compiled == ["90"] and loaded[1] == loaded[0]
    raw = (tmp_path / "cache" / name).read_bytes()
    (tmp_path / "cache" / name).write_bytes(raw[:-5])
    monkeypatch.setattr(cuda, "_MODULES", {})
    with pytest.warns(UserWarning, match="was not used .its bytes do not match"):
        cuda._module(fake, src, "90")
    assert compiled == ["90", "90"] and loaded[2] == loaded[0]
    monkeypatch.setenv("TAPEAD_CUDA_CACHE", str(tmp_path / "old"))
    monkeypatch.setattr(cuda, "_MODULES", {})
    with pytest.warns(UserWarning, match="TAPEAD_CUDA_CACHE is no longer read"):
        cuda._module(fake, src, "90")
