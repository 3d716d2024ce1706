"""Shared set-up of the inference4py_genai tests.

They need onnxruntime-genai (``pip install -e ".[test,genai]"``).  Without it each
module is skipped with that reason (``pytest.importorskip``), which ``-ra``
(pytest's addopts in pyproject.toml) prints in the summary; test_import.py checks
the error raised when it is missing and always runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FIXTURES, load_reference

SKIP_REASON = 'onnxruntime-genai is not installed: pip install -e ".[test,genai]" to run the inference4py_genai tests'


def require_genai() -> Any:
    """Import inference4py_genai, or skip the calling module with SKIP_REASON when onnxruntime-genai is missing."""
    import importlib

    pytest.importorskip("onnxruntime_genai", reason=SKIP_REASON)
    return importlib.import_module("inference4py_genai")


def reference(name: str) -> dict[str, Any]:
    """The entry of references/genai.json for one fixture folder."""
    return load_reference("genai")["models"][name]


def folder(name: str):
    return FIXTURES / "models" / name
