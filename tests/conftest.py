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


@pytest.fixture
def online(monkeypatch):
    """Offline mode off, also inside huggingface_hub (which froze HF_HUB_OFFLINE at import), for the tests
    that talk to the fake Hub of tests/hubserver.py."""
    from tests.hubserver import hub_client_online, reset_hub_client

    hub_client_online(monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    yield
    reset_hub_client()


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


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if opened %}<think>\n{% endif %}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
    "{# a reasoning model writes <think>...</think> before its answer #}"
)


def thinking_copy(root: Path, *, opened: bool) -> Path:
    """The qwen2 fixture with a reasoning model's chat template (``<think>`` ... ``</think>``).

    ``opened``: the template opens the block in the generation prompt (as DeepSeek-R1's does), so the
    output starts inside it.
    """
    folder = long_context_copy(root)
    template = THINKING_TEMPLATE.replace("{% if opened %}", "{% if true %}" if opened else "{% if false %}")
    (folder / "chat_template.jinja").write_text(template)
    return folder


def scripted(tokenizer, text: str, *, end: str = "<|im_end|>"):
    """A logits processor that makes a random model write ``text`` and stop (its last token forced to ``end``).

    It finds how much of the script the sequence already ends with, and forces the next token.
    """
    import numpy as np

    script = tokenizer.encode(text, add_special_tokens=False)
    eos = tokenizer.token_to_id(end)

    def force(input_ids, scores):
        ids = list(np.asarray(input_ids)[0])
        done = next((k for k in range(len(script), 0, -1) if ids[-k:] == script[:k]), 0)
        out = np.full_like(scores, -np.inf)
        out[:, script[done] if done < len(script) else eos] = 0.0
        return out

    return force
