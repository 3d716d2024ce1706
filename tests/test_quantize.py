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


def test_tied_output_projection_is_quantized_too(tmp_path):
    """A MatMul reading Transpose(embedding) (tied embeddings) gets int4 weights like the others."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from inference4py.quantize import _fold_weight_transposes

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((64, 32)).astype(np.float32)  # [vocab, hidden]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["emb"], ["emb_t"]), helper.make_node("MatMul", ["x", "emb_t"], ["logits"])],
        "tied",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(emb, "emb")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert _fold_weight_transposes(model) == 1
    assert [n.op_type for n in model.graph.node] == ["MatMul"]
    folded = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}[model.graph.node[0].input[1]]
    assert np.array_equal(folded, emb.T)
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src / "model.onnx"))
    quantize_folder(src, tmp_path / "out", block_size=16)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "out" / "model.onnx")).graph.node]
    assert ops == ["MatMulNBits"]
