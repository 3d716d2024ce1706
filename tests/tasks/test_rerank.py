"""OnnxReranker on a tiny random cross-encoder (tools/fixtures/reranker.py): scores equal transformers'
AutoModelForSequenceClassification logits on the same weights, and the ranking is theirs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inference4py import OnnxReranker, RankedDocument
from inference4py.errors import ConfigurationError, InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.tasks.kinds import capabilities, model_kind
from tests.conftest import load_reference

FOLDER = Path(__file__).parent.parent / "fixtures" / "models" / "cross-encoder"
REF = load_reference("reranker")


@pytest.fixture(scope="module")
def reranker():
    with OnnxReranker.builder().model_path(FOLDER).build() as model:
        yield model


@pytest.mark.parametrize("q", range(len(REF["queries"])))
def test_scores_equal_transformers_sequence_classification(reranker, q):
    scores = reranker.score(REF["queries"][q], REF["documents"])
    assert scores.dtype == np.float32 and scores.shape == (len(REF["documents"]),)
    np.testing.assert_allclose(scores, REF["scores"][q], atol=1e-5, rtol=0)


def test_pairs_are_tokenized_as_transformers_does_longest_first(reranker):
    assert reranker.max_length == REF["max_length"]
    for query in REF["queries"]:
        pairs = reranker.tokenize(query, REF["documents"])
        assert [list(p.ids) for p in pairs] == REF["input_ids"][query]
        assert any(len(p.ids) == REF["max_length"] for p in pairs)  # some were cut
        assert all(p.type_ids[0] == 0 and p.type_ids[-1] == 1 for p in pairs)  # query segment 0, document 1


def test_rerank_sorts_best_first_and_keeps_top_n(reranker):
    query, docs = REF["queries"][0], REF["documents"]
    expected = sorted(range(len(docs)), key=lambda i: -REF["scores"][0][i])
    ranking = reranker.rerank(query, docs)
    assert [r.index for r in ranking] == expected
    assert all(isinstance(r, RankedDocument) and r.document == docs[r.index] for r in ranking)
    assert [r.index for r in reranker.rerank(query, docs, top_n=2)] == expected[:2]
    assert len(reranker.rerank(query, docs, top_n=100)) == len(docs)


@pytest.mark.parametrize("batch_size", [1, 2, 7])
def test_a_score_does_not_depend_on_its_batch(reranker, batch_size):
    alone = [reranker.score(REF["queries"][1], [doc])[0] for doc in REF["documents"]]
    batched = reranker.score(REF["queries"][1], REF["documents"], batch_size=batch_size)
    np.testing.assert_allclose(batched, alone, atol=1e-6, rtol=0)


def test_pairs_of_several_queries_score_in_one_call(reranker):
    pairs = [p for q in REF["queries"] for p in reranker.tokenize(q, REF["documents"])]
    np.testing.assert_allclose(reranker.score_pairs(pairs), np.ravel(REF["scores"]), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "query,documents,top_n,match",
    [
        ("q", [], None, "empty list"),
        ("q", "a single string", None, "list of str"),
        ("q", ["ok", 3], None, r"documents\[1\] is of type int"),
        (None, ["ok"], None, "query must be a str"),
        ("q", ["ok"], 0, "top_n must be an integer >= 1"),
        ("q", ["ok"], True, "top_n must be an integer >= 1"),
    ],
)
def test_bad_inputs_are_refused_naming_them(reranker, query, documents, top_n, match):
    with pytest.raises(InvalidInputError, match=match):
        reranker.rerank(query, documents, top_n=top_n)


def test_builder_options_are_checked_and_shown():
    with pytest.raises(ConfigurationError, match="max_length"):
        OnnxReranker.builder().max_length(1)
    with pytest.raises(ConfigurationError, match="batch_size"):
        OnnxReranker.builder().batch_size(0)
    assert repr(OnnxReranker.msMarcoMiniLML6V2().batch_size(4)) == (
        "RerankerBuilder(preset='msMarcoMiniLML6V2', model_id='cross-encoder/ms-marco-MiniLM-L-6-v2', batch_size=4)"
    )
    assert "BAAI/bge-reranker-base" in repr(OnnxReranker.bgeRerankerBase())


def test_max_length_option_cuts_shorter(tmp_path):
    with OnnxReranker.builder().model_path(FOLDER).max_length(12).build() as short:
        assert max(len(p.ids) for p in short.tokenize("a query", REF["documents"])) == 12


def test_the_folder_is_a_reranker_kind():
    found = model_kind(str(FOLDER))
    assert found.kind == "reranker" and capabilities("reranker") == ["rerank"]


def test_other_folders_are_refused_with_what_to_use(tmp_path):
    models = FOLDER.parent
    with pytest.raises(UnsupportedModelError, match="OnnxEmbedder"):
        OnnxReranker.builder().model_path(models / "sentence-bert").build()
    with pytest.raises(UnsupportedModelError, match="past_key_values.*OnnxTextGenerator"):
        OnnxReranker.builder().model_path(models / "gpt2").build()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFilesMissingError, match="no .onnx file.*cross-encoder exported"):
        OnnxReranker.builder().model_path(tmp_path / "empty").build()
    several = tmp_path / "labels"
    shutil.copytree(FOLDER, several)
    config = json.loads((several / "config.json").read_text())
    config["id2label"] = {"0": "no", "1": "yes"}
    (several / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="2 labels"):
        OnnxReranker.builder().model_path(several).build()


XLMR = FOLDER.parent / "cross-encoder-xlmr"
XLMR_REF = load_reference("reranker_xlmr")


def test_the_bge_reranker_layout_xlm_roberta_without_token_types():
    """As BAAI/bge-reranker-base: XLM-R's pair template, pad id 1, 2 positions more than tokens, no token_type_ids."""
    assert model_kind(str(XLMR)).kind == "reranker"
    with OnnxReranker.builder().model_path(XLMR).build() as reranker:
        assert reranker.max_length == XLMR_REF["max_length"] == 64  # 66 positions hold 64 tokens
        for q, query in enumerate(XLMR_REF["queries"]):
            pairs = reranker.tokenize(query, XLMR_REF["documents"])
            assert [list(p.ids) for p in pairs] == XLMR_REF["input_ids"][query]
            scores = reranker.score(query, XLMR_REF["documents"], batch_size=3)
            np.testing.assert_allclose(scores, XLMR_REF["scores"][q], atol=1e-5, rtol=0)
