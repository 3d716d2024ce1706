"""Bad model folders and hub situations give our own errors with a fix in the message."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import (
    ConfigurationError,
    HubError,
    Inference4pyError,
    ModelFilesMissingError,
    ModelLoadError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from tests.conftest import MODELS, load_reference
from tests.hubserver import FakeHub, populate_cache

REF = load_reference("decoder")["models"]


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(MODELS / name, dst)
    return dst


def build(folder):
    return OnnxTextGenerator.builder().model_path(folder).build()


def test_missing_folder():
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        build("/nonexistent/model/folder")


def test_folder_without_onnx_lists_what_is_missing(tmp_path):
    folder = _copy("gpt2", tmp_path)
    (folder / "model.onnx").unlink()
    with pytest.raises(ModelFilesMissingError) as info:
        build(folder)
    message = str(info.value)
    assert "model.onnx" in message and "Found:" in message and "tokenizer.json" in message
    assert info.value.missing


def test_folder_without_tokenizer_lists_what_is_missing(tmp_path):
    folder = _copy("gpt2", tmp_path)
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        (folder / name).unlink()
    with pytest.raises(ModelFilesMissingError) as info:
        build(folder)
    assert "tokenizer.json" in str(info.value)


def test_corrupt_onnx_file(tmp_path):
    folder = _copy("gpt2", tmp_path)
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelLoadError, match="download"):
        build(folder)


def test_garbage_onnx_file(tmp_path):
    folder = _copy("gpt2", tmp_path)
    (folder / "model.onnx").write_text("this is not a model")
    with pytest.raises(ModelLoadError, match="corrupt"):
        build(folder)


def test_corrupt_config_json(tmp_path):
    folder = _copy("gpt2", tmp_path)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        build(folder)


def test_encoder_decoder_folder_is_not_a_decoder():
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        build(MODELS / "t5")


def test_graph_without_cache_is_refused(tmp_path):
    import onnx

    folder = _copy("gpt2", tmp_path)
    model = onnx.load(str(folder / "model.onnx"))
    # A graph whose inputs have other names: e.g. an encoder-only / classifier export.
    for node_input in model.graph.input:
        if node_input.name == "input_ids":
            node_input.name = "tokens"
    for node in model.graph.node:
        node.input[:] = ["tokens" if i == "input_ids" else i for i in node.input]
    onnx.save(model, str(folder / "model.onnx"))
    with pytest.raises(UnsupportedModelError, match="input_ids"):
        build(folder)


def test_missing_chat_template_when_messages_are_given():
    gen = build(MODELS / "gpt2")
    with pytest.raises(ConfigurationError, match="chat_template"):
        gen.generate([{"role": "user", "content": "hi"}])


def test_invalid_sampling_values_at_the_builder():
    b = OnnxTextGenerator.builder()
    with pytest.raises(ConfigurationError, match="temperature"):
        b.temperature(-0.5)
    with pytest.raises(ConfigurationError, match=r"top_p.*\(0, 1\]"):
        b.top_p(1.5)
    with pytest.raises(ConfigurationError, match="top_p"):
        b.top_p(0.0)
    with pytest.raises(ConfigurationError, match="top_k"):
        b.top_k(-1)
    with pytest.raises(ConfigurationError, match="max_new_tokens"):
        b.max_new_tokens(0)
    with pytest.raises(ConfigurationError, match="repetition_penalty"):
        b.repetition_penalty(0)
    gen = build(MODELS / "gpt2")
    with pytest.raises(ConfigurationError, match="min_p"):
        gen.generate("hello", min_p=2.0)
    with pytest.raises(ConfigurationError, match="Unknown generation option"):
        gen.generate("hello", temprature=0.5)


def test_preset_without_model_needs_a_source():
    with pytest.raises(ConfigurationError, match="model_id"):
        OnnxTextGenerator.gemma2().build()


def test_closed_generator():
    gen = build(MODELS / "gpt2")
    gen.close()
    with pytest.raises(Inference4pyError, match="closed"):
        gen.generate("hello")


def test_errors_are_also_stdlib_types():
    assert issubclass(ModelNotFoundError, FileNotFoundError)
    assert issubclass(ConfigurationError, ValueError)


# --------------------------------------------------------------------------- hub


def _fixture_files(name: str) -> dict[str, Path]:
    return {p.name: p for p in (MODELS / name).iterdir() if p.is_file()}


def test_preset_resolves_from_a_prepopulated_cache_offline():
    case = REF["gpt2"]["cases"][0]
    populate_cache(os.environ["HF_HUB_CACHE"], "inference4j/gpt2", _fixture_files("gpt2"))
    with OnnxTextGenerator.gpt2().max_new_tokens(case["max_new_tokens"]).build() as gen:
        assert list(gen.generate(case["prompt"]).token_ids) == case["output_ids"]
    gen = OnnxTextGenerator.from_pretrained("inference4j/gpt2", max_new_tokens=case["max_new_tokens"])
    assert list(gen.generate(case["prompt"]).token_ids) == case["output_ids"]


def test_offline_with_an_empty_cache_is_a_clear_error():
    with pytest.raises(HubError, match="inference4py pull inference4j/gpt2"):
        OnnxTextGenerator.gpt2().build()


def test_download_through_the_hub_client_then_offline(monkeypatch):
    """A real huggingface_hub download (from a local fake Hub), then the same model offline."""
    files = {name: path.read_bytes() for name, path in _fixture_files("qwen2").items()}
    files["onnx/model_quantized.onnx"] = b"not needed"
    case = REF["qwen2"]["cases"][0]
    from tests.hubserver import hub_client_online, reset_hub_client

    with FakeHub({"inference4j/qwen2.5-1.5b-instruct": files}) as fake:
        hub_client_online(monkeypatch)  # also inside huggingface_hub, which froze HF_HUB_OFFLINE=1 at import
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        with OnnxTextGenerator.qwen2().max_new_tokens(case["max_new_tokens"]).build() as gen:
            assert gen.encode_prompt(case["prompt"]) != case["prompt_ids"]  # the preset renders its chat template
            assert list(gen.generate(case["prompt_ids"]).token_ids) == case["output_ids"]
        assert "onnx/model_quantized.onnx" not in fake.downloaded("inference4j/qwen2.5-1.5b-instruct")
    reset_hub_client()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with OnnxTextGenerator.qwen2().max_new_tokens(4).build() as gen:
        assert gen.generate("hi").generated_tokens <= 4


@pytest.mark.parametrize(
    "settings", [{"do_sample": False}, {"do_sample": True, "top_k": 5}, {"do_sample": True, "top_k": 0, "top_p": 0.9}]
)
def test_nan_logits_raise_a_clear_error(settings):
    """A graph that overflows (NaN logits) is reported, never turned into token 0 or a numpy error."""
    import numpy as np

    from inference4py import OnnxTextGenerator
    from inference4py.errors import InferenceError

    def poison(ids, logits):
        out = logits.copy()
        if ids.shape[1] >= 6:  # from the third generated token on (the prompt has 4 tokens)
            out[:] = np.nan
        return out

    with OnnxTextGenerator.builder().model_path(MODELS / "llama").logits_processor(poison).build() as gen:
        prompt = gen.encode_prompt("The old house")[:4]
        with pytest.raises(InferenceError, match="NaN logits"):
            gen.generate(prompt, max_new_tokens=6, seed=1, **settings)
