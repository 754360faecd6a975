"""Run .ci/valgrind_smoke.py under valgrind memcheck and judge tapead's own code.

CPython, the dynamic loader and cffi's module set-up produce reports of
their own (over-reads in ld.so's strncmp, the collector reading untracked
memory, cffi's module-lifetime allocations); this keeps only the error and
leak records with a frame in tapead's C (ta_* functions or its module's
own code other than cffi's generated init), and fails if there is any.
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if not shutil.which("valgrind"):
        print("valgrind not installed: skipped")
        return 0
    cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
           "--errors-for-leak-kinds=definite", sys.executable, os.path.join(HERE, "valgrind_smoke.py")]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONMALLOC": "malloc"})
    if out.returncode != 0 or "valgrind smoke ok" not in out.stdout:
        print(out.stdout, out.stderr[-5000:])
        return 1
    records = re.split(r"\n==\d+== \n", out.stderr)
    bad = [r for r in records
           if re.search(r"Invalid (read|write)|uninitialised|definitely lost", r)
           and re.search(r"\bta_\w+ \(", r)]
    summary = [l for l in out.stderr.splitlines() if "ERROR SUMMARY" in l or "definitely lost:" in l]
    print("\n".join(summary))
    print(f"valgrind: {len(bad)} records in tapead's C code "
          f"(of {sum(1 for r in records if 'lost in loss record' in r or 'Invalid' in r)} reported overall)")
    for r in bad:
        print(r)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
