"""The source tree's own promises: a row of the op table without all its
rules does not compile, and the compiler names the missing rule."""
import os
import shutil
import subprocess
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
CC = (sysconfig.get_config_var("CC") or "cc").split()[0]


@pytest.mark.skipif(not os.path.isdir(CSRC), reason="needs the source tree")
@pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")
def test_an_op_row_without_its_rules_is_a_compile_error_naming_them(tmp_path):
    src = tmp_path / "csrc"
    shutil.copytree(CSRC, src)
    with open(src / "ops.def", "a") as f:
        f.write('TA_OP(NEWOP,   UN,   "newop")\n')
    out = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", str(src / "higher.c")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    for rule in ("fwd_NEWOP", "d_NEWOP", "e_NEWOP", "d2_NEWOP"):
        assert rule in out.stderr, out.stderr
    ok = subprocess.run([CC, "-std=c99", "-fsyntax-only", "-w", os.path.join(CSRC, "higher.c")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
