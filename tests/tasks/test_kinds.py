"""model_kind: the one dispatcher of model sources (server, batch runner)."""

from __future__ import annotations

import pytest

from inference4py.errors import ModelNotFoundError
from inference4py.tasks.kinds import capabilities, model_kind
from tests.conftest import FIXTURES, MODELS


@pytest.mark.parametrize(
    "name,kind,model_type",
    [
        ("gpt2", "decoder", "gpt2"),
        ("genai-llama", "decoder", ""),  # a genai folder has no config.json
        ("bart", "encoder-decoder", "bart"),
        ("t5", "encoder-decoder", "t5"),
        ("marian", "encoder-decoder", "marian"),
        ("whisper", "speech", "whisper"),
        ("sentence-bert", "embedding", "bert"),
        ("llava-tiny", "vision", "llava"),  # optimum / onnx-community parts (onnx/vision_encoder.onnx)
        ("idefics3-tiny", "vision", "idefics3"),
        ("genai-phi3v", "vision", ""),  # genai_config.json with a vision session
    ],
)
def test_a_folder_is_dispatched_by_what_its_files_say(name, kind, model_type):
    found = model_kind(str(MODELS / name))
    assert (found.kind, found.model_type) == (kind, model_type)
    assert found.folder == MODELS / name


def test_what_each_kind_answers():
    assert capabilities("vision") == ["chat", "vision"]  # chats with images; no raw completions
    assert capabilities("decoder") == ["chat", "completion"]


def test_a_gguf_file_is_a_text_generator_before_conversion():
    path = next((FIXTURES / "gguf").glob("*.gguf"))
    found = model_kind(str(path))
    assert found.kind == "gguf" and found.folder is None


def test_a_missing_folder_says_so(tmp_path):
    with pytest.raises(ModelNotFoundError):
        model_kind(str(tmp_path / "nothing-here"))
