"""Shared test set-up.

No test touches the network: an autouse fixture points every Hugging Face cache
at a fresh temporary folder and turns on offline mode.  Hub tests populate that
cache themselves from the committed fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models"
REFERENCES = FIXTURES / "references"


@pytest.fixture(autouse=True)
def _isolated_hf_cache(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(home / "inference4py"))  # fused graphs stay in the test's tmp
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield


def load_reference(name: str) -> dict:
    with open(REFERENCES / f"{name}.json", encoding="utf-8") as fh:
        return json.load(fh)
