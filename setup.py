# Only here because cffi_modules has no pyproject.toml spelling; all metadata is in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["build_ext.py:ffibuilder"])
