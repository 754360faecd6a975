"""The build and the disk cache of generated kernels, for the C path
(tapead.native) and the CUDA path (tapead.cuda): compilers run under a time
limit and never outlive a build; what they make is cached under a hash of
everything that made it, trusted only where this user alone could have
written it and only with the checksum tapead wrote, and loaded from the very
file that was checked.  The rules, for users: docs/native.md, "The kernel
cache".

It knows nothing of what a kernel computes: callers hand it source text, the
include folders and header bytes (the kernel's key covers them), and the name
of the symbol to look up.
"""
from __future__ import annotations

import errno
import hashlib
import itertools
import math
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["CompilerError", "BuildTimeout", "cache_dir", "cache_limit", "build_timeout", "key", "headers", "compiler",
           "is_gcc", "flags", "avx2", "jobs", "c_key", "library", "fetch", "Entry", "Build"]


class CompilerError(RuntimeError):
    """Generated code could not be built: no compiler, or it failed or ran
    out of time (the message says which and why)."""


class BuildTimeout(CompilerError):
    """A compiler ran past its time limit (TAPEAD_BUILD_TIMEOUT) and was stopped."""


# ------------------------------------------------------------ settings
# Every TAPEAD_* variable read here is checked where it is read; a value
# that is not one gives a warning naming the variable, its value, what it
# accepts and the default used instead.  (They tune the cache and the build,
# not what a kernel computes: a typo in one should not stop a program that
# would run without it.)  Unset or empty: the default.

DEFAULT_MB = 256
DEFAULT_TIMEOUT = 600.0


def _number(name: str, default: float, what: str, positive: bool) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        warnings.warn(f"tapead: {name}={text!r} is not valid: it takes {what}; using the default, "
                      f"{default:g}", stacklevel=3)
        return default
    return v


def cache_limit() -> int:
    """The cache's bound in bytes, for C and CUDA kernels together:
    $TAPEAD_CACHE_MB MiB (a number >= 0; default 256)."""
    return int(_number("TAPEAD_CACHE_MB", DEFAULT_MB, "a size in MiB, a finite number >= 0", False) * 2 ** 20)


def build_timeout() -> float:
    """The longest one compiler process of a build may run, in seconds:
    $TAPEAD_BUILD_TIMEOUT (a number > 0; default 600)."""
    return _number("TAPEAD_BUILD_TIMEOUT", DEFAULT_TIMEOUT, "a time in seconds, a finite number > 0", True)


def _uid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else 0


def _home() -> Optional[str]:
    """This user's home folder, absolute ($HOME, else the passwd entry), or None."""
    home = os.environ.get("HOME", "")
    if os.path.isabs(home):
        return home
    try:
        import pwd
        home = pwd.getpwuid(_uid()).pw_dir
    except (ImportError, KeyError, OSError):
        return None
    return home if os.path.isabs(home) else None


def _fallback_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"tapead-{_uid()}")


def cache_dir() -> str:
    """The kernel cache folder, an absolute path: $TAPEAD_CACHE, else
    $XDG_CACHE_HOME/tapead, else ~/.cache/tapead, else (no home folder)
    tapead-<uid> in the temporary folder.  Used only if private (see fetch)."""
    d = os.environ.get("TAPEAD_CACHE")
    if d:
        return os.path.abspath(d)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):                   # (the XDG spec: a relative one is ignored)
        return os.path.join(xdg, "tapead")
    home = _home()
    return os.path.join(home, ".cache", "tapead") if home else _fallback_dir()


# ----------------------------------------------------------------- keys

_FORMAT = b"tapead kernel cache 1"     # in every key: a new entry format never meets an old one


def _feed(h: Any, part: Any) -> None:
    if isinstance(part, dict):
        part = sorted(part.items())
    if isinstance(part, (list, tuple)):
        h.update(b"L%d\0" % len(part))
        for p in part:
            _feed(h, p)
        return
    b = part.encode() if isinstance(part, str) else bytes(part)
    h.update(b"%d\0" % len(b))
    h.update(b)


