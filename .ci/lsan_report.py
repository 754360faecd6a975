"""Judge the LeakSanitizer reports of the sanitized test run: tapead's own C only.

The run writes one report per process (the suite and every Python it
starts) to DIR.  CPython, OpenSSL, fontconfig and friends leave their
module-lifetime allocations at exit, so this keeps only the leak records
with a frame in tapead's C (a ta_* function or a path under csrc/), prints them, and fails if
there is any, or if a report holds an AddressSanitizer error.

    python .ci/lsan_report.py DIR
"""
import glob
import os
import re
import sys


def main(d: str) -> int:
    files = sorted(glob.glob(os.path.join(d, "*")))
    records, errors = [], []
    for f in files:
        with open(f, errors="replace") as fh:
            text = fh.read()
        if "ERROR: AddressSanitizer" in text:
            errors.append(f"{f}:\n{text[:5000]}")
        records += re.split(r"\n(?=(?:Direct|Indirect) leak of)", text)[1:]
    ours = [r for r in records if "csrc/" in r or re.search(r" in ta_\w+ ", r)]
    print(f"lsan: {len(ours)} leak records in tapead's C code "
          f"(of {len(records)} reported overall, {len(files)} processes)")
    for r in ours + errors:
        print(r)
    return 1 if ours or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
