"""PipelineSpec: the description format, presets, sources, detection and load-time validation."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from inference4py.engine.pipeline import (
    DESCRIPTION_FILE,
    PRESETS,
    PipelineSpec,
    detect_pipeline,
    load_pipeline,
    resolve_description,
    schema_path,
    translate_genai_config,
)
from inference4py.errors import ModelFilesMissingError, ModelNotFoundError, PipelineSpecError
from tests.conftest import MODELS


def _generates(folder: Path) -> bool:
    """A folder with a graph that outputs logits (not a single-pass model such as a sentence encoder, nor a
    cross-encoder, whose logits are its classes' scores)."""
    from inference4py.engine.graph_io import read_graph_io

    config = folder / "config.json"
    architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures", []) if config.is_file() else []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return False
    return any((io := read_graph_io(f)) is not None and "logits" in io[1] for f in folder.rglob("*.onnx"))


ALL_FOLDERS = sorted(p.name for p in MODELS.iterdir() if p.is_dir() and _generates(p))


def test_genai_speech_folders_are_refused_with_the_backend_to_use():
    """genai folders with speech sessions run only on inference4py_genai (vision-language ones translate)."""
    raw = {"model": {"decoder": {"filename": "d.onnx"}, "speech": {"filename": "s.onnx"}}}
    with pytest.raises(PipelineSpecError, match="speech sessions.*inference4py_genai"):
        translate_genai_config(raw)


def copy_model(name: str, dest: Path, *, rename: dict[str, str] | None = None) -> Path:
    """A copy of a fixture folder (files renamed as asked), to add or break things in."""
    rename = rename or {}
    src = MODELS / name
    for f in src.rglob("*"):
        if f.is_file():
            rel = f.relative_to(src)
            target = dest / rel.parent / rename.get(f.name, f.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    return dest


def write_description(folder: Path, description: dict) -> Path:
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    return folder


def minimal(**pipeline) -> dict:
    return {"version": 1, "pipeline": {"extends": "autoregressive-decoder", **pipeline}}


# --------------------------------------------------------------------------- sources and resolution


@pytest.mark.parametrize("name", ALL_FOLDERS)
def test_every_fixture_resolves_and_its_description_loads_back_to_the_same_spec(name, tmp_path):
    spec = load_pipeline(MODELS / name)
    assert spec.has("decoder")
    assert spec.state.kv_cache.names is not None, "the KV names are resolved from the graph before any session exists"
    described = spec.describe()
    json.dumps(described)  # JSON-able
    folder = write_description(copy_model(name, tmp_path / name), described)
    again = load_pipeline(folder)
    assert again.source == DESCRIPTION_FILE
    assert again.normalized() == replace_folder(spec, folder).normalized()


def replace_folder(spec: PipelineSpec, folder: Path) -> PipelineSpec:
    from dataclasses import replace

    return replace(spec, folder=folder)


@pytest.mark.parametrize("name", ALL_FOLDERS)
def test_described_specs_validate_against_the_published_schema(name):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(load_pipeline(MODELS / name).describe(), schema)


def test_schema_ships_as_package_data():
    assert schema_path().is_file()
    assert schema_path().parent.name == "engine"
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    assert set(schema["properties"]["pipeline"]["properties"]["extends"]["enum"]) == set(PRESETS)


def test_a_minimal_description_expands_its_preset(tmp_path):
    folder = write_description(
        copy_model("llama", tmp_path / "m"), {"version": 1, "pipeline": {"extends": "autoregressive-decoder"}}
    )
    spec = load_pipeline(folder)
    assert spec.source == DESCRIPTION_FILE
    assert spec.preset == "autoregressive-decoder"
    assert spec.sessions["decoder"].file == "model.onnx"
    assert spec.flow == {"step": ("decoder",)}
    assert spec.state.kv_cache.names.pairs[0] == ("past_key_values.{layer}.key", "present.{layer}.key")
    assert spec.normalized() == detect_pipeline(folder).normalized()


def test_user_fields_override_the_preset(tmp_path):
    folder = copy_model("llama", tmp_path / "m", rename={"model.onnx": "lm.onnx"})
    description = {
        "version": 1,
        "pipeline": {
            "extends": "autoregressive-decoder",
            "sessions": {"decoder": {"file": "lm.onnx", "session_options": {"intra_op_num_threads": 1}}},
            "context_length": 64,
            "state": {"position_ids": {"strategy": "default"}},
        },
        "tokens": {"eos": [2, 5], "pad": 0},
        "generation": {"max_new_tokens": 7, "repetition_penalty": 1.1},
        "metadata": {"model_type": "whatever-it-is", "source": "hand-written"},
    }
    spec = load_pipeline(write_description(folder, description))
    assert spec.session("decoder").file == "lm.onnx"
    assert spec.session("decoder").options == {"intra_op_num_threads": 1}
    assert spec.context_length == 64
    assert spec.state.position_ids.strategy == "default"
    assert spec.state.kv_cache.format == "separate"  # still detected: the override touched position_ids only
    assert spec.tokens.eos == (2, 5)
    # Declared values win; the rest comes from generation_config.json (bos here).
    assert spec.generation_defaults() == {
        "max_new_tokens": 7,
        "repetition_penalty": 1.1,
        "eos_token_id": [2, 5],
        "pad_token_id": 0,
        "bos_token_id": 1,
    }
    assert spec.metadata["model_type"] == "whatever-it-is"


def test_description_tokens_and_generation_reach_the_task_defaults(tmp_path):
    from inference4py import OnnxTextGenerator

    folder = write_description(
        copy_model("llama", tmp_path / "m"),
        {
            "version": 1,
            "pipeline": {"extends": "autoregressive-decoder", "context_length": 100},
            "tokens": {"eos": [7, 2]},
            "generation": {"max_new_tokens": 3, "repetition_penalty": 1.2},
        },
    )
    with OnnxTextGenerator.builder().model_path(folder).build() as gen:
        assert gen.generation_config.eos_token_id == (7, 2)
        assert gen.generation_config.repetition_penalty == 1.2
        assert gen._runtime.max_positions == 100
        assert gen.generate("The old house").generated_tokens <= 3
    # The builder still wins over the description.
    with OnnxTextGenerator.builder().model_path(folder).repetition_penalty(1.0).build() as gen:
        assert gen.generation_config.repetition_penalty == 1.0


def test_detected_spec_reports_tokens_and_model_type_as_found():
    spec = detect_pipeline(MODELS / "qwen2")
    assert spec.source == "detected"
    assert spec.tokens.eos == (1002, 1000)
    assert spec.metadata["model_type"] == "qwen2"
    assert spec.describe()["metadata"]["resolved_from"] == "detected"


def test_detection_rules_on_the_layouts():
    assert load_pipeline(MODELS / "llama-merged").sessions["decoder"].file == "decoder_model_merged.onnx"
    t5 = load_pipeline(MODELS / "t5-3file")
    assert t5.preset == "encoder-decoder"
    assert [(s.run, s.when, s.steps) for s in t5.steps] == [
        ("encoder", "init", "all"),
        ("decoder", "step", "first"),
        ("decoder_with_past", "step", "later"),
    ]
    assert t5.state.cross_cache.source == "encoder"
    assert t5.state.cross_cache.names.pairs[0][0] == "past_key_values.{layer}.encoder.key"
    assert load_pipeline(MODELS / "gpt2").state.position_ids.strategy == "auto"


def test_detection_by_graph_structure_when_file_names_are_unknown(tmp_path):
    folder = copy_model("qwen2", tmp_path / "m", rename={"model.onnx": "my-export.onnx"})
    spec = load_pipeline(folder)
    assert spec.source == "detected"
    assert spec.session("decoder").file == "my-export.onnx"
    seq = copy_model(
        "bart", tmp_path / "s", rename={"encoder_model.onnx": "enc.onnx", "decoder_model_merged.onnx": "dec.onnx"}
    )
    spec = load_pipeline(seq)
    assert spec.preset == "encoder-decoder"
    assert (spec.session("encoder").file, spec.session("decoder").file) == ("enc.onnx", "dec.onnx")


def test_two_candidate_decoders_ask_for_a_description(tmp_path):
    folder = copy_model("qwen2", tmp_path / "m", rename={"model.onnx": "a.onnx"})
    shutil.copyfile(folder / "a.onnx", folder / "b.onnx")
    with pytest.raises(PipelineSpecError, match=DESCRIPTION_FILE):
        load_pipeline(folder)


def test_a_folder_without_onnx_files_lists_what_it_found(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissingError, match="model.onnx"):
        load_pipeline(tmp_path)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_pipeline(tmp_path / "nope")


def test_roles_address_renamed_sessions(tmp_path):
    folder = copy_model("t5-3file", tmp_path / "m")
    spec = load_pipeline(
        write_description(
            folder,
            {
                "version": 1,
                "pipeline": {
                    "sessions": {
                        "text_encoder": {"file": "encoder_model.onnx"},
                        "prompt": {"file": "decoder_model.onnx"},
                        "loop": {"file": "decoder_with_past_model.onnx"},
                    },
                    "flow": [
                        {"run": "text_encoder", "when": "init"},
                        {"run": "prompt", "when": "step", "steps": "first"},
                        {"run": "loop", "when": "step", "steps": "later"},
                    ],
                },
            },
        )
    )
    assert spec.preset == "encoder-decoder"  # named after the structure when not given
    assert spec.roles == {"encoder": "text_encoder", "decoder": "prompt", "decoder_with_past": "loop"}
    assert spec.path("decoder_with_past") == folder / "decoder_with_past_model.onnx"
    assert spec.has("encoder") and spec.has("text_encoder") and not spec.has("vision")
    assert spec.state.cross_cache.source == "text_encoder"
    assert spec.normalized() == detect_pipeline(folder).normalized()


# --------------------------------------------------------------------------- genai_config.json


def test_genai_config_translates_to_a_description():
    raw = json.loads((MODELS / "genai-llama" / "genai_config.json").read_text(encoding="utf-8"))
    description = translate_genai_config(raw)
    assert description["pipeline"]["state"]["kv_cache"]["past_key_pattern"] == "past_key_values.{layer}.key"
    assert description["pipeline"]["state"]["position_ids"] == {"strategy": "none"}
    spec = load_pipeline(MODELS / "genai-llama")
    assert spec.source == "genai_config.json"
    assert spec.state.kv_cache.head_size == raw["model"]["decoder"]["head_size"]
    assert spec.context_length == raw["model"]["context_length"]
    assert spec.tokens.eos == (raw["model"]["eos_token_id"],)
    assert spec.generation["max_length"] == raw["search"]["max_length"]
    assert spec.metadata == {"source": "onnxruntime-genai", "model_type": raw["model"]["type"]}


def test_genai_provider_options_become_session_settings():
    raw = {
        "model": {
            "decoder": {
                "filename": "model.onnx",
                "session_options": {
                    "provider_options": [{"cuda": {"enable_cuda_graph": "0"}}],
                    "intra_op_num_threads": 2,
                },
            }
        }
    }
    session = translate_genai_config(raw)["pipeline"]["sessions"]["decoder"]
    assert session == {
        "file": "model.onnx",
        "execution_provider": "CUDAExecutionProvider",
        "provider_options": {"enable_cuda_graph": "0"},
        "session_options": {"intra_op_num_threads": 2},
    }


def test_multimodal_genai_folders_point_to_the_genai_package():
    raw = {"model": {"decoder": {"filename": "d.onnx"}, "vision": {"filename": "v.onnx"}}}
    with pytest.raises(PipelineSpecError, match="inference4py_genai"):
        translate_genai_config(raw)
    with pytest.raises(PipelineSpecError, match="model.decoder"):
        translate_genai_config({"search": {}})


def test_the_description_file_wins_over_genai_config(tmp_path):
    folder = copy_model("genai-llama", tmp_path / "m")
    write_description(folder, load_pipeline(folder).describe() | {"tokens": {"eos": [5]}})
    spec = load_pipeline(folder)
    assert spec.source == DESCRIPTION_FILE and spec.tokens.eos == (5,)


def test_a_provider_missing_from_this_build_warns_and_runs_on_cpu(tmp_path):
    from inference4py import OnnxTextGenerator

    folder = write_description(
        copy_model("gpt2", tmp_path / "m"),
        minimal(
            sessions={
                "decoder": {
                    "file": "model.onnx",
                    "execution_provider": "NoSuchExecutionProvider",
                    "session_options": {"graph_optimization_level": "basic"},
                }
            }
        ),
    )
    with pytest.warns(RuntimeWarning, match="NoSuchExecutionProvider"):
        gen = OnnxTextGenerator.builder().model_path(folder).build()
    with gen:
        assert gen._runtime.first.session.get_providers() == ["CPUExecutionProvider"]
        assert gen.generate("Hello", max_new_tokens=2).generated_tokens == 2


# --------------------------------------------------------------------------- validation


def _error(tmp_path: Path, description: dict, *, base: str = "llama", exc=PipelineSpecError) -> str:
    folder = write_description(copy_model(base, tmp_path / "m"), description)
    with pytest.raises(exc) as info:
        load_pipeline(folder)
    return str(info.value)


def test_unknown_preset_lists_the_built_in_ones(tmp_path):
    message = _error(tmp_path, {"version": 1, "pipeline": {"extends": "my-preset"}})
    assert 'unknown pipeline preset "my-preset"' in message
    assert "autoregressive-decoder, encoder-decoder, single-pass, speech-seq2seq" in message


def test_flow_naming_an_undeclared_session(tmp_path):
    message = _error(tmp_path, minimal(flow=[{"run": "vision", "when": "step"}]))
    assert 'flow step references session "vision"' in message and "declared: decoder" in message


def test_renamed_session_without_a_flow_names_the_fix(tmp_path):
    message = _error(tmp_path, minimal(sessions={"lm": {"file": "model.onnx"}}))
    assert 'session "decoder"' in message and "declared: lm" in message


def test_missing_file(tmp_path):
    message = _error(tmp_path, minimal(sessions={"decoder": {"file": "modle.onnx"}}), exc=ModelFilesMissingError)
    assert "modle.onnx" in message and "model.onnx" in message  # what was asked and what is there


@pytest.mark.parametrize("path", ["../model.onnx", "sub/../../model.onnx"])
def test_paths_leaving_the_folder_are_refused(tmp_path, path):
    shutil.copyfile(MODELS / "llama" / "model.onnx", tmp_path / "model.onnx")
    message = _error(tmp_path, minimal(sessions={"decoder": {"file": path}}))
    assert "leaves the model folder" in message


def test_absolute_paths_are_refused(tmp_path):
    message = _error(tmp_path, minimal(sessions={"decoder": {"file": str(MODELS / "llama" / "model.onnx")}}))
    assert "absolute path" in message and "relative" in message


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_links_pointing_out_of_the_folder_are_refused(tmp_path):
    folder = copy_model("llama", tmp_path / "m")
    (folder / "model.onnx").unlink()
    try:
        (folder / "model.onnx").symlink_to(MODELS / "llama" / "model.onnx")
    except OSError:
        pytest.skip("cannot create symlinks here")
    write_description(folder, minimal())
    with pytest.raises(PipelineSpecError, match="points outside the model folder"):
        load_pipeline(folder)
    # Detection applies the same rule.
    (folder / DESCRIPTION_FILE).unlink()
    with pytest.raises(PipelineSpecError, match="points outside the model folder"):
        load_pipeline(folder)


def test_links_inside_the_folder_and_hub_cache_blobs_are_fine(tmp_path):
    repo = tmp_path / "models--org--tiny"
    snapshot = repo / "snapshots" / "abc"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in (MODELS / "gpt2").iterdir():
        shutil.copyfile(f, blobs / f.name)
        try:
            (snapshot / f.name).symlink_to(blobs / f.name)
        except OSError:
            pytest.skip("cannot create symlinks here")
    assert load_pipeline(snapshot).session("decoder").file == "model.onnx"


def test_kv_input_without_matching_output(tmp_path):
    message = _error(
        tmp_path,
        minimal(
            state={
                "kv_cache": {
                    "format": "separate",
                    "past_key_pattern": "past_key_values.{layer}.key",
                    "past_value_pattern": "past_key_values.{layer}.value",
                    "present_key_pattern": "new.{layer}.key",
                    "present_value_pattern": "present.{layer}.value",
                }
            }
        ),
    )
    assert "cache input 'past_key_values.0.key' but no output 'new.0.key'" in message
    assert "present_* pattern" in message


def test_kv_patterns_matching_nothing(tmp_path):
    message = _error(
        tmp_path,
        minimal(
            state={
                "kv_cache": {"format": "combined", "past_pattern": "past_{layer}", "present_pattern": "present_{layer}"}
            }
        ),
    )
    assert "match no input" in message and '"format": "auto"' in message


def test_kv_pattern_without_layer_placeholder(tmp_path):
    message = _error(
        tmp_path,
        minimal(
            state={"kv_cache": {"format": "combined", "past_pattern": "past", "present_pattern": "present_{layer}"}}
        ),
    )
    assert "{layer}" in message


def test_unknown_position_ids_strategy(tmp_path):
    message = _error(tmp_path, minimal(state={"position_ids": {"strategy": "mrope_3d"}}))
    assert 'unknown position_ids strategy "mrope_3d"' in message and "auto, default, none" in message


def test_position_strategy_must_agree_with_the_graph(tmp_path):
    message = _error(tmp_path, minimal(state={"position_ids": {"strategy": "none"}}))
    assert 'strategy "none"' in message and "position_ids" in message
    message = _error(tmp_path / "x", minimal(state={"position_ids": {"strategy": "default"}}), base="gemma")
    assert 'strategy "default"' in message and "has no input" in message


@pytest.mark.parametrize("version", [3, 0, "1", None])
def test_unsupported_or_missing_version(tmp_path, version):
    description = {"pipeline": {"extends": "autoregressive-decoder"}}
    if version is not None:
        description["version"] = version
    message = _error(tmp_path, description)
    if version is None:
        assert '"version" is missing' in message
    else:
        assert f"has version {version!r}" in message and "reads version(s) 1, 2" in message


@pytest.mark.parametrize(
    "description,fragment",
    [
        ({"version": 1, "pipline": {}}, "unknown key(s) 'pipline'"),
        ({"version": 1, "pipeline": {"sessions": {"decoder": {"file": "model.onnx"}}}}, 'needs a "flow"'),
        ({"version": 1, "pipeline": {}}, "at least one session"),
        (minimal(sessions={"decoder": {"file": "model.onnx"}, "extra": {"file": "model.onnx"}}), "never run"),
        (minimal(flow=[{"run": "decoder", "when": "always"}]), "Valid phases: init, step, final"),
        (
            minimal(flow=[{"run": "decoder", "when": "step"}, {"run": "decoder", "when": "final"}]),
            "version 2 of the format",
        ),
        (minimal(state={"kv_cache": {"format": "paged"}}), 'unknown kv_cache format "paged"'),
        (minimal(state={"kv_cache": {"format": "auto", "past_pattern": "p{layer}"}}), '"format": "auto"'),
        (
            minimal(sessions={"decoder": {"file": "model.onnx", "session_options": {"threads": 2}}}),
            "unknown session option",
        ),
        (minimal(context_length=0), "context_length must be a positive integer"),
        ({"version": 1, "pipeline": {"extends": "autoregressive-decoder"}, "tokens": {"eos": "</s>"}}, "tokens.eos"),
        (
            {"version": 1, "pipeline": {"extends": "autoregressive-decoder"}, "generation": {"temperatur": 0.5}},
            "unknown key(s) 'temperatur'",
        ),
    ],
)
def test_other_mistakes_name_the_fix(tmp_path, description, fragment):
    assert fragment in _error(tmp_path, description)


def test_invalid_json_is_a_spec_error(tmp_path):
    folder = copy_model("llama", tmp_path / "m")
    (folder / DESCRIPTION_FILE).write_text('{"version": 1,', encoding="utf-8")
    with pytest.raises(PipelineSpecError, match="not valid JSON"):
        load_pipeline(folder)


def test_validation_happens_at_build_time_through_the_task(tmp_path):
    from inference4py import OnnxTextGenerator

    folder = write_description(copy_model("llama", tmp_path / "m"), {"version": 1, "pipeline": {"extends": "llm"}})
    with pytest.raises(PipelineSpecError, match="unknown pipeline preset"):
        OnnxTextGenerator.builder().model_path(folder).build()


def test_resolve_description_takes_a_parsed_dict(tmp_path):
    folder = copy_model("qwen2", tmp_path / "m")
    spec = resolve_description({"version": 1, "pipeline": {"extends": "autoregressive-decoder"}}, folder)
    assert spec.source == DESCRIPTION_FILE and spec.preset == "autoregressive-decoder"


# --------------------------------------------------------------------------- inspect


def test_inspect_prints_a_description_that_loads_back(tmp_path, capsys):
    from inference4py.cli import main

    assert main(["inspect", str(MODELS / "genai-qwen2")]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["metadata"]["resolved_from"] == "genai_config.json"
    assert "genai_config.json" in err
    folder = write_description(copy_model("genai-qwen2", tmp_path / "m"), printed)
    assert (
        load_pipeline(folder).normalized() == replace_folder(load_pipeline(MODELS / "genai-qwen2"), folder).normalized()
    )


def test_inspect_detect_ignores_description_files(capsys):
    from inference4py.cli import main

    assert main(["inspect", "--detect", str(MODELS / "genai-llama")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metadata"]["resolved_from"] == "detected"
    assert "detection" in err


def test_inspect_errors_are_clean(tmp_path, capsys):
    from inference4py.cli import main

    write_description(copy_model("llama", tmp_path / "m"), {"version": 9})
    assert main(["inspect", str(tmp_path / "m")]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_renamed_three_file_encoder_decoder_is_paired_by_structure(tmp_path):
    folder = copy_model("t5-3file", tmp_path / "src")
    renamed = copy_model(
        "t5-3file",
        tmp_path / "m",
        rename={
            "encoder_model.onnx": "e.onnx",
            "decoder_model.onnx": "d0.onnx",
            "decoder_with_past_model.onnx": "d1.onnx",
        },
    )
    spec = load_pipeline(renamed)
    assert spec.roles == {"encoder": "encoder", "decoder": "decoder", "decoder_with_past": "decoder_with_past"}
    assert [spec.session(r).file for r in ("encoder", "decoder", "decoder_with_past")] == [
        "e.onnx",
        "d0.onnx",
        "d1.onnx",
    ]
    assert spec.normalized().state == load_pipeline(folder).normalized().state