def key(*parts: Any) -> str:
    """The cache name of what parts make (str, bytes, or lists and dicts of
    them; each length-prefixed, so no two different lists of parts collide)."""
    h = hashlib.sha256(_FORMAT)
    _feed(h, parts)
    return h.hexdigest()[:32]


def headers(folders: Sequence[str], suffixes: Sequence[str]) -> Dict[str, bytes]:
    """The files of folders whose names end in one of suffixes, by name: what
    a kernel may include (by bare name, so no two may share one), for its key."""
    out: Dict[str, bytes] = {}
    for folder in _dirs(folders):
        for name in sorted(os.listdir(folder)):
            if name.endswith(tuple(suffixes)):
                if name in out:
                    raise ValueError(f"tapead: two headers named {name} on the include path ({folder})")
                with open(os.path.join(folder, name), "rb") as fh:
                    out[name] = fh.read()
    return dict(sorted(out.items()))


def _dirs(folders: Union[str, Sequence[str]]) -> List[str]:
    """folders as a list (one folder given as a str is one folder)."""
    return [folders] if isinstance(folders, str) else list(folders)


# ------------------------------------------------------------ the folder

_POSIX = os.name == "posix"
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _untrusted(st: os.stat_result, kind: str) -> str:
    """Why a folder or file with this status may hold what someone else
    wrote ('' if it may not)."""
    if not (stat.S_ISDIR if kind == "folder" else stat.S_ISREG)(st.st_mode):
        return f"it is not a {'folder' if kind == 'folder' else 'regular file'}"
    if st.st_uid != _uid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {_uid()})"
    if st.st_mode & 0o022:
        return f"it is writable by {'group and others' if st.st_mode & 0o002 else 'its group'} " \
               f"(mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _open_private(path: str) -> Tuple[int, str]:
    """(fd, '') of folder path, made (mode 0700) if missing, where it is
    private: a folder, not a symbolic link, owned by this user, writable by
    no one else; else (-1, why not)."""
    try:
        if not os.path.lexists(path):
            os.makedirs(os.path.dirname(path), 0o700, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        fd = os.open(path, _DIR)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            return -1, "it is a symbolic link"
        return -1, f"it cannot be made or opened ({e.strerror or e})"
    why = _untrusted(os.fstat(fd), "folder")
    if why:
        os.close(fd)
        return -1, why
    return fd, ""


def _folder() -> Tuple[int, str]:
    """(fd, path) of the cache folder: cache_dir() if it is private, else
    the private fallback in the temporary folder (a warning says why); (-1,
    '') where neither is (a warning: kernels are built but not kept)."""
    if not _POSIX:
        return -1, ""
    first = cache_dir()
    tried: List[Tuple[str, str]] = []
    for path in dict.fromkeys((first, _fallback_dir())):
        fd, why = _open_private(path)
        if fd >= 0:
            if tried:
                warnings.warn(f"tapead: not using the kernel cache folder {tried[0][0]}: {tried[0][1]}. "
                              f"A cache of code that this process runs must be private (owned by you, "
                              f"writable by you alone: chmod 700 it, or set TAPEAD_CACHE to another "
                              f"folder); kernels are cached in {path} instead", stacklevel=4)
            return fd, path
        tried.append((path, why))
    warnings.warn("tapead: no private kernel cache folder (" +
                  "; ".join(f"{p}: {w}" for p, w in tried) +
                  "): kernels are built but not kept; set TAPEAD_CACHE to a folder of your own",
                  stacklevel=4)
    return -1, ""


# -------------------------------------------------------------- entries
# An entry is one file, k-<key><suffix>: what the compiler made, then a
# trailer: _MAGIC and the SHA-256 of the entry's name and those bytes.  (A
# shared library loads with bytes after its end: the loader maps only what
# its headers name.)  A file whose trailer does not match is damaged (cut
# short, half copied) or not tapead's: it is never loaded, but rebuilt.

_MAGIC = b"\0tapead-kcache1\0"
_TRAILER = len(_MAGIC) + 32


def _digest(name: str, data: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\0" + data).digest()


class Entry:
    """A checked cache entry: data (the compiler's output, without the
    trailer), fd (the file checked, open; -1 once closed), path (for
    messages) and built (made by this call)."""

    def __init__(self, path: str, data: bytes, fd: int, built: bool, scratch: str = "") -> None:
        self.path, self.data, self.fd, self.built, self._scratch = path, data, fd, built, scratch

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._scratch:              # an uncached build's own folder
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = ""

    def __repr__(self) -> str:
        return f"Entry({self.path!r}, {len(self.data)} bytes{', built' if self.built else ''})"


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        b = os.read(fd, left)
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _discard(dfd: int, path: str, name: str, why: str) -> None:
    warnings.warn(f"tapead: the cached kernel {os.path.join(path, name)} was not used ({why}); "
                  "rebuilding it", stacklevel=4)
    try:
        os.unlink(name, dir_fd=dfd)
    except IsADirectoryError:
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)
    except OSError:
        pass


def _remove(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _lookup(dfd: int, path: str, name: str) -> Optional[Entry]:
    """The entry name in the folder, checked; None if missing (or bad: a
    warning, and it is removed)."""
    try:
        fd = os.open(name, _FILE, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        why = "it is a symbolic link" if e.errno == errno.ELOOP else f"it cannot be opened ({e.strerror})"
        _discard(dfd, path, name, why)
        return None
    try:
        data = b""
        try:
            st = os.fstat(fd)
            why = _untrusted(st, "file")
            if not why:
                raw = _read_all(fd, st.st_size)
                data = raw[:-_TRAILER]
                if len(raw) < _TRAILER or raw[-_TRAILER:] != _MAGIC + _digest(name, data):
                    why = "its bytes do not match the checksum tapead wrote with them: damaged, or not tapead's"
        except OSError as e:
            why = f"it cannot be read ({e.strerror or e})"
        if why:
            os.close(fd)
            _discard(dfd, path, name, why)
            return None
        try:
            os.utime(fd)                       # recently used: evicted last
        except (OSError, NotImplementedError):
            pass
        return Entry(os.path.join(path, name), data, fd, built=False)
    except BaseException:
        os.close(fd)
        raise


def _store(bfd: int, dfd: int, path: str, name: str, data: bytes) -> int:
    """data and its trailer written as entry name, durably (a file in the
    build folder, flushed to disk, renamed into the cache folder, the
    folder flushed): another process sees all of it or none.  The file's
    fd, open.  dfd < 0: left in the build folder (no cache; bfd < 0: the
    folder path, where there are no folder fds)."""
    fd = os.open("entry", os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE, 0o600, dir_fd=bfd) if bfd >= 0 \
        else os.open(os.path.join(path, "entry"), os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE, 0o600)
    try:
        view = memoryview(data + _MAGIC + _digest(name, data))
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if dfd >= 0:
            os.rename("entry", name, src_dir_fd=bfd, dst_dir_fd=dfd)
            os.fsync(dfd)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _remove_if_dead(dfd: int, path: str, name: str) -> None:
    """Remove build folder name if the process that made it is gone (it
    holds a lock on the folder while it lives, however it ends)."""
    import fcntl
    try:
        fd = os.open(name, _DIR, dir_fd=dfd)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)                            # alive: still building
        return
    try:
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)
    finally:
        os.close(fd)


def _tidy(dfd: int, path: str, keep: str, limit: int) -> None:
    """Delete the least recently used entries until the folder is within
    limit bytes (keep stays), and build folders of processes that died."""
    entries, total, now = [], 0, time.time()
    try:
        with os.scandir(dfd) as it:
            for de in it:
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError:
                    continue
                if de.name.startswith("k-") and stat.S_ISREG(st.st_mode):
                    entries.append((st.st_mtime, st.st_size, de.name))
                    total += st.st_size
                elif de.name.startswith("b-") and stat.S_ISDIR(st.st_mode) and now - st.st_mtime > 60:
                    _remove_if_dead(dfd, path, de.name)   # (a minute: its maker has locked it by then)
    except OSError:
        return
    for _, size, name in sorted(entries):
        if total <= limit:
            break
        if name == keep:
            continue
        try:
            os.unlink(name, dir_fd=dfd)
            total -= size
        except OSError:
            pass


# ------------------------------------------------------------- building
# Each compiler starts in a process group of its own (start_new_session), so
# that killing the group ends it with all it started (gcc's driver runs cc1,
# as, collect2, ld as its children).  Every exit of the build (success,
# failure, timeout, an exception such as KeyboardInterrupt) kills the groups
# still running.  For this process's death, however it dies (SIGKILL too),
# a watchdog (/bin/sh, started with the build under setsid, out of reach of
# signals to this process's group) reads a pipe from this process: "+PGID"
# when a compiler starts, "-PGID" once it is reaped, "end" when the build is
# over.  The pipe ends without "end" only when this process is gone (the
# kernel closes it, however it died): the watchdog then kills the groups
# still listed and removes the build folder.

_WATCHDOG = r"""
on=" " off=" "
while IFS= read -r l; do
  case $l in
    end) exit 0 ;;
    +*) on="$on${l#+} " ;;
    -*) off="$off${l#-} " ;;
  esac
done
for g in $on; do
  case $off in *" $g "*) ;; *) kill -s KILL -- "-$g" 2>/dev/null ;; esac
done
rm -rf -- "$1"
"""


def _lines(text: str) -> str:
    return f"{text.count(chr(10)) + 1:,} lines, {len(text.encode()) / 1024:,.0f} KB"


class Build:
    """A private folder (path) a kernel is built in, locked while this
    process lives, and the compilers it runs (run), which end with it."""

    def __init__(self, dfd: int, folder: str) -> None:
        import fcntl
        self._dog: Optional["subprocess.Popen[bytes]"] = None
        self._w = -1
        if dfd >= 0:
            name = f"b-{os.getpid()}-{os.urandom(4).hex()}"
            os.mkdir(name, 0o700, dir_fd=dfd)
            self.fd = os.open(name, _DIR, dir_fd=dfd)
            fcntl.flock(self.fd, fcntl.LOCK_EX)      # released when this process ends, however
            self.path = os.path.join(folder, name)
        else:
            self.path = tempfile.mkdtemp(prefix="tapead-build-")
            self.fd = os.open(self.path, _DIR) if _POSIX else -1

    def _tell(self, line: str) -> None:
        if self._w < 0 and _POSIX:
            r, self._w = os.pipe()
            try:
                self._dog = subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "sh", self.path], stdin=r,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             start_new_session=True)
            finally:
                os.close(r)
        if self._w >= 0:
            try:
                os.write(self._w, line.encode() + b"\n")
            except OSError:                  # (the watchdog is gone: someone killed it)
                pass

    def run(self, jobs: Sequence[Tuple[List[str], str]], timeout: float, name: str,
            advice: str = "pass native=False to run the interpreter instead", at_once: int = 0) -> None:
        """Run each job (argv, what it is: 'unit 1 of 3 (...)') in the build
        folder, at most at_once at a time (0: all), each for at most timeout
        seconds.  CompilerError (naming name, the compiler, and the job) as
        soon as one fails, cannot start or runs out of time; no process of
        any job outlives the call."""
        import selectors
        procs: List["subprocess.Popen[bytes]"] = []
        waiting = list(jobs)
        limit = at_once if at_once > 0 else max(1, len(waiting))
        try:
            with selectors.DefaultSelector() as sel:
                while waiting or sel.get_map():     # until every job has started and its output ended
                    while waiting and len(sel.get_map()) < limit:
                        argv, what = waiting.pop(0)
                        p = subprocess.Popen(argv, cwd=self.path, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             start_new_session=_POSIX)
                        procs.append(p)
                        self._tell(f"+{p.pid}")
                        assert p.stdout is not None
                        sel.register(p.stdout, selectors.EVENT_READ,
                                     (p, what, [], time.monotonic() + timeout))
                    first = min(sel.get_map().values(), key=lambda k: k.data[3])
                    left = first.data[3] - time.monotonic()
                    ready = sel.select(left) if left > 0 else []
                    if not ready:
                        raise _late(name, first.data[1], timeout, advice)
                    for k, _ in ready:
                        p, what, out, deadline = k.data
                        chunk = os.read(k.fd, 65536)
                        if chunk:
                            out.append(chunk)
                            continue
                        sel.unregister(k.fileobj)         # its output ended: it is exiting
                        try:
                            p.wait(max(1.0, deadline - time.monotonic()))
                        except subprocess.TimeoutExpired:
                            raise _late(name, what, timeout, advice) from None
                        self._tell(f"-{p.pid}")
                        if p.returncode != 0:
                            msg = b"".join(out).decode(errors="replace").strip()
                            if len(msg) > 2000:
                                msg = msg[:2000] + " ..."
                            how = f"exit {p.returncode}" if p.returncode > 0 else f"signal {-p.returncode}"
                            raise CompilerError(f"{name} failed ({how}) on {what}:\n{msg}")
        except OSError as e:
            raise CompilerError(f"{name} could not run: {e}") from e
        finally:
            for p in procs:                   # a failure, a timeout, an exception: end the rest
                if p.returncode is None:
                    _kill(p)
                    self._tell(f"-{p.pid}")
                elif p.stdout is not None:
                    p.stdout.close()

    def close(self, remove: bool = True) -> None:
        """Remove the folder (unless not remove); the watchdog goes, its job done."""
        if remove:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._w >= 0:
            try:
                os.write(self._w, b"end\n")
            except OSError:
                pass
            os.close(self._w)
            self._w = -1
        if self._dog is not None:
            try:
                self._dog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._dog.kill()
            self._dog = None


