"""The build: the operator library is optional, and an install without it says why once and goes on.

setup.py's build step runs here in a copy of the project's build files: with
``INFERENCE4PY_NO_COMPILE=1`` (as a machine with no compiler) and with a compiler that does not
exist, it must succeed, print one line naming the reason and the fix, and build nothing; with the
real compiler it must build the library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    work = tmp_path / "project"
    (work / "inference4py").mkdir(parents=True)
    shutil.copy(ROOT / "setup.py", work)
    shutil.copytree(ROOT / "csrc", work / "csrc")
    run = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=work,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return run, list((work / "inference4py").glob("_ggml_ops*"))


def test_no_compile_installs_without_the_library_and_says_why_once(tmp_path: Path) -> None:
    run, built = build(tmp_path, INFERENCE4PY_NO_COMPILE="1")
    assert run.returncode == 0, run.stderr
    assert not built
    said = [line for line in run.stderr.splitlines() if "compiled ggml operators were not built" in line]
    assert len(said) == 1 and "INFERENCE4PY_NO_COMPILE" in said[0] and "MatMulNBits" in said[0]


def test_a_missing_compiler_installs_without_the_library(tmp_path: Path) -> None:
    run, built = build(tmp_path, CC="/nonexistent/cc", CXX="/nonexistent/c++", LDSHARED="/nonexistent/c++ -shared")
    assert run.returncode == 0, run.stderr
    assert not built
    assert run.stderr.count("compiled ggml operators were not built") == 1


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no C++ compiler here")
def test_with_a_compiler_the_library_is_built(tmp_path: Path) -> None:
    run, built = build(tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(built) == 1 and built[0].stat().st_size > 0
