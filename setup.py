# Only here because cffi_modules has no pyproject.toml spelling; all metadata is in pyproject.toml.
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """Also installs csrc's headers and CUDA sources as tapead/_include: generated
    code is compiled against them at run time (tapead.codegen.include_dir)."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "tapead", "_include")
        os.makedirs(dest, exist_ok=True)
        for pattern in ("*.h", "*.def", "*.cuh", "*.cu"):
            for path in glob.glob(os.path.join("csrc", pattern)):
                shutil.copy2(path, dest)


setup(cffi_modules=["build_ext.py:ffibuilder"], cmdclass={"build_py": BuildPy})