def _late(name: str, what: str, timeout: float, advice: str) -> CompilerError:
    return BuildTimeout(f"tapead stopped {name} after {timeout:g} s: {what} was still being built. "
                         f"Generated code this large takes long to compile: {advice}, or allow it more "
                         f"time with TAPEAD_BUILD_TIMEOUT=<seconds> (now {timeout:g})")


def _kill(p: "subprocess.Popen[bytes]") -> None:
    """p's process group killed (p, not yet reaped, still names it), p reaped."""
    try:
        if _POSIX:
            os.killpg(p.pid, signal.SIGKILL)
        else:
            p.kill()
    except OSError:
        pass
    if p.stdout is not None:
        p.stdout.close()
    p.wait()


# --------------------------------------------------------------- fetch

_lock = threading.Lock()


def fetch(k: str, suffix: str, make: Callable[[Build], bytes]) -> Entry:
    """The entry of key k: from the cache if it is there and checks out, else
    made now (make(build): the bytes to keep, built in build.path), kept in
    the cache (atomically, durably; then the least recently used entries are
    deleted past cache_limit()) and returned open.  The caller closes it.
    CompilerError from make, or if nothing can be written."""
    limit = cache_limit()                      # (read before anything is built)
    name = f"k-{k}{suffix}"
    dfd, path = _folder()
    try:
        if dfd >= 0:
            e = _lookup(dfd, path, name)
            if e is not None:
                return e
        try:
            b = Build(dfd, path)
        except OSError as err:
            raise CompilerError(f"cannot make a build folder in {path or tempfile.gettempdir()} "
                                f"({err.strerror or err}); set TAPEAD_CACHE to a folder of your own") from err
        try:
            try:
                data = make(b)
            except OSError as err:
                raise CompilerError(f"cannot build the kernel in {b.path} ({err})") from err
            try:
                fd = _store(b.fd, dfd, path if dfd >= 0 else b.path, name, data)
            except OSError as err:
                raise CompilerError(f"cannot write the kernel {name} in {path or b.path} "
                                    f"({err.strerror or err})") from err
        except BaseException:
            b.close()
            raise
        if dfd < 0:                            # not cached: the folder goes when the entry is closed
            b.close(remove=False)
            return Entry(os.path.join(b.path, "entry"), data, fd, built=True, scratch=b.path)
        b.close()
        _tidy(dfd, path, name, limit)
        return Entry(os.path.join(path, name), data, fd, built=True)
    finally:
        if dfd >= 0:
            os.close(dfd)


