"""What each optional feature needs installed, said in one place: the
ImportError a missing dependency raises names the package to install from
the package index (tapead itself installs from a clone, where the extra of
the same name installs it too).

    >>> print(needs("dask", "tapead.dask"))
    tapead.dask needs Dask: pip install "dask[array,distributed]" (in a clone of tapead: pip install -e ".[dask]")
"""
from __future__ import annotations

# feature (an extra of pyproject.toml) -> (what it is, what to install)
_NEEDS = {
    "cuda": ("CuPy", 'pip install cupy-cuda13x for CUDA 13 (cupy-cuda12x for CUDA 12)'),
    "draw": ("the graphviz package", "pip install graphviz"),
    "dask": ("Dask", 'pip install "dask[array,distributed]"'),
}


def needs(feature: str, user: str, more: str = "") -> ImportError:
    """The ImportError for `user` (what needs it) without `feature`'s
    dependency; `more`: a sentence to add."""
    what, how = _NEEDS[feature]
    return ImportError(f"{user} needs {what}: {how} (in a clone of tapead: pip install -e \".[{feature}]\")"
                       + (f"; {more}" if more else ""))
