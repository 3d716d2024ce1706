"""A hand-written description renames sessions and KV tensors; detection finds the same spec.

The graph is a fixture's model.onnx with its cache inputs/outputs renamed (``kv_in.{i}.k`` ->
``kv_out.{i}.k``) by the ``onnx`` package at test time, saved under a name no exporter uses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.pipeline import DESCRIPTION_FILE, detect_pipeline, load_pipeline
from tests.conftest import MODELS, load_reference

REF = load_reference("architectures")["models"]["mistral"]

DESCRIPTION = {
    "version": 1,
    "pipeline": {
        "extends": "autoregressive-decoder",
        "sessions": {"language_model": {"file": "lm.onnx"}},
        "flow": [{"run": "language_model", "when": "step"}],
        "state": {
            "kv_cache": {
                "format": "separate",
                "past_key_pattern": "kv_in.{layer}.k",
                "past_value_pattern": "kv_in.{layer}.v",
                "present_key_pattern": "kv_out.{layer}.k",
                "present_value_pattern": "kv_out.{layer}.v",
            },
            "position_ids": {"strategy": "default"},
        },
    },
    "metadata": {"model_type": "a model inference4py has never heard of", "source": "hand-written"},
}


def _rename(name: str) -> str:
    for old, new in (("past_key_values.", "kv_in."), ("present.", "kv_out.")):
        if name.startswith(old):
            name = new + name[len(old) :]
    return name.replace(".key", ".k").replace(".value", ".v")


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    onnx = pytest.importorskip("onnx")
    folder = tmp_path_factory.mktemp("renamed")
    for f in (MODELS / "mistral").iterdir():
        if f.suffix != ".onnx":
            shutil.copyfile(f, folder / f.name)
    model = onnx.load(str(MODELS / "mistral" / "model.onnx"))
    graph = model.graph
    for value in [*graph.input, *graph.output]:
        value.name = _rename(value.name)
    for node in graph.node:
        node.input[:] = [_rename(n) for n in node.input]
        node.output[:] = [_rename(n) for n in node.output]
    onnx.save(model, str(folder / "lm.onnx"))
    return folder


@pytest.fixture()
def described(renamed, tmp_path) -> Path:
    folder = tmp_path / "described"
    shutil.copytree(renamed, folder)
    (folder / DESCRIPTION_FILE).write_text(json.dumps(DESCRIPTION), encoding="utf-8")
    return folder


def test_the_graph_really_is_renamed(renamed):
    from inference4py.engine.graph_io import read_graph_io

    inputs, outputs = read_graph_io(renamed / "lm.onnx")
    assert "kv_in.0.k" in inputs and "kv_out.1.v" in outputs
    assert not any(n.startswith(("past_key_values", "present")) for n in [*inputs, *outputs])


def test_the_description_runs_the_model_like_transformers(described):
    spec = load_pipeline(described)
    assert spec.source == DESCRIPTION_FILE
    assert spec.roles == {"decoder": "language_model"}
    with OnnxTextGenerator.builder().model_path(described).build() as gen:
        assert [e.input for e in gen._runtime.layout.self_entries][:2] == ["kv_in.0.k", "kv_in.0.v"]
        for case in REF["cases"]:
            if case["kind"] != "text" or set(case["settings"]) != {"do_sample"} or not case["prompt"]:
                continue
            result = gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"], do_sample=False)
            assert list(result.token_ids) == case["output_ids"], case["name"]


def test_detection_without_the_description_resolves_the_same_spec(described, renamed):
    from dataclasses import replace

    declared = load_pipeline(described)
    detected = detect_pipeline(described)  # ignores inference4py.json
    assert detected.source == "detected"
    assert detected.session("decoder").file == "lm.onnx"  # found by its inputs/outputs, not its name
    # Position strategy "default" was a choice of the description; detection says "auto" (same behaviour here).
    declared = replace(declared, state=replace(declared.state, position_ids=detected.state.position_ids))
    assert declared.normalized() == detected.normalized()
    plain = load_pipeline(renamed)
    assert plain.normalized() == replace(detected, folder=renamed).normalized()
    case = REF["cases"][0]
    with OnnxTextGenerator.builder().model_path(renamed).build() as gen:
        assert list(gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"]).token_ids) == case["output_ids"]


def test_a_wrong_pattern_in_the_description_names_the_fix(described):
    broken = json.loads((described / DESCRIPTION_FILE).read_text(encoding="utf-8"))
    broken["pipeline"]["state"]["kv_cache"]["present_value_pattern"] = "kv_out.{layer}.value"
    (described / DESCRIPTION_FILE).write_text(json.dumps(broken), encoding="utf-8")
    from inference4py.errors import PipelineSpecError

    with pytest.raises(PipelineSpecError, match=r"'kv_in.0.v' but no output 'kv_out.0.value'.*present_\* pattern"):
        OnnxTextGenerator.builder().model_path(described).build()