# ------------------------------------------------------------ C kernels

def compiler() -> Optional[List[str]]:
    """The C compiler's command ($CC, else sysconfig's CC) as argv, or None if it is not found."""
    try:
        argv = shlex.split(_cc_name())
    except ValueError:
        return None
    if not argv or shutil.which(argv[0]) is None:
        return None
    return argv


def _cc_name() -> str:
    return os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"


def flags(opt: str = "-O1") -> List[str]:
    """The flags kernels are compiled with (besides -I, -c, -o and the file), at optimisation level opt."""
    return opt.split() + ["-std=c99", "-fPIC", "-ffp-contract=off", "-fno-strict-aliasing"]


def _link_flags() -> List[str]:
    f = ["-shared"]
    if sys.platform == "darwin":
        f += ["-undefined", "dynamic_lookup"]
    return f


_avx2: Optional[bool] = None


def avx2() -> bool:
    """Whether this machine's CPU has AVX2 (x86-64 Linux: /proc/cpuinfo's flags;
    elsewhere False).  A kernel built with -mavx2 has the flag in its cache
    key, so a machine without AVX2 never finds it there."""
    global _avx2
    if _avx2 is None:
        _avx2 = False
        if sys.platform.startswith("linux") and os.uname().machine in ("x86_64", "amd64"):
            try:
                with open("/proc/cpuinfo") as fh:
                    for line in fh:
                        if line.startswith("flags"):
                            _avx2 = " avx2" in line
                            break
            except OSError:
                pass
    return _avx2


