"""Single-pass pipelines: a sentence encoder is detected as one ``init`` session, described and refused by
the generation runtimes with a pointer to OnnxEmbedder, and an embedder reads its graph from a description."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from inference4py import BartSummarizer, OnnxEmbedder, OnnxTextGenerator
from inference4py.engine.pipeline import load_pipeline
from inference4py.errors import PipelineSpecError, UnsupportedModelError
from tests.conftest import FIXTURES

SBERT = FIXTURES / "models" / "sentence-bert"
TEXTS = ["a short one", "a somewhat longer sentence about pipelines"]


def test_a_sentence_encoder_is_detected_as_a_single_pass_pipeline():
    spec = load_pipeline(SBERT)
    assert spec.preset == "single-pass"
    assert spec.roles == {"encoder": "encoder"} and spec.session("encoder").file == "onnx/model.onnx"
    described = spec.describe()
    assert described["pipeline"]["flow"] == [{"run": "encoder", "when": "init"}]
    assert "state" not in described["pipeline"]  # no KV cache, no cross cache: nothing runs after it


@pytest.mark.parametrize("task", [OnnxTextGenerator, BartSummarizer])
def test_generation_tasks_refuse_it_naming_the_embedder(task):
    with pytest.raises(UnsupportedModelError, match=r"single-pass model .*OnnxEmbedder"):
        task.builder().model_path(SBERT).build()


def test_an_embedder_reads_its_graph_from_a_single_pass_description(tmp_path):
    folder = tmp_path / "described"
    shutil.copytree(SBERT, folder)
    (folder / "encoder").mkdir()
    (folder / "onnx" / "model.onnx").rename(folder / "encoder" / "sbert.onnx")
    description = {
        "version": 1,
        "pipeline": {"extends": "single-pass", "sessions": {"encoder": {"file": "encoder/sbert.onnx"}}},
    }
    (folder / "inference4py.json").write_text(json.dumps(description))
    assert load_pipeline(folder).session("encoder").file == "encoder/sbert.onnx"
    with (
        OnnxEmbedder.builder().model_path(SBERT).build() as plain,
        OnnxEmbedder.builder().model_path(folder).build() as described,
    ):
        assert np.array_equal(described.embed(TEXTS), plain.embed(TEXTS))


def test_an_embedder_refuses_a_generation_description(tmp_path):
    folder = tmp_path / "wrong"
    shutil.copytree(SBERT, folder)
    (folder / "inference4py.json").write_text(
        json.dumps(
            {
                "version": 1,
                "pipeline": {"extends": "autoregressive-decoder", "sessions": {"decoder": {"file": "onnx/model.onnx"}}},
            }
        )
    )
    with pytest.raises((UnsupportedModelError, PipelineSpecError)):
        OnnxEmbedder.builder().model_path(folder).build()


def test_a_single_init_session_with_anything_else_still_needs_a_decoder(tmp_path):
    folder = tmp_path / "two"
    shutil.copytree(SBERT, folder)
    description = {
        "version": 2,
        "pipeline": {
            "sessions": {"encoder": {"file": "onnx/model.onnx"}, "post": {"file": "onnx/model.onnx"}},
            "flow": [{"run": "encoder", "when": "init"}, {"run": "post", "when": "final"}],
        },
    }
    (folder / "inference4py.json").write_text(json.dumps(description))
    with pytest.raises(PipelineSpecError, match='exactly one "step" session'):
        load_pipeline(folder)
