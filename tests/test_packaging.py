"""pyproject.toml's metadata: the license as an SPDX expression (PEP 639; the
TOML-table form draws setuptools' deprecation warning, an error from
2027-02-18), with the setuptools that understands it as the build requirement."""
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(ROOT, "pyproject.toml")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is 3.11+")
@pytest.mark.skipif(not os.path.isfile(PYPROJECT), reason="needs the source tree")
def test_license_is_an_spdx_string_and_setuptools_can_read_it():
    import tomllib
    with open(PYPROJECT, "rb") as f:
        meta = tomllib.load(f)
    assert meta["project"]["license"] == "MIT"
    assert not any("License ::" in c for c in meta["project"].get("classifiers", []))  # PEP 639
    (req,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    m = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", req)
    assert m and int(m.group(1)) >= 77, req      # 77.0.0: the first to take the SPDX string


@pytest.mark.skipif(not os.path.isfile(PYPROJECT), reason="needs the source tree")
def test_version_is_pyprojects_alone():
    import importlib.metadata
    import tapead
    try:
        importlib.metadata.version("tapead")
    except importlib.metadata.PackageNotFoundError:
        assert tapead.__version__ == "0+unknown"
        pytest.skip("tapead is not installed here (no metadata): a source tree on PYTHONPATH")
    with open(PYPROJECT) as f:
        (want,) = re.findall(r'(?m)^version = "([^"]+)"$', f.read())
    assert tapead.__version__ == want
    init = os.path.join(ROOT, "tapead", "__init__.py")
    with open(init) as f:
        assert want not in f.read()       # one place: no second copy to drift


def test_exceptions_are_public_and_print_their_public_path():
    import traceback
    import tapead
    import tapead.errors as E
    for name in E.__all__:
        cls = getattr(E, name)
        assert cls.__module__ == "tapead.errors" and issubclass(cls, E.TapeadError)
    for name in ("TapeadError", "TapeError", "AnomalyError", "GuardError"):
        assert getattr(tapead, name) is getattr(E, name)
    with tapead.no_grad():
        y = tapead.Value(2.0) * 3
    with pytest.raises(tapead.TapeadError) as info:
        y.backward()
    assert traceback.format_exception_only(info.type, info.value)[0].startswith("tapead.errors.TapeadError: ")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is 3.11+")
@pytest.mark.skipif(not os.path.isfile(PYPROJECT), reason="needs the source tree")
def test_every_subpackage_is_packaged():
    """Wheels carry every package under tapead/ (tapead.codegen, tapead._c,
    any added later): pyproject.toml finds them by pattern, not by a list
    that a new subpackage would have to join."""
    import fnmatch
    import pkgutil
    import tomllib
    import tapead
    with open(PYPROJECT, "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    assert not isinstance(setup["packages"], list), "a fixed list of packages misses every new subpackage"
    include = setup["packages"]["find"]["include"]
    pkgs = ["tapead"] + [m.name for m in pkgutil.walk_packages(tapead.__path__, "tapead.") if m.ispkg]
    assert "tapead.codegen" in pkgs and "tapead._c" in pkgs
    assert [p for p in pkgs if not any(fnmatch.fnmatchcase(p, pat) for pat in include)] == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is 3.11+")
@pytest.mark.skipif(not os.path.isfile(PYPROJECT), reason="needs the source tree")
def test_metadata_says_what_an_index_page_shows():
    """The classifiers an index and its search read: typed (py.typed ships),
    the maturity, the audience, the operating system CI runs on; keywords."""
    import tomllib
    with open(PYPROJECT, "rb") as f:
        meta = tomllib.load(f)["project"]
    cls = meta["classifiers"]
    assert "Typing :: Typed" in cls and "Operating System :: POSIX :: Linux" in cls
    for prefix in ("Development Status :: ", "Intended Audience :: "):
        assert any(c.startswith(prefix) for c in cls), prefix
    assert "automatic differentiation" in meta["keywords"]


def test_dir_shows_the_api_not_the_modules_own_helpers():
    import tapead
    for name in ("ModuleType", "TYPE_CHECKING", "annotations"):
        assert name not in dir(tapead) and not hasattr(tapead, name), name
    assert set(tapead.__all__) <= set(dir(tapead))
