"""Fast by default: an optimum export is fused on first load, cached by content, and checked before reuse."""

from __future__ import annotations

import json
import logging

import pytest

from inference4py import OnnxTextGenerator
from inference4py.optimize import folder as folder_module
from tests.conftest import FIXTURES

MODELS = FIXTURES / "models"
FUSABLE = ["llama", "llama-fp16", "llama-h16", "mistral", "phi3", "qwen2", "qwen2-h16", "qwen3"]
UNFUSABLE = ["gpt2", "gpt2-inference4j", "gemma", "llama-merged"]  # run as they are
PROMPTS = ["The quick brown fox", "one two three four one two three"]


def _ids(gen: OnnxTextGenerator) -> list[tuple[int, ...]]:
    return [tuple(gen.generate(p, max_new_tokens=12, do_sample=False).token_ids) for p in PROMPTS]


def _entries(cache):
    root = cache / "fused"
    return sorted(p for p in root.iterdir() if (p / ".inference4py-fused").is_file()) if root.is_dir() else []


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", FUSABLE)
def test_the_default_load_runs_the_fused_copy_with_the_exports_ids(name, cache):
    with OnnxTextGenerator.builder().model_path(MODELS / name).fuse_attention(False).build() as plain:
        want = _ids(plain)
        assert not plain._runtime.shared_kv
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        assert gen._runtime.shared_kv, "the default load did not fuse"
        assert _entries(cache) == [gen.folder]
        assert _ids(gen) == want


@pytest.mark.parametrize("name", UNFUSABLE)
def test_a_graph_the_optimizer_does_not_recognise_runs_as_it_is_and_the_refusal_is_remembered(
    name, cache, monkeypatch, caplog
):
    with (
        caplog.at_level(logging.INFO, logger="inference4py.optimize"),
        OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen,
    ):
        assert gen.folder == MODELS / name
    assert any("unfused" in r.message for r in caplog.records)

    def never(*args, **kwargs):
        raise AssertionError("the refusal was not remembered")

    monkeypatch.setattr(folder_module, "optimize_folder", never)
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as again:
        assert again.folder == MODELS / name
    assert _entries(cache) == []


def _fuse_once(cache):
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        return gen.folder, _ids(gen)


def test_a_cached_copy_is_reused_without_fusing_again(cache, monkeypatch):
    first, want = _fuse_once(cache)

    def never(*args, **kwargs):
        raise AssertionError("fused again")

    monkeypatch.setattr(folder_module, "optimize_folder", never)
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        assert gen.folder == first
        assert _ids(gen) == want


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing", "foreign", "marker"])
def test_a_corrupt_or_foreign_cache_entry_is_rebuilt_not_trusted(damage, cache, caplog):
    first, want = _fuse_once(cache)
    graph = first / "model.onnx"
    data = graph.read_bytes()
    if damage == "truncated":
        graph.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # same size, one byte changed
        i = len(data) // 2
        graph.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
    elif damage == "missing":
        graph.unlink()
    elif damage == "foreign":  # another model's fused copy under this model's key
        with OnnxTextGenerator.builder().model_path(MODELS / "llama").build() as other:
            other_graph = (other.folder / "model.onnx").read_bytes()
        graph.write_bytes(other_graph)
    else:
        marker = first / ".inference4py-fused"
        info = json.loads(marker.read_text())
        info["source_sha256"] = "0" * 64
        marker.write_text(json.dumps(info))
    with (
        caplog.at_level(logging.WARNING, logger="inference4py.optimize"),
        OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen,
    ):
        assert gen.folder == first
        assert _ids(gen) == want
    assert any("rebuilding" in r.message for r in caplog.records)
    assert (first / "model.onnx").read_bytes() == data


def test_an_edited_source_gets_a_new_copy(cache, tmp_path):
    import shutil

    source = tmp_path / "qwen2"
    shutil.copytree(MODELS / "qwen2", source)
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        first = gen.folder
    config = json.loads((source / "config.json").read_text())
    config["rms_norm_eps"] = config.get("rms_norm_eps", 1e-6) * 10
    (source / "config.json").write_text(json.dumps(config))
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        assert gen.folder != first
    assert len(_entries(cache)) == 2
