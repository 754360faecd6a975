"""cffi build script (API, out-of-line mode): compiles csrc/ into tapead._tapead_c.

Set TAPEAD_SANITIZE=1 to build with -fsanitize=address,undefined (see README).
"""
import glob
import os
import re
import platform
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
# Relative paths for setup.py's cffi_modules (setuptools builds from the
# project root); absolute ones when run directly, which compiles elsewhere.
CSRC = os.path.join(HERE if __name__ == "__main__" else "", "csrc")
# csrc's folders, one per floor, lowest first: each uses only those before
# it (docs/design.md, Layout).  Files include each other by bare name (every
# name is unique), so each folder is on the include path; generated kernels
# find the headers the same way (tapead.codegen.include_dirs).
FLOORS = ("api", "ops", "tape", "custom", "fused", "diff", "replay", "gpu", "python")
_found = sorted(d for d in os.listdir(os.path.join(HERE, "csrc")) if os.path.isdir(os.path.join(HERE, "csrc", d)))
if _found != sorted(FLOORS):
    raise RuntimeError(f"build_ext.py: csrc's folders {_found} are not FLOORS {sorted(FLOORS)}")
DIRS = [os.path.join(CSRC, d) for d in FLOORS]
SOURCES = [p for d in DIRS for p in sorted(glob.glob(os.path.join(d, "*.c")))]

if sys.platform == "win32":
    cflags, ldflags = ["/O2"], []
else:
    cflags = ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing", "-ffp-contract=off", "-pthread",
              "-Werror=implicit-function-declaration"]   # a call without its prototype: an error, never a guess
    ldflags = ["-lm", "-pthread"]
    if sys.platform.startswith("linux"):   # calls between the library's own files bind directly, not
        ldflags.append("-Wl,-Bsymbolic-functions")   # through the PLT (the fronts call into it per op)
    if os.environ.get("TAPEAD_SANITIZE"):
        cflags += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
        ldflags += ["-fsanitize=address,undefined"]

# The CPython front (csrc/python/) uses the full CPython API, so the module
# is built for this CPython version, not the stable ABI; PyPy builds leave
# it out (there the cffi front is the fast one).
defines = [("_CFFI_NO_LIMITED_API", None)]
if platform.python_implementation() != "CPython":
    defines.append(("TA_NO_CPYTHON", None))

with open(os.path.join(HERE, CSRC, "api", "cdef.h")) as f:
    CDEF = f.read()
# cdef.h makes the status constants from status.def with a macro, which
# cffi's cdef cannot read: give it the same rows as plain #defines.
with open(os.path.join(HERE, CSRC, "api", "status.def")) as f:
    _rows = re.findall(r"^TA_ST\((\w+),\s*(-?\d+),", f.read(), re.M)
CDEF = re.sub(r"/\* <status> \*/.*?/\* </status> \*/",
              "".join(f"#define TA_{n} {v}\n" for n, v in _rows), CDEF, flags=re.S)

# The reverse sweep calls back into Python at a custom node with a Python
# rule (csrc/custom/custom.c); "Python+C" lets it call it by name.
CDEF += '\nextern "Python+C" int ta_custom_rule(int64_t node, int64_t key);\n'

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "tapead._tapead_c",
    '#include "tapead.h"\n',
    sources=SOURCES,
    include_dirs=DIRS,
    depends=[p for d in DIRS for p in sorted(glob.glob(os.path.join(d, "*.h")) + glob.glob(os.path.join(d, "*.def")))],
    define_macros=defines,
    py_limited_api=False,
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)


if __name__ == "__main__":
    # The in-place build (tapead/_tapead_c*.so beside the package): first the
    # op table's Python half (tools/gen_ops.py), then the C.  cffi's
    # compile runs setuptools in its working directory, which reads the
    # pyproject.toml there, and a setuptools older than the build requirement
    # cannot (license as an SPDX string needs 77): so compile in build/.
    import shutil
    sys.path.insert(0, os.path.join(HERE, "tools"))
    from gen_ops import write_opsurface
    for path in write_opsurface():
        print(f"build_ext.py: regenerated {path} from csrc/api/ops.def (tools/gen_ops.py)")
    tmp = os.path.join(HERE, "build", "inplace")
    os.makedirs(tmp, exist_ok=True)
    so = ffibuilder.compile(tmpdir=tmp, verbose=True)
    shutil.copy2(so, os.path.join(HERE, "tapead", os.path.basename(so)))
