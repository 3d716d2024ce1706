"""benchmarks/roof.py's bytes per decoded token, on tiny fixtures, against sums computed here from the files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from benchmarks.roof import KvGeometry, gguf_weight_bytes, kv_geometry, onnx_weight_bytes

MODELS = Path(__file__).parent / "fixtures" / "models"
GGUF = Path(__file__).parent / "fixtures" / "gguf"


def _initializers(path: Path, tmp: Path) -> dict[str, np.ndarray]:
    # a copy: onnx refuses external data files with several hard links (fixtures may share theirs with caches)
    copy = tmp / path.parent.name
    shutil.copytree(path.parent, copy)
    model = onnx.load(str(copy / path.name))  # external data loaded: the real arrays
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_unfused_export_reads_everything_but_the_embedding_table(tmp_path: Path) -> None:
    arrays = _initializers(MODELS / "llama" / "model.onnx", tmp_path)
    embedding = arrays["model.embed_tokens.weight"]  # [vocab 1200, hidden 32], only read by the Gather
    total = sum(a.nbytes for a in arrays.values())
    weights = onnx_weight_bytes(MODELS / "llama" / "model.onnx")
    assert weights.total == total
    assert weights.tables == ("model.embed_tokens.weight",)
    assert weights.row_indexed == embedding.nbytes == 1200 * 32 * 4
    assert weights.per_token == total - embedding.nbytes + 32 * 4  # one row of the table


def test_genai_int4_graph_counts_packed_weights_and_rotary_caches_by_row(tmp_path: Path) -> None:
    path = MODELS / "genai-llama-int4" / "model.onnx"
    arrays = _initializers(path, tmp_path)
    total = sum(a.nbytes for a in arrays.values())
    tables = ("model.embed_tokens.weight", "cos_cache", "sin_cache")  # Gather data; GroupQueryAttention caches
    weights = onnx_weight_bytes(path)
    assert weights.total == total
    assert sorted(weights.tables) == sorted(tables)
    assert weights.row_indexed == sum(arrays[n].nbytes for n in tables)
    one_row = sum(arrays[n].nbytes // arrays[n].shape[0] for n in tables)
    assert weights.per_token == total - weights.row_indexed + one_row
    # the int4 head (MatMulNBits, uint8 blocks) is read whole, at its packed size
    assert arrays["lm_head.MatMul.weight_Q4"].dtype == np.uint8
    assert weights.per_token > arrays["lm_head.MatMul.weight_Q4"].nbytes


def test_gguf_embedding_is_one_row_when_untied_and_whole_when_tied() -> None:
    gguf = pytest.importorskip("gguf")
    # Llama fixture: its own output.weight, so token_embd is only gathered; [32 x 1200] Q8_0 = 1200 rows of
    # 32 values = one 34-byte block (32 int8 + an fp16 scale) each
    untied = gguf.GGUFReader(str(GGUF / "model-llama-Q8_0.gguf"))
    sizes = {t.name: int(t.n_bytes) for t in untied.tensors}
    assert "output.weight" in sizes and sizes["token_embd.weight"] == 1200 * 34
    weights = gguf_weight_bytes(GGUF / "model-llama-Q8_0.gguf")
    assert weights.total == sum(sizes.values())
    assert weights.tables == ("token_embd.weight",)
    assert weights.per_token == weights.total - 1200 * 34 + 34
    # Gemma 3 fixture: tied (no output.weight), llama.cpp multiplies by token_embd for the logits: read whole
    tied = gguf.GGUFReader(str(GGUF / "model-gemma3-Q8_0.gguf"))
    sizes = {t.name: int(t.n_bytes) for t in tied.tensors}
    assert "output.weight" not in sizes
    weights = gguf_weight_bytes(GGUF / "model-gemma3-Q8_0.gguf")
    assert weights.total == weights.per_token == sum(sizes.values())
    assert weights.tables == ()


def test_kv_bytes_follow_layers_heads_and_sliding_windows() -> None:
    config = json.loads((MODELS / "llama" / "config.json").read_text())
    geometry = kv_geometry(MODELS / "llama", 4)
    layers, kv_heads = config["num_hidden_layers"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert geometry.bytes_per_token(100) == layers * 2 * kv_heads * head_dim * 4 * 100
    local = KvGeometry(windows=(8, None), kv_heads=1, head_dim=4, elem_bytes=2)
    assert local.bytes_per_token(100) == 2 * 4 * 2 * (8 + 100)


def test_an_inference4py_row_on_a_gguf_file_reads_the_graph_it_converted_to(tmp_path: Path) -> None:
    # sizes.py records the GGUF file as the row's folder; the peer reports the folder it loaded
    from benchmarks.roof import rows_from_results

    gguf_file = next(GGUF.glob("*.gguf"))
    row = {"status": "ok", "decode_tps": 10.0, "info": {"model_folder": str(MODELS / "llama")}}
    saved = {
        "spec": {"lengths": [8], "new_tokens": 4},
        "results": {
            "llama": {
                "provenance": {},
                "rows": {
                    "inference4py": {"folder": str(MODELS / "llama"), "precision": "fp32"},
                    "inference4py[gguf-fp32]": {"folder": str(gguf_file), "precision": "fp32"},
                },
                "results": {"8": {"inference4py": {**row, "info": {}}, "inference4py[gguf-fp32]": row}},
            }
        },
    }
    path = tmp_path / "sizes-test.json"
    path.write_text(json.dumps(saved), encoding="utf-8")
    plain, converted = rows_from_results(path)
    assert Path(converted.path) == Path(plain.path) == MODELS / "llama" / "model.onnx"
    assert converted.weight_bytes_per_token == onnx_weight_bytes(MODELS / "llama" / "model.onnx").per_token
