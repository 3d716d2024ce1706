"""OnnxEmbedder against sentence-transformers' encode() on the tiny fixture (tools/fixtures/embedding.py).

The committed folder is sentence-transformers' own save() (mean pooling + Normalize, current config
format) with its encoder exported to onnx/model.onnx.  The other pooling set-ups reuse that graph:
the test rewrites modules.json and 1_Pooling/config.json in the older format the Hub's repos use,
and compares with the vectors encode() gave for the same set-up.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from inference4py import EmbedderBuilder, OnnxEmbedder
from inference4py.errors import (
    ConfigurationError,
    GeneratorClosedError,
    InvalidInputError,
    ModelFilesMissingError,
    ModelNotFoundError,
    PromptTooLongError,
    UnsupportedModelError,
)
from inference4py.hub import select_model_files
from inference4py.tasks.embedding import is_embedding_model
from tests.conftest import MODELS, load_reference
from tests.hubserver import FakeHub, hub_client_online, populate_cache, reset_hub_client

FOLDER = MODELS / "sentence-bert"
REF = load_reference("embedding")
TEXTS: list[str] = REF["texts"]
TOL = 1e-5


def _expected(variant: str) -> np.ndarray:
    return np.asarray(REF["variants"][variant]["embeddings"], dtype=np.float32)


@pytest.fixture(scope="module")
def embedder():
    with OnnxEmbedder.builder().model_path(FOLDER).build() as model:
        yield model


def _variant_folder(tmp_path: Path, variant: str) -> Path:
    """The fixture with the pooling set-up of ``variant``, written as older sentence-transformers did."""
    folder = tmp_path / variant
    shutil.copytree(FOLDER, folder)
    spec = REF["variants"][variant]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if spec["normalize"]:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(spec["pooling"]), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": REF["max_seq_length"], "do_lower_case": False}), encoding="utf-8"
    )
    return folder


# --------------------------------------------------------------------------- equal to encode()
def test_equals_sentence_transformers_encode_mean_pooling_normalized(embedder):
    vectors = embedder.embed(TEXTS)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(vectors, _expected("mean_normalize"), atol=TOL, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_the_folder_is_read_as_sentence_transformers_saved_it(embedder):
    assert embedder.pooling == ("mean",)
    assert embedder.normalize is True
    assert embedder.max_seq_length == REF["max_seq_length"] == 16
    assert embedder.dimension == 32
    assert repr(embedder) == "OnnxEmbedder(model='sentence-bert', pooling='mean', normalize=True, max_seq_length=16)"


@pytest.mark.parametrize("variant", sorted(set(REF["variants"]) - {"mean_normalize"}))
def test_other_pooling_configs_equal_encode(tmp_path, variant):
    with OnnxEmbedder.builder().model_path(_variant_folder(tmp_path, variant)).build() as model:
        vectors = model.embed(TEXTS, batch_size=3)
    expected = _expected(variant)
    assert vectors.shape == expected.shape
    np.testing.assert_allclose(vectors, expected, atol=TOL, rtol=0)


def test_variants_really_differ():
    # the comparison above would be weak if every pooling gave the same vectors
    variants = list(REF["variants"])
    for i, a in enumerate(variants):
        for b in variants[i + 1 :]:
            x, y = _expected(a), _expected(b)
            assert x.shape != y.shape or np.abs(x - y).max() > 1e-2, (a, b)
    rows = _expected("mean_normalize")
    assert np.abs(rows[0] - rows[3]).max() > 1e-2  # different texts, different vectors


def test_builder_pooling_and_normalize_override_the_folder():
    builder = OnnxEmbedder.builder().model_path(FOLDER).pooling("cls").normalize(False)
    assert repr(builder) == f"EmbedderBuilder(model_path={str(FOLDER)!r}, pooling=('cls',), normalize=False)"
    with builder.build() as model:
        np.testing.assert_allclose(model.embed(TEXTS), _expected("cls"), atol=TOL, rtol=0)
    with OnnxEmbedder.builder().model_path(FOLDER).pooling(["cls", "mean"]).build() as model:
        np.testing.assert_allclose(model.embed(TEXTS), _expected("cls_mean_concat"), atol=TOL, rtol=0)


# --------------------------------------------------------------------------- batching and shapes
def test_batched_equals_one_by_one_and_keeps_the_order(embedder):
    alone = np.stack([embedder.embed(text) for text in TEXTS])
    for batch_size in (1, 2, 3, 5, len(TEXTS), 64):
        np.testing.assert_allclose(embedder.embed(TEXTS, batch_size=batch_size), alone, atol=1e-6, rtol=0)
    reordered = [TEXTS[i] for i in (5, 0, 7, 2)]
    np.testing.assert_allclose(embedder.embed(reordered), alone[[5, 0, 7, 2]], atol=1e-6, rtol=0)


def test_padding_is_masked_out(embedder):
    # a short text batched with the longest one is padded to 16 positions
    short, long_text = TEXTS[3], TEXTS[7]
    together = embedder.embed([short, long_text], batch_size=2)
    assert len(embedder.tokenize([short])[0]) < len(embedder.tokenize([long_text])[0])
    np.testing.assert_allclose(together[0], embedder.embed(short), atol=1e-6, rtol=0)


def test_a_single_str_gives_one_vector(embedder):
    vector = embedder.embed(TEXTS[0])
    assert vector.shape == (32,)
    np.testing.assert_allclose(vector, _expected("mean_normalize")[0], atol=TOL, rtol=0)
    assert embedder.embed([TEXTS[0]]).shape == (1, 32)


def test_tuple_input_and_duplicates(embedder):
    vectors = embedder.embed((TEXTS[1], TEXTS[1]))
    np.testing.assert_array_equal(vectors[0], vectors[1])


def test_dimensions_keeps_the_first_values_renormalized(embedder):
    full = embedder.embed(TEXTS)
    short = embedder.embed(TEXTS, dimensions=8)
    assert short.shape == (len(TEXTS), 8)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(short, expected, atol=1e-6, rtol=0)
    for bad in (0, 33, 2.5):
        with pytest.raises(InvalidInputError, match="dimensions must be an integer from 1 to 32"):
            embedder.embed(TEXTS, dimensions=bad)


# --------------------------------------------------------------------------- truncation
def test_long_texts_are_truncated_to_max_seq_length(embedder):
    ids = embedder.tokenize(TEXTS)
    assert max(len(row) for row in ids) == 16
    assert len(ids[1]) == 16 and len(ids[0]) < 16
    cls, sep = ids[0][0], ids[0][-1]
    assert ids[1][0] == cls and ids[1][-1] == sep  # special tokens kept, content cut


def test_too_long_without_truncation_is_an_error_naming_the_fix():
    with OnnxEmbedder.builder().model_path(FOLDER).truncate(False).build() as model:
        assert model.embed(TEXTS[0]).shape == (32,)
        with pytest.raises(PromptTooLongError) as err:
            model.embed([TEXTS[0], TEXTS[1]])
    message = str(err.value)
    assert "Text 1 has" in message and "more than the model's max_seq_length of 16" in message
    assert "leave truncation on" in message
    total = int(message.split("has ")[1].split(" tokens")[0])
    assert total > 16


def test_builder_max_seq_length_overrides_the_folder():
    with OnnxEmbedder.builder().model_path(FOLDER).max_seq_length(8).build() as model:
        assert max(len(r) for r in model.tokenize(TEXTS)) == 8
        assert not np.allclose(model.embed(TEXTS[1]), _expected("mean_normalize")[1], atol=1e-3)


# --------------------------------------------------------------------------- token ids
def test_embed_tokenized_equals_embed(embedder):
    ids = embedder.tokenize(TEXTS)
    np.testing.assert_array_equal(embedder.embed_tokenized(ids), embedder.embed(TEXTS))


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([], InvalidInputError, "non-empty list of id lists"),
        ([[]], InvalidInputError, r"token_ids\[0\] must be a non-empty list"),
        ([[2, "x"]], InvalidInputError, "not an integer token id"),
        ([[2, 10**6]], InvalidInputError, "outside the vocabulary"),
        ([[2] * 17], PromptTooLongError, "17 tokens, more than the model's max_seq_length of 16"),
    ],
)
def test_bad_token_ids(embedder, ids, error, message):
    with pytest.raises(error, match=message):
        embedder.embed_tokenized(ids)


# --------------------------------------------------------------------------- bad input and bad folders
@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "texts is an empty list: give at least one text"),
        (["ok", 3], r"texts\[1\] is of type int, not str"),
        ([None], r"texts\[0\] is of type NoneType"),
        (b"bytes", "Decode bytes first"),
        (42, "texts must be a str or a list of str, got int"),
    ],
)
def test_bad_texts_are_invalid_input(embedder, texts, message):
    with pytest.raises(InvalidInputError, match=message):
        embedder.embed(texts)


def test_bad_batch_size_at_call(embedder):
    with pytest.raises(InvalidInputError, match="batch_size must be an integer >= 1"):
        embedder.embed(TEXTS, batch_size=0)


@pytest.mark.parametrize(
    ("setter", "value", "message"),
    [
        ("pooling", "avg", "pooling \\['avg'\\] is not supported"),
        ("pooling", [], "is not supported"),
        ("batch_size", 0, "batch_size must be an integer >= 1"),
        ("max_seq_length", 1, "max_seq_length must be an integer >= 2"),
        ("model_id", "", "model_id must be a non-empty string"),
        ("variant", "", "variant must be a non-empty string"),
    ],
)
def test_builder_validates_each_value(setter, value, message):
    with pytest.raises(ConfigurationError, match=message):
        getattr(OnnxEmbedder.builder(), setter)(value)


def test_no_model_chosen():
    with pytest.raises(ConfigurationError, match=r"call \.model_id\('org/name'\) or \.model_path"):
        OnnxEmbedder.builder().build()


def test_folder_without_a_model_names_what_it_found(tmp_path):
    folder = tmp_path / "no-model"
    folder.mkdir()
    for name in ("tokenizer.json", "modules.json"):
        shutil.copy(FOLDER / name, folder / name)
    (folder / "model_quantized.onnx").write_bytes(b"x")
    with pytest.raises(ModelFilesMissingError) as err:
        OnnxEmbedder.builder().model_path(folder).build()
    message = str(err.value)
    assert f"No model.onnx in {folder}" in message and "ONNX files found: model_quantized.onnx" in message
    assert "variant=" in message and "optimum-cli export onnx" in message
    assert err.value.missing == ["model.onnx"]


def test_missing_folder_is_model_not_found(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        OnnxEmbedder.builder().model_path(tmp_path / "absent").build()


def test_a_text_generator_is_refused():
    with pytest.raises(UnsupportedModelError, match="For text generation use OnnxTextGenerator"):
        OnnxEmbedder.builder().model_path(MODELS / "gpt2").build()


def test_missing_pooling_config_and_unknown_modules(tmp_path):
    folder = _variant_folder(tmp_path, "cls")
    (folder / "1_Pooling" / "config.json").unlink()
    with pytest.raises(ModelFilesMissingError, match="lists a Pooling module in 1_Pooling/ but .* is missing"):
        OnnxEmbedder.builder().model_path(folder).build()
    modules = json.loads((FOLDER / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    dense = tmp_path / "dense"
    shutil.copytree(FOLDER, dense)
    (dense / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsupportedModelError, match=r"does not run: Dense \(3_Dense\)"):
        OnnxEmbedder.builder().model_path(dense).build()
    (dense / "1_Pooling" / "config.json").write_text('{"pooling_mode": "median"}')
    (dense / "modules.json").write_text((FOLDER / "modules.json").read_text())
    with pytest.raises(UnsupportedModelError, match=r"asks for pooling \['median'\]"):
        OnnxEmbedder.builder().model_path(dense).build()


def test_bare_export_without_sentence_transformers_files_gets_mean_pooling(tmp_path):
    folder = tmp_path / "bare"
    shutil.copytree(FOLDER, folder)
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        (folder / name).unlink()
    shutil.rmtree(folder / "1_Pooling")
    shutil.rmtree(folder / "2_Normalize", ignore_errors=True)  # an empty folder: git does not keep it
    assert is_embedding_model(folder)
    with OnnxEmbedder.builder().model_path(folder).build() as model:
        assert model.pooling == ("mean",) and model.normalize is False
        assert model.max_seq_length == 16  # the tokenizer's model_max_length
        raw = model.embed(TEXTS)
    normalized = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(normalized, _expected("mean_normalize"), atol=TOL, rtol=0)
    assert np.abs(np.linalg.norm(raw, axis=1) - 1).max() > 0.1  # not normalized without the module


def test_is_embedding_model():
    assert is_embedding_model(FOLDER)
    assert not is_embedding_model(MODELS / "gpt2")
    assert not is_embedding_model(MODELS / "t5")


def test_closed_embedder_refuses_work():
    model = OnnxEmbedder.builder().model_path(FOLDER).build()
    model.close()
    with pytest.raises(GeneratorClosedError, match="was closed"):
        model.embed("hello")


# --------------------------------------------------------------------------- presets through the hub code
def _repo_files() -> dict[str, Path]:
    """The fixture as a Hub repo laid out like sentence-transformers/all-MiniLM-L6-v2 (no root model.onnx)."""
    files = {p.relative_to(FOLDER).as_posix(): p for p in FOLDER.rglob("*") if p.is_file()}
    return files


def test_preset_records_its_repo():
    assert isinstance(OnnxEmbedder.allMiniLML6V2(), EmbedderBuilder)
    assert repr(OnnxEmbedder.allMiniLML6V2()) == (
        "EmbedderBuilder(preset='allMiniLML6V2', model_id='sentence-transformers/all-MiniLM-L6-v2')"
    )
    assert "BAAI/bge-small-en-v1.5" in repr(OnnxEmbedder.bgeSmallEnV15())


def test_preset_loads_offline_from_the_cache():
    populate_cache(Path(os.environ["HF_HUB_CACHE"]), "sentence-transformers/all-MiniLM-L6-v2", _repo_files())
    with OnnxEmbedder.allMiniLML6V2().build() as model:
        assert model.name == "sentence-transformers/all-MiniLM-L6-v2"
        assert model.pooling == ("mean",) and model.normalize
        np.testing.assert_allclose(model.embed(TEXTS), _expected("mean_normalize"), atol=TOL, rtol=0)


def test_hub_selection_takes_the_sentence_transformers_configs():
    listing = [
        *_repo_files(),
        "README.md",
        "model.safetensors",
        "pytorch_model.bin",
        "onnx/model_qint8_avx512.onnx",
        "openvino/openvino_model.xml",
        "2_Dense/config.json",
        "2_Dense/model.safetensors",
    ]
    chosen = select_model_files(listing)
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "onnx/model.onnx"} <= set(chosen)
    assert "2_Dense/config.json" in chosen and "2_Dense/model.safetensors" not in chosen
    assert not any(f.endswith((".bin", ".safetensors", ".xml")) or "qint8" in f for f in chosen)
    # without modules.json a numbered folder is not taken
    assert "1_Pooling/config.json" not in select_model_files(["model.onnx", "1_Pooling/config.json"])


def test_preset_downloads_what_it_needs_from_a_hub(monkeypatch):
    repo = {name: path.read_bytes() for name, path in _repo_files().items()}
    repo.update({"pytorch_model.bin": b"torch weights", "onnx/model_O4.onnx": b"optimized graph"})
    hub_client_online(monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    try:
        with FakeHub({"BAAI/bge-small-en-v1.5": repo}) as hub:
            monkeypatch.setenv("HF_ENDPOINT", hub.url)
            with OnnxEmbedder.bgeSmallEnV15().build() as model:
                vectors = model.embed(TEXTS)
            fetched = hub.downloaded("BAAI/bge-small-en-v1.5")
    finally:
        reset_hub_client()
    assert {"onnx/model.onnx", "modules.json", "1_Pooling/config.json", "tokenizer.json"} <= fetched
    assert "pytorch_model.bin" not in fetched and "onnx/model_O4.onnx" not in fetched
    np.testing.assert_allclose(vectors, _expected("mean_normalize"), atol=TOL, rtol=0)


# --------------------------------------------------------------------------- other graph layouts
def test_a_graph_that_pools_itself_is_taken_as_is(tmp_path):
    """An export ending in sentence_embedding (here: mean pooling appended with onnx) is not pooled again."""
    import onnx
    from onnx import TensorProto, helper

    folder = tmp_path / "pooled"
    shutil.copytree(FOLDER, folder)
    graph_file = folder / "onnx" / "model.onnx"
    model = onnx.load(str(graph_file))
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["pool_mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["pool_mask", "pool_axis2"], ["pool_mask3"]),
        helper.make_node("Mul", ["last_hidden_state", "pool_mask3"], ["pool_masked"]),
        helper.make_node("ReduceSum", ["pool_masked", "pool_axis1"], ["pool_sum"], keepdims=0),
        helper.make_node("ReduceSum", ["pool_mask3", "pool_axis1"], ["pool_count"], keepdims=0),
        helper.make_node("Div", ["pool_sum", "pool_count"], ["sentence_embedding"]),
    ]
    model.graph.initializer.extend(
        [
            helper.make_tensor("pool_axis1", TensorProto.INT64, [1], [1]),
            helper.make_tensor("pool_axis2", TensorProto.INT64, [1], [2]),
        ]
    )
    model.graph.node.extend(nodes)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", 32]))
    onnx.save(model, str(graph_file))
    assert is_embedding_model(folder)
    with OnnxEmbedder.builder().model_path(folder).build() as pooled:
        assert pooled.pooling is None and pooled.normalize  # Normalize still comes from modules.json
        assert "pooling='in-graph'" in repr(pooled)
        np.testing.assert_allclose(pooled.embed(TEXTS, batch_size=3), _expected("mean_normalize"), atol=TOL, rtol=0)
    with pytest.raises(ConfigurationError, match="outputs only pooled sentence embeddings"):
        OnnxEmbedder.builder().model_path(folder).pooling("cls").build()


def test_variant_picks_that_graph(tmp_path):
    folder = tmp_path / "variant"
    shutil.copytree(FOLDER, folder)
    (folder / "onnx" / "model.onnx").rename(folder / "onnx" / "model_quantized.onnx")
    with OnnxEmbedder.builder().model_path(folder).variant("quantized").build() as model:
        np.testing.assert_allclose(model.embed(TEXTS), _expected("mean_normalize"), atol=TOL, rtol=0)
    with pytest.raises(ModelFilesMissingError, match="ONNX files found: onnx/model_quantized.onnx"):
        OnnxEmbedder.builder().model_path(folder).build()
