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


def long_context_copy(root: Path, kind: str = "qwen2", positions: int = 1024) -> Path:
    """A copy of fixture model ``kind`` under ``root`` with a ``positions``-token context.

    Qwen2.5's tool prompt alone is ~400 tokens, past the fixtures' 128. The qwen2 export computes the
    rotary angles in the graph, so longer positions are valid.
    """
    import shutil

    folder = root / kind
    shutil.copytree(FIXTURES / "models" / kind, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = positions
    (folder / "config.json").write_text(json.dumps(config))
    return folder
