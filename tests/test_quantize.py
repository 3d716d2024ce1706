"""inference4py quantize: MatMulNBits int4 graphs that the engine runs."""

from __future__ import annotations

import pytest

from inference4py import OnnxTextGenerator
from inference4py.cli import main
from inference4py.errors import ConfigurationError, ModelNotFoundError
from inference4py.quantize import quantize_folder
from tests.conftest import MODELS


def test_quantized_folder_runs_and_uses_matmulnbits(tmp_path, capsys):
    out = tmp_path / "qwen2-int4"
    assert main(["quantize", str(MODELS / "qwen2"), str(out), "--block-size", "16"]) == 0
    assert str(out / "model.onnx") in capsys.readouterr().out
    graph = (out / "model.onnx").read_bytes()
    assert b"MatMulNBits" in graph
    assert len(graph) < (MODELS / "qwen2" / "model.onnx").stat().st_size
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    with OnnxTextGenerator.builder().model_path(out).build() as gen:
        vocab = gen._runtime.vocab_size
        result = gen.generate("The old house", max_new_tokens=8)
    assert result.generated_tokens == 8 or result.finish_reason == "eos"
    assert all(0 <= t < vocab for t in result.token_ids)


def test_quantize_errors(tmp_path):
    with pytest.raises(ConfigurationError, match="bits"):
        quantize_folder(MODELS / "qwen2", tmp_path / "x", bits=3)
    with pytest.raises(ConfigurationError, match="block_size"):
        quantize_folder(MODELS / "qwen2", tmp_path / "x", block_size=24)
    with pytest.raises(ConfigurationError, match="differ"):
        quantize_folder(MODELS / "qwen2", MODELS / "qwen2")
    with pytest.raises(ModelNotFoundError):
        quantize_folder(tmp_path / "missing", tmp_path / "x")
