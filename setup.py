# Only here because cffi_modules has no pyproject.toml spelling; all metadata is in pyproject.toml.
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_headers(build_py):
    """Also installs csrc's headers as tapead/_include: native replay
    (tapead/native.py) compiles generated kernels against ops.h, so each op
    keeps its one definition (an editable install reads csrc/ itself)."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "tapead", "_include")
        os.makedirs(dest, exist_ok=True)
        for f in sorted(glob.glob(os.path.join("csrc", "*.h")) + glob.glob(os.path.join("csrc", "*.def"))):
            shutil.copy(f, dest)


setup(cffi_modules=["build_ext.py:ffibuilder"], cmdclass={"build_py": build_py_headers})
