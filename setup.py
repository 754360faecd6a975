# Only here because cffi_modules has no pyproject.toml spelling; all metadata is in pyproject.toml.
import glob
import os
import platform
import shutil
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

NEEDS = """
tapead compiles its C core when it is installed, so it needs a C compiler
and the Python headers for this interpreter ({py}):
  Debian/Ubuntu:  sudo apt-get install gcc python3-dev   (for a pyenv or
                  python.org build, its own headers are already there)
  Fedora/RHEL:    sudo dnf install gcc python3-devel
  macOS:          xcode-select --install
  Windows:        the "Desktop development with C++" workload of the
                  Visual Studio Build Tools
then run pip again.  ({what})
If both are there, the compiler's own message is above.
"""


class BuildExt(build_ext):
    """build_ext, whose failure to compile says what is missing and how to get it."""

    def run(self):
        py = f"{platform.python_implementation()} {platform.python_version()}"
        include = sysconfig.get_paths()["include"]
        if platform.python_implementation() == "CPython" and not os.path.isfile(
                os.path.join(include, "Python.h")):
            sys.exit("error: " + NEEDS.format(py=py, what=f"no Python.h in {include}"))
        try:
            super().run()
        except (CCompilerError, CompileError, ExecError, LinkError, PlatformError) as e:
            sys.exit("error: " + NEEDS.format(py=py, what=f"the C compiler failed: {type(e).__name__}"))


class BuildPy(build_py):
    """Also installs csrc's headers and CUDA sources as tapead/_include, flat
    (they include each other by bare name): generated code is compiled
    against them at run time (tapead.codegen.include_dirs)."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "tapead", "_include")
        os.makedirs(dest, exist_ok=True)
        seen = set()
        for pattern in ("*.h", "*.def", "*.cuh", "*.cu"):
            for path in sorted(glob.glob(os.path.join("csrc", "*", pattern))):
                name = os.path.basename(path)
                if name in seen:
                    sys.exit(f"error: two files named {name} in csrc's folders")
                seen.add(name)
                shutil.copy2(path, dest)


setup(cffi_modules=["build_ext.py:ffibuilder"], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