def jobs() -> int:
    """How many compilers a build runs at once: the CPUs this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


_versions: Dict[Tuple[str, ...], str] = {}      # compiler argv -> its --version output


def _version(argv: List[str]) -> str:
    k = tuple(argv)
    if k not in _versions:
        try:
            r = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=30)
            _versions[k] = r.stdout + r.stderr
        except (OSError, subprocess.SubprocessError) as e:
            _versions[k] = repr(e)
    return _versions[k]


def is_gcc() -> bool:
    """Whether the C compiler (compiler()) is GCC, by its --version: Clang
    (which also answers to gcc on macOS) refuses some of GCC's flags."""
    argv = compiler()
    text = _version(argv) if argv else ""
    return "Free Software Foundation" in text and "clang" not in text.lower()


def _suffix() -> str:
    return ".dll" if sys.platform == "win32" else ".so"


def c_key(units: Sequence[str], argv: List[str], opt: str, hdrs: Dict[str, bytes], tag: str = "") -> str:
    """The cache key of the library built from units (translation units) by
    argv at opt, including headers hdrs; tag: what else the caller's kernels
    depend on (their ABI)."""
    return key("C", tag, list(units), argv, _version(argv), flags(opt) + _link_flags(), hdrs)


def _build_c(b: Build, argv: List[str], opt: str, include: Sequence[str], units: List[str],
             timeout: float) -> bytes:
    """units compiled (all at once) and linked in b: the library's bytes."""
    name = f"the C compiler {argv[0]!r}"
    srcs = []
    for i, text in enumerate(units):
        srcs.append(f"unit{i}.c")
        with open(os.path.join(b.path, srcs[-1]), "w") as fh:
            fh.write(text)
    inc = [a for d in _dirs(include) for a in ("-I", d)]
    out = "kernel" + _suffix()
    n = len(units)
    if n == 1:
        b.run([(argv + flags(opt) + _link_flags() + inc + ["-o", out, srcs[0], "-lm"],
                f"the kernel (unit0.c: {_lines(units[0])})")], timeout, name)
    else:
        objs = [s[:-2] + ".o" for s in srcs]
        b.run([(argv + flags(opt) + inc + ["-c", "-o", o, s], f"unit {i + 1} of {n} ({s}: {_lines(t)})")
               for i, (s, o, t) in enumerate(zip(srcs, objs, units))], timeout, name, at_once=jobs())
        b.run([(argv + _link_flags() + ["-o", out] + objs + ["-lm"], f"the link of its {n} units")],
              timeout, name)
    with open(os.path.join(b.path, out), "rb") as fh:
        return fh.read()


