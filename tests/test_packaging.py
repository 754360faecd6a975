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
