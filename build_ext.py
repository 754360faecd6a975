"""cffi build script (API, out-of-line mode): compiles csrc/ into tapead._tapead_c.

Set TAPEAD_SANITIZE=1 to build with -fsanitize=address,undefined (see README).
"""
import glob
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("csrc")
SOURCES = sorted(glob.glob(os.path.join(CSRC, "*.c")))

if sys.platform == "win32":
    cflags, ldflags = ["/O2"], []
else:
    cflags = ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing", "-ffp-contract=off", "-pthread"]
    ldflags = ["-lm", "-pthread"]
    if os.environ.get("TAPEAD_SANITIZE"):
        cflags += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
        ldflags += ["-fsanitize=address,undefined"]

with open(os.path.join(HERE, CSRC, "cdef.h")) as f:
    CDEF = f.read()

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "tapead._tapead_c",
    '#include "tapead.h"\n',
    sources=SOURCES,
    include_dirs=[CSRC],
    depends=sorted(glob.glob(os.path.join(CSRC, "*.h"))) + [os.path.join(CSRC, "ops.def")],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