_loaded: Dict[str, Tuple[Any, Tuple[int, ...]]] = {}   # key -> (the ctypes library, its symbols' addresses)
_serial = itertools.count(1)
_PROC_FD = os.path.isdir("/proc/self/fd")


def _dlopen(e: Entry) -> Any:
    """The library of entry e, loaded from the file that was checked (Linux:
    its open fd, so nothing can swap the file in between).  dlopen returns
    the library already loaded under a path string, and a closed fd's number
    is reused: each load's path is made unique by a serial number, written
    in binary as '//' and '/.' steps, which the path's lookup skips."""
    import ctypes
    if _PROC_FD and e.fd >= 0:
        n = next(_serial)
        steps = "".join("/." if n >> i & 1 else "//" for i in range(n.bit_length()))
        return ctypes.CDLL(f"/proc/self{steps}/fd/{e.fd}")
    return ctypes.CDLL(e.path)


def library(source: Union[str, Sequence[str]], opt: str, include: Sequence[str], symbols: Sequence[str],
            hdrs: Optional[Dict[str, bytes]] = None, tag: str = "",
            timeout: Optional[float] = None) -> Tuple[int, ...]:
    """The addresses of symbols in the shared library built from source (one
    translation unit, or several compiled at once and linked) at optimisation
    level opt, with the folders include on the include path (hdrs: the
    headers it may include, for the key; default: their .h and .def files): from the
    cache or built now into it, and loaded once per process.  timeout: the longest
    one compiler may run (default build_timeout()).  A cached library that
    does not load or lacks one of the symbols is rebuilt (a warning says so).
    CompilerError if there is no compiler or it fails."""
    import ctypes
    argv = compiler()
    if argv is None:
        raise CompilerError(f"no C compiler found (CC={_cc_name()!r}): native replay needs one; "
                            "set CC, or pass native=False")
    limit = build_timeout() if timeout is None else timeout
    units = [source] if isinstance(source, str) else list(source)
    k = c_key(units, argv, opt, headers(include, (".h", ".def")) if hdrs is None else hdrs, tag)
    for attempt in (0, 1):       # (the cache first, even for a kernel loaded already: it is its last use)
        e = fetch(k, _suffix(), lambda b: _build_c(b, argv, opt, include, units, limit))
        try:
            with _lock:
                hit = _loaded.get(k)
                if hit is None:
                    lib = _dlopen(e)
                    hit = _loaded[k] = (lib, tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
                                                   for name in symbols))
            return hit[1]
        except (OSError, AttributeError) as err:
            dfd, path = _folder()
            if dfd >= 0:
                if e.built:                    # (not left for the next process to find)
                    _remove(dfd, os.path.basename(e.path))
                else:
                    _discard(dfd, path, os.path.basename(e.path), f"it does not load as a kernel: {err}")
                os.close(dfd)
            if e.built or attempt:
                raise CompilerError(f"the kernel {e.path} could not be loaded: {err}") from err
        finally:
            e.close()
    raise AssertionError("not reached")
