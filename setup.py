"""Builds inference4py's compiled onnxruntime operators for ggml blocks (csrc/ggml_ops), when it can.

Everything else is in pyproject.toml. The operators are an optional part: with no C++ compiler
(or with ``INFERENCE4PY_NO_COMPILE=1``) the install still succeeds, and GGUF files run on
onnxruntime's own MatMulNBits layout instead (slower, larger; ``inference4py inspect`` says which).
The library is a plain shared object that onnxruntime loads with
``SessionOptions.register_custom_ops_library``; Python never imports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_SOURCES = sorted(str(p.as_posix()) for p in Path("csrc/ggml_ops").glob("*.cpp"))
_SKIP = os.environ.get("INFERENCE4PY_NO_COMPILE", "").strip().lower() in ("1", "true", "yes", "on")


class OptionalBuildExt(build_ext):
    """Builds the operator library, and on any failure says so once and carries on without it."""

    _said = False

    def run(self) -> None:
        if _SKIP:
            self._skipped("INFERENCE4PY_NO_COMPILE is set")
            return
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001  (no compiler, a failed compile: the install goes on)
            self._skipped(f"{type(exc).__name__}: {exc}")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skipped(f"{type(exc).__name__}: {exc}")

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # not a Python module: no PyInit_ symbol (onnxruntime looks up RegisterCustomOps)

    @classmethod
    def _skipped(cls, reason: str) -> None:
        if cls._said:
            return
        cls._said = True
        print(
            "inference4py: the compiled ggml operators were not built "
            f"({reason}); GGUF files will run on onnxruntime's MatMulNBits layout (slower, larger). "
            "Install a C++ compiler (apt-get install g++, or pip install ziglang and CXX='python -m ziglang c++') "
            "and reinstall to get them.",
            file=sys.stderr,
        )


_FLAGS = ["-O3", "-std=c++17", "-ffp-contract=off", "-fvisibility=hidden", "-fno-math-errno"]

setup(
    ext_modules=[
        Extension(
            "inference4py._ggml_ops",
            sources=_SOURCES,
            depends=[str(p.as_posix()) for p in Path("csrc/ggml_ops").glob("*.[hi]*")],
            language="c++",
            extra_compile_args=_FLAGS,
            extra_link_args=["-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
